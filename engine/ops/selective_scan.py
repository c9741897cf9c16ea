"""Selective scan (Mamba S6) with the SiLU gate fused, forward and backward.

    h_t = exp(delta_t * A) * h_{t-1} + delta_t * B_t * u_t         h: (e, n) per batch row
    y_t = <h_t, C_t> + D * u_t
    out_t = y_t * silu(z_t)

Shapes: u, delta, z (b, l, e); A_log (e, n) with A = -exp(A_log); B, C (b, l, n); D (e,)
        -> out (b, l, e), h_last (b, e, n) (the state after the last step, for the recurrent cache).
Backward returns du, ddelta, dz (b, l, e); dA_log (e, n); dB, dC (b, l, n); dD (e,).
Step (generation): ``selective_scan_step`` advances a state h (b, e, n) by one position with the same
update and the same scalar helpers (``scan_decay``, ``sigmoid``) as the forward kernel. The kernels
take A in the units of ``scan_decay`` (``_decay_rates``: times log2(e) in float32, whose decays are
powers of 2; as is in float64).

Document boundaries: an optional ``reset`` (b, l) mask (bool or uint8), True at the first position
of each document of a packed row, zeroes the state before that position: h_t = delta_t B_t u_t, so
no state (and no gradient) crosses a boundary. ``reset=None`` is the plain scan.

Kernels run in parallel over jobs = (batch row, chunk of channels: ``CHUNK`` in the forward,
``BWD_CHUNK`` in the backward); time is sequential and the (n, CHUNK) state lives in a small local
buffer. The forward's inner loops run over exactly ``CHUNK`` channels (a compile-time constant: no
remainder loops; 1.1-1.25x faster, measured); the wrappers zero-pad e to a multiple of CHUNK when
needed (padded channels have u = delta = D = z = 0: no state, nothing added to dB, dC). The forward
stores nothing but its outputs; the backward recomputes each job's states and decays exp(delta_t A)
into private (l + 2, n, cw) and (l, n, cw) buffers (2 MiB each at l=256, cw=128, 1 MiB at 64; the
reverse step then computes no exp), computes the gate's gradients in that forward pass, and walks
back in time (two positions per pass where the CPU has 32 vector registers, one where it has 16)
with the reverse recurrence (derived in docs/derivations/selective_scan_backward.md):

    g_t = dy_t * C_t + exp(delta_{t+1} A) * g_{t+1}
    dC_t = sum_e dy_t h_t     dB_t = sum_e g_t delta_t u_t     dD = sum_t dy_t u_t
    du_t = sum_n g_t delta_t B_t + D dy_t
    ddelta_t = sum_n g_t (A exp(delta_t A) h_{t-1} + B_t u_t)
    dA = sum_t g_t delta_t exp(delta_t A) h_{t-1};    dA_log = dA * A
computed as w_t = g_t exp(delta_t A) h_{t-1} = g_t (h_t - delta_t u_t B_t) and
gb_t = sum_n g_t B_t, so du_t = D dy_t + delta_t gb_t and ddelta_t = u_t gb_t + sum_n A w_t
(fewer multiplies and memory streams per (t, e, n) element: measured 15-17 % faster).
Per-job partial sums (dB, dC over channel chunks; dA, dD over batch) are reduced afterwards in NumPy,
so results are deterministic. Reference: engine/reference.py::selective_scan.
Derivation: docs/derivations/selective_scan_backward.md.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from .._jit import (
    decay_units,
    kernel,
    parallel_kernel,
    prefetch,
    scan_decay,
    sigmoid,
    specialised,
    vector_registers,
)
from ._common import check, check_wider, reset_mask

CHUNK = 64
_PF_SCAN = 2  # the backward's prefetch distances (positions ahead), measured
_PF_OUT = 12
_REGS = 0  # vector registers: a constant in each compiled copy of the backward (``_BACKWARD``)
VECTOR_REGS = vector_registers()  # the copies the backward runs: 16 (x86 without AVX-512) or 32
# The backward's job width by the CPU's vector registers (padded e is a multiple of CHUNK, so the
# last job of a row may be CHUNK wide). 16 (an AVX2 EPYC, 512 KiB L2 a core): 128; there 64 was
# 1.06-1.24x slower alone and its training steps 1.02-1.09x (round 16), 256 no faster, 512 +20 %.
# 32 (an AVX-512 Xeon, 2 MiB L2): 64; there 128 was 0.86-1.03x alone and its steps 0.96-1.005x
# (two runs, round 16). Whether registers or L2 size decide was not separable on these two.
BWD_CHUNKS = {16: 128, 32: 64}
BWD_CHUNK = BWD_CHUNKS[VECTOR_REGS]


@parallel_kernel
def _scan_forward_kernel(u, delta, At, Bm, Cm, D, z, zoff, reset, h0, out, h_last):
    """u, delta (b, l, e); z (b, l, >= zoff + e), read at columns zoff..zoff+e; At (n, e) = A.T
    in ``scan_decay``'s units (``_decay_rates``);
    Bm, Cm (b, l, n); D (e,); reset (b, l) uint8 or (b, 0) for none; h0 (b, e, n), the state
    before position 0, or (b, 0, n) for zero -> out (b, l, e), h_last (b, e, n)."""
    nb, nl, ne = u.shape
    has_reset = reset.shape[1] > 0
    has_h0 = h0.shape[1] > 0
    nn_ = At.shape[0]
    nch = ne // CHUNK
    for job in prange(nb * nch):
        b = job // nch
        c0 = (job % nch) * CHUNK
        h = np.zeros((nn_, CHUNK), u.dtype)
        if has_h0:
            for k in range(CHUNK):
                for s in range(nn_):
                    h[s, k] = h0[b, c0 + k, s]
        Aj = np.ascontiguousarray(At[:, c0 : c0 + CHUNK])
        Dj = D[c0 : c0 + CHUNK]
        dbu = np.empty(CHUNK, u.dtype)
        y = np.empty(CHUNK, u.dtype)
        for t in range(nl):
            if has_reset and reset[b, t]:
                h[:] = 0
            ut = u[b, t, c0 : c0 + CHUNK]
            dt = delta[b, t, c0 : c0 + CHUNK]
            Bt = Bm[b, t]
            Ct = Cm[b, t]
            for k in range(CHUNK):
                dbu[k] = dt[k] * ut[k]
                y[k] = Dj[k] * ut[k]
            for s in range(nn_):
                hs = h[s]
                As = Aj[s]
                bs = Bt[s]
                cs = Ct[s]
                for k in range(CHUNK):
                    hv = scan_decay(dt[k] * As[k]) * hs[k] + dbu[k] * bs
                    hs[k] = hv
                    y[k] += cs * hv
            zt = z[b, t, zoff + c0 : zoff + c0 + CHUNK]
            ot = out[b, t, c0 : c0 + CHUNK]
            for k in range(CHUNK):
                ot[k] = y[k] * zt[k] * sigmoid(zt[k])
        for k in range(CHUNK):
            for s in range(nn_):
                h_last[b, c0 + k, s] = h[s, k]


_BW = 0  # the backward's job width: a constant in each compiled copy (``_BACKWARD``)


def _scan_backward_kernel(
    dout, u, delta, At, Adt, Bm, Cm, D, z, zoff, reset, du, ddelta, dz, dA_part, dB_part,
    dC_part, dD_part, want_dA, c_first, ch_first,
):
    """dout (b, l, e) + forward inputs (At (n, e) = A.T, Adt the same in ``scan_decay``'s units: the
    forward's At) -> du, ddelta (b, l, e); dz written at the same columns of
    ``dz`` as z is read (zoff..zoff+e); dA_part (b, n, e) (left unwritten when ``want_dA`` is
    False); dB_part, dC_part (chunks, b, l, n); dD_part (b, e). A reset at t makes h_{t-1}
    count as zero (the always-zero plane ``nl + 1`` of ``hist``) and cuts the carry g (the
    kept decay of position t is zeroed, so g_t exp(delta_t A) carries nothing to t - 1).

    This call's jobs are (batch row, chunk of cw = ``_BW`` channels) from channel ``c_first`` on,
    the first of them row ``ch_first`` of dB_part and dC_part (the wrapper's count of the chunks
    before it: the kernel keeps no job width of its own but ``_BW``). ``_BW`` is a compile-time
    constant (``_BACKWARD`` holds one compiled copy per width), so the channel loops have constant
    bounds (measured 3-4 % faster); the wrapper runs BWD_CHUNK for the full chunks, then CHUNK for
    a remainder. ``_REGS`` (16 or 32, also one copy each; the wrapper runs ``VECTOR_REGS``'s) picks
    the reverse step's loop shape (pass 2).

    Three passes per job:
    1. forward in time: the states h_t (``hist``, (l + 2, n, cw)) and decays exp(delta_t A)
       (``decay``, (l, n, cw)) recomputed and kept, so the reverse step computes no exp; with
       y_t complete, the gate's gradients dy_t (kept, (l, cw)) and dz_t, and dD; delta_t u_t
       kept (l, cw). The input rows are prefetched ``_PF_SCAN`` positions ahead.
    2. backward in time, with 32 vector registers two positions per pass of the channel loop
       (the carry g, dA's sum and A read once for both), with 16 one position (faster on an
       AVX2 EPYC, measured; same results): w = g exp(delta A) h_{t-1} =
       g (h_t - delta_t u_t B_t) (the recurrence itself: no h_{t-1} read, 0 to rounding after
       a reset), and per channel the sums over states gb = sum_n g B and dd = sum_n A w, kept
       (l, cw); dB, dC summed over the channels.
    3. forward in time: du = D dy + delta gb, ddelta = u gb + dd (rows prefetched
       ``_PF_OUT`` ahead).
    Arrays are indexed directly (hist[t, s, k]) rather than through per-row views. Measured
    slower, so not kept: recomputing the decay in the reverse step (+16 %), and state checkpoints
    every 16-64 positions kept by the forward with L2-sized segment buffers here (half the exps,
    yet +20-40 %: LLVM vectorised the segment loops worse), and softplus(dt_pre + bias) with its
    backward fused into both kernels (+5-10 % against the separate softplus ops), and two states
    per pass of the reverse step's channel loop (+26 %; x2.2 with two positions), and two
    positions (no gain) or two states (+12-17 %) per pass of the recompute; round 4 in
    docs/performance.md lists the rest."""
    nb, nl, ne = u.shape
    has_reset = reset.shape[1] > 0
    nn_ = At.shape[0]
    cw = _BW
    nch = (ne - c_first) // cw
    zero = np.zeros(1, u.dtype)[0]
    one = np.ones(1, u.dtype)[0]
    for job in prange(nb * nch):
        b = job // nch
        ch = ch_first + job % nch  # index into dB_part, dC_part
        c0 = c_first + (job % nch) * cw
        Aj = np.ascontiguousarray(At[:, c0 : c0 + cw])
        Adj = np.ascontiguousarray(Adt[:, c0 : c0 + cw])
        Dj = D[c0 : c0 + cw]
        hist = np.empty((nl + 2, nn_, cw), u.dtype)  # plane nl + 1 stays zero (reset)
        hist[0] = 0
        hist[nl + 1] = 0
        decay = np.empty((nl, nn_, cw), u.dtype)
        dyk = np.empty((nl, cw), u.dtype)  # dy_t = dout_t silu'(z_t)-gated
        dbk = np.empty((nl, cw), u.dtype)  # delta_t u_t
        gbk = np.empty((nl, cw), u.dtype)  # sum_n g B
        ddk = np.empty((nl, cw), u.dtype)  # sum_n A w
        y = np.empty(cw, u.dtype)
        dD_acc = np.zeros(cw, u.dtype)
        # -- 1. recompute the states and decays; the gate's gradients
        for t in range(nl):
            if t + _PF_SCAN < nl:
                tq = t + _PF_SCAN
                for k in range(0, cw, 16):
                    prefetch(u[b, tq, c0:], k)
                    prefetch(delta[b, tq, c0:], k)
                    prefetch(z[b, tq, zoff + c0 :], k)
                    prefetch(dout[b, tq, c0:], k)
            rs = has_reset and reset[b, t] != 0
            ut = u[b, t, c0 : c0 + cw]
            dt = delta[b, t, c0 : c0 + cw]
            dbu = dbk[t]
            for k in range(cw):
                dbu[k] = dt[k] * ut[k]
                y[k] = Dj[k] * ut[k]
            tp = nl + 1 if rs else t
            for s in range(nn_):
                bs = Bm[b, t, s]
                cs = Cm[b, t, s]
                for k in range(cw):
                    ea = scan_decay(dt[k] * Adj[s, k])
                    decay[t, s, k] = ea
                    hv = ea * hist[tp, s, k] + dbu[k] * bs
                    hist[t + 1, s, k] = hv
                    y[k] += cs * hv
            if rs:
                decay[t] = 0
            zt = z[b, t, zoff + c0 : zoff + c0 + cw]
            got = dout[b, t, c0 : c0 + cw]
            dzt = dz[b, t, zoff + c0 : zoff + c0 + cw]
            dy = dyk[t]
            gb = gbk[t]
            dd = ddk[t]
            for k in range(cw):
                sg = sigmoid(zt[k])
                dy[k] = got[k] * zt[k] * sg
                dzt[k] = got[k] * y[k] * sg * (one + zt[k] * (one - sg))
                dD_acc[k] += dy[k] * ut[k]
                gb[k] = zero
                dd[k] = zero
        # -- 2. reverse-time scan: with 32 vector registers positions t and t - 1 in one pass (t = 0
        # alone if l is odd); with 16 one position a pass (the kernel alone 0.86-0.95x on an
        # AVX2 EPYC; same bits)
        gh = np.zeros((nn_, cw), u.dtype)  # exp(delta_{t+1} A) g_{t+1}
        dA_acc = np.zeros((nn_, cw), u.dtype)
        t = nl - 1
        if _REGS == 32:
            while t >= 1:
                dt1 = delta[b, t, c0 : c0 + cw]
                dt0 = delta[b, t - 1, c0 : c0 + cw]
                dy1 = dyk[t]
                dy0 = dyk[t - 1]
                db1 = dbk[t]
                db0 = dbk[t - 1]
                gb1 = gbk[t]
                gb0 = gbk[t - 1]
                dd1 = ddk[t]
                dd0 = ddk[t - 1]
                for s in range(nn_):
                    bs1 = Bm[b, t, s]
                    cs1 = Cm[b, t, s]
                    bs0 = Bm[b, t - 1, s]
                    cs0 = Cm[b, t - 1, s]
                    sB1 = zero
                    sC1 = zero
                    sB0 = zero
                    sC0 = zero
                    for k in range(cw):
                        a = Aj[s, k]
                        g1 = gh[s, k] + dy1[k] * cs1
                        hn1 = hist[t + 1, s, k]
                        sC1 += dy1[k] * hn1
                        w1 = g1 * (hn1 - db1[k] * bs1)
                        gb1[k] += g1 * bs1
                        sB1 += g1 * db1[k]
                        dd1[k] += a * w1
                        g0 = g1 * decay[t, s, k] + dy0[k] * cs0
                        hn0 = hist[t, s, k]
                        sC0 += dy0[k] * hn0
                        w0 = g0 * (hn0 - db0[k] * bs0)
                        gb0[k] += g0 * bs0
                        sB0 += g0 * db0[k]
                        dd0[k] += a * w0
                        if want_dA:  # loop-invariant (A_log frozen: no dA sum)
                            dA_acc[s, k] = (dA_acc[s, k] + dt1[k] * w1) + dt0[k] * w0
                        gh[s, k] = g0 * decay[t - 1, s, k]
                    dB_part[ch, b, t, s] = sB1
                    dC_part[ch, b, t, s] = sC1
                    dB_part[ch, b, t - 1, s] = sB0
                    dC_part[ch, b, t - 1, s] = sC0
                t -= 2
        while t >= 0:  # every position (16 registers), or the pair loop's odd last one
            dt0 = delta[b, t, c0 : c0 + cw]
            dy0 = dyk[t]
            db0 = dbk[t]
            gb0 = gbk[t]
            dd0 = ddk[t]
            for s in range(nn_):
                bs0 = Bm[b, t, s]
                cs0 = Cm[b, t, s]
                sB0 = zero
                sC0 = zero
                for k in range(cw):
                    g0 = gh[s, k] + dy0[k] * cs0
                    hn0 = hist[t + 1, s, k]
                    sC0 += dy0[k] * hn0
                    w0 = g0 * (hn0 - db0[k] * bs0)
                    gb0[k] += g0 * bs0
                    sB0 += g0 * db0[k]
                    dd0[k] += Aj[s, k] * w0
                    if want_dA:  # loop-invariant (A_log frozen: no dA sum)
                        dA_acc[s, k] += dt0[k] * w0
                    gh[s, k] = g0 * decay[t, s, k]
                dB_part[ch, b, t, s] = sB0
                dC_part[ch, b, t, s] = sC0
            t -= 1
        # -- 3. du, ddelta
        for t in range(nl):
            if t + _PF_OUT < nl:
                tq = t + _PF_OUT
                for k in range(0, cw, 16):
                    prefetch(u[b, tq, c0:], k)
                    prefetch(delta[b, tq, c0:], k)
                    prefetch(du[b, tq, c0:], k)
                    prefetch(ddelta[b, tq, c0:], k)
            ut = u[b, t, c0 : c0 + cw]
            dt = delta[b, t, c0 : c0 + cw]
            dut = du[b, t, c0 : c0 + cw]
            ddt = ddelta[b, t, c0 : c0 + cw]
            dy = dyk[t]
            gb = gbk[t]
            dd = ddk[t]
            for k in range(cw):
                dut[k] = Dj[k] * dy[k] + dt[k] * gb[k]
                ddt[k] = ut[k] * gb[k] + dd[k]
        if want_dA:
            for s in range(nn_):
                for k in range(cw):
                    dA_part[b, s, c0 + k] = dA_acc[s, k]
        for k in range(cw):
            dD_part[b, c0 + k] = dD_acc[k]


_BACKWARD = {(w, r): specialised(parallel_kernel, _scan_backward_kernel, _BW=w, _REGS=r)
             for w in sorted({*BWD_CHUNKS.values(), CHUNK}) for r in (16, 32)}


def _A_transposed(A_log: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # an A_log blown up to inf: the divergence guard says so
        return np.ascontiguousarray(-np.exp(A_log).T)  # (NumPy's warning printed a code line)


def _decay_rates(A: np.ndarray) -> np.ndarray:
    """A = -exp(A_log), in any layout -> A in ``scan_decay``'s units, the same layout: A itself
    in float64; A times log2(e) in float32 (one multiply of an (e, n) array per call: the
    recurrent step does it for every token)."""
    units = decay_units(A.dtype)
    return A if units == 1.0 else A * A.dtype.type(units)


def _check(u: np.ndarray, delta: np.ndarray, A_log: np.ndarray, B: np.ndarray, C: np.ndarray,
           D: np.ndarray, z: np.ndarray, z_offset: int) -> np.dtype:
    """The door check of the forward and backward; returns the call's dtype."""
    dt = check("u", u, (None, None, None))
    nb, nl, ne = u.shape
    check("delta", delta, u.shape, dt)
    check("A_log", A_log, (ne, None), dt)
    n = A_log.shape[1]
    check("B", B, (nb, nl, n), dt)
    check("C", C, (nb, nl, n), dt)
    check("D", D, (ne,), dt)
    check_wider("z", z, z_offset + ne, dt)
    check("z", z, (nb, nl, None), dt)
    return dt


def _width(ne: int) -> int:
    """e rounded up to a multiple of CHUNK (the kernels' channel width)."""
    return -(-ne // CHUNK) * CHUNK


def _pad(a: np.ndarray, ep: int, lo: int = 0, width: int | None = None) -> np.ndarray:
    """Columns lo..lo+width of a (..., c) array, zero-padded to ep columns (a copy)."""
    width = a.shape[-1] - lo if width is None else width
    out = np.zeros((*a.shape[:-1], ep), a.dtype)
    out[..., :width] = a[..., lo : lo + width]
    return out


def selective_scan_forward(
    u: np.ndarray,
    delta: np.ndarray,
    A_log: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    D: np.ndarray,
    z: np.ndarray,
    z_offset: int = 0,
    reset: np.ndarray | None = None,
    h0: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """-> out (b, l, e), h_last (b, e, n). See the module docstring. ``z`` may be wider than e
    (e.g. in_proj's whole (b, l, 2e) output) and is read at columns z_offset..z_offset+e.
    ``reset`` (b, l): True where a new document starts (the state is zeroed before it).
    ``h0`` (b, e, n): the state before position 0 (a previous call's h_last, to go on reading
    a sequence piece by piece); None: zero."""
    dt = _check(u, delta, A_log, B, C, D, z, z_offset)
    nb, nl, ne = u.shape
    n = A_log.shape[1]
    if h0 is not None:
        check("h0", h0, (nb, ne, n), dt)
    rm = reset_mask(reset, nb, nl)
    At = _decay_rates(_A_transposed(A_log))
    ep = _width(ne)
    if ep != ne:  # zero-padded channels: no state, no output
        u, delta, D, At = _pad(u, ep), _pad(delta, ep), _pad(D, ep), _pad(At, ep)
        z, z_offset = _pad(z, ep, z_offset, ne), 0
        if h0 is not None:
            h0 = np.concatenate([h0, np.zeros((nb, ep - ne, n), h0.dtype)], axis=1)
    h0_k = np.zeros((nb, 0, n), u.dtype) if h0 is None else np.ascontiguousarray(h0)
    out = np.empty_like(u)
    h_last = np.empty((nb, ep, n), dtype=u.dtype)
    _scan_forward_kernel(u, delta, At, B, C, D, z, z_offset, rm, h0_k, out, h_last)
    if ep != ne:
        return np.ascontiguousarray(out[..., :ne]), np.ascontiguousarray(h_last[:, :ne])
    return out, h_last


def selective_scan_backward(
    dout: np.ndarray,
    u: np.ndarray,
    delta: np.ndarray,
    A_log: np.ndarray,
    B: np.ndarray,
    C: np.ndarray,
    D: np.ndarray,
    z: np.ndarray,
    z_offset: int = 0,
    dz: np.ndarray | None = None,
    reset: np.ndarray | None = None,
    need_dA: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray, np.ndarray,
           np.ndarray]:
    """-> (du, ddelta, dA_log, dB, dC, dD, dz); shapes as the corresponding inputs. With ``dz``
    given (shaped like z), the gate gradient is written into its columns z_offset..z_offset+e.
    ``reset`` as in the forward. ``need_dA`` False (A_log frozen, as under LoRA or WSLA): the
    kernel skips the dA sum and dA_log is None."""
    dt = _check(u, delta, A_log, B, C, D, z, z_offset)
    check("dout", dout, u.shape, dt)
    if dz is not None:
        check("dz", dz, z.shape, dt)
    else:
        dz = np.empty_like(z)
    nb, nl, ne = u.shape
    n = A_log.shape[1]
    rm = reset_mask(reset, nb, nl)
    At = _A_transposed(A_log)
    Adt = _decay_rates(At)
    ep = _width(ne)
    dz_k, zoff_k, z_k = dz, z_offset, z
    if ep != ne:  # zero-padded channels get dout = 0: they add nothing to any gradient
        u, delta, D, dout = _pad(u, ep), _pad(delta, ep), _pad(D, ep), _pad(dout, ep)
        At, Adt = _pad(At, ep), _pad(Adt, ep)
        z_k, zoff_k = _pad(z, ep, z_offset, ne), 0
        dz_k = np.empty_like(z_k)
    nch = -(-ep // BWD_CHUNK)
    du = np.empty_like(u)
    ddelta = np.empty_like(u)
    dA_part = np.empty((nb, n, ep) if need_dA else (nb, n, 0), dtype=u.dtype)
    dB_part = np.empty((nch, nb, nl, n), dtype=u.dtype)
    dC_part = np.empty((nch, nb, nl, n), dtype=u.dtype)
    dD_part = np.empty((nb, ep), dtype=u.dtype)
    full = ep // BWD_CHUNK * BWD_CHUNK  # BWD_CHUNK-wide jobs, then a CHUNK-wide remainder
    for c_first, width, run in ((0, BWD_CHUNK, full > 0), (full, CHUNK, ep > full)):
        if run:
            _BACKWARD[width, VECTOR_REGS](
                dout, u, delta, At, Adt, B, C, D, z_k, zoff_k, rm, du, ddelta, dz_k, dA_part,
                dB_part, dC_part, dD_part, need_dA, c_first, c_first // BWD_CHUNK,
            )
    dA_log = dA_part.sum(axis=0).T[:ne] * At.T[:ne] if need_dA else None  # (e, n)
    dD = dD_part.sum(axis=0)[:ne]
    if ep != ne:
        dz[..., z_offset : z_offset + ne] = dz_k[..., :ne]
        du, ddelta = np.ascontiguousarray(du[..., :ne]), np.ascontiguousarray(ddelta[..., :ne])
    return du, ddelta, dA_log, dB_part.sum(axis=0), dC_part.sum(axis=0), dD, dz


@kernel
def _scan_step_kernel(h, u, delta, A, Bm, Cm, D, z, out):
    """One recurrent step, the forward kernel's update for a single position: h (b, e, n) advanced
    in place; u, delta, z (b, e); A (e, n) in ``scan_decay``'s units; Bm, Cm (b, n); D (e,) -> out
    (b, e). Serial: one
    token is too little work to wake the thread pool for."""
    nb, ne, nn_ = h.shape
    for b in range(nb):
        for c in range(ne):
            hc = h[b, c]
            dt = delta[b, c]
            dbu = dt * u[b, c]
            y = D[c] * u[b, c]
            for s in range(nn_):
                hv = scan_decay(dt * A[c, s]) * hc[s] + dbu * Bm[b, s]
                hc[s] = hv
                y += Cm[b, s] * hv
            zc = z[b, c]
            out[b, c] = y * zc * sigmoid(zc)


def selective_scan_step(
    h: np.ndarray, u: np.ndarray, delta: np.ndarray, A_log: np.ndarray, B: np.ndarray,
    C: np.ndarray, D: np.ndarray, z: np.ndarray,
) -> np.ndarray:
    """Advance the state ``h`` (b, e, n) in place by one position and return the gated output
    out (b, e): u, delta, z (b, e); A_log (e, n); B, C (b, n); D (e,). Position t of
    ``selective_scan_forward`` when ``h`` holds the state after t - 1 (its h_last)."""
    dt = check("h", h, (None, None, None))
    nb, ne, n = h.shape
    for name, a in (("u", u), ("delta", delta), ("z", z)):
        check(name, a, (nb, ne), dt)
    check("A_log", A_log, (ne, n), dt)
    check("B", B, (nb, n), dt)
    check("C", C, (nb, n), dt)
    check("D", D, (ne,), dt)
    out = np.empty_like(u)
    _scan_step_kernel(h, u, delta, _decay_rates(-np.exp(A_log)), B, C, D, z, out)
    return out
