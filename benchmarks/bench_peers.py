"""Our training step against PyTorch CPU peers, interleaved in one process, with ratios.

    bash scripts/setup-bench-venv.sh            # once: .venv-bench with torch==2.13.0 (CPU)
    .venv-bench/bin/python benchmarks/bench_peers.py [--configs small,medium] [--steps 10]

Peers (perf-baseline.md), all the same Mamba-1 LM (HF MambaForCausalLM's math, tied head,
cross-entropy over all positions, AdamW lr 1e-3 wd 0.1), float32:
* torch-seq-unbind -- a pure-torch model whose scan loops over t on ``dA.unbind(1)``;
* torch-pscan       -- the same with a parallel (Hillis-Steele, log2 L steps) scan through autograd;
* torch-numba      -- the hybrid: the torch model with only the scan replaced by this project's
                      Numba kernels through ``torch.autograd.Function``;
* ours             -- engine.Trainer.train_step, ``--threads`` Numba and BLAS threads;
* ours-halves      -- the same with each micro-batch's halves at once in two threads of
                      threads / 2 Numba threads each and one BLAS thread (the thread tuner's
                      two-worker choice, round 17).
Every round times one step of each, so all see the same machine state; one JSON line per
(config, impl) with the median, ``ours_speedup`` = its median / ours' and ``halves_speedup`` =
its median / ours-halves'.

The hybrid's and our lines also carry ``scan_ms``, the step's time in the scan kernels (the
hybrid: timed around its calls in every step, median; ours: two profiled steps after the timed
ones, ``engine.opprofile``), and ``rest_ms`` = median - scan_ms. Ours adds ``gemm_only_ms`` (the
step's GEMMs alone, ``engine.stepgemms``) and ``rest_for_3x_hybrid_ms``: since the hybrid runs
the same scan kernels, ours is 3x the hybrid only when our rest is at most (hybrid rest -
2 x scan) / 3; below our GEMM-only time that needs GEMMs faster than this BLAS alone.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from engine.runtime import configure  # noqa: E402

configure(tune_allocator=True)  # same process settings as training, before NumPy loads

import numba  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from threadpoolctl import ThreadpoolController  # noqa: E402

from engine.bench import BENCH_CONFIGS, _trainer, blas_info, cpu_model, set_threads  # noqa: E402
from engine.opprofile import profile_ops  # noqa: E402
from engine.ops.selective_scan import selective_scan_backward, selective_scan_forward  # noqa: E402
from engine.stepgemms import standalone_ms, step_gemms  # noqa: E402
from engine.threads import splits, two_workers  # noqa: E402

SCAN_SECONDS = [0.0]  # the hybrid's time inside the scan kernels since the last reset


class NumbaScan(torch.autograd.Function):
    """out = selective_scan(u, delta, A_log, B, C, D) * silu(z) by the engine's kernels."""

    @staticmethod
    def forward(ctx, u, delta, A_log, B, C, D, z):  # type: ignore[no-untyped-def]
        arrs = [t.detach().contiguous().numpy() for t in (u, delta, A_log, B, C, D, z)]
        t0 = time.perf_counter()
        out, _ = selective_scan_forward(*arrs)
        SCAN_SECONDS[0] += time.perf_counter() - t0
        ctx.arrs = arrs
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        g = g.contiguous().numpy()
        t0 = time.perf_counter()
        grads = selective_scan_backward(g, *ctx.arrs)
        SCAN_SECONDS[0] += time.perf_counter() - t0
        du, dd, dA_log, dB, dC, dD, dz = (torch.from_numpy(np.ascontiguousarray(a)) for a in grads)
        return du, dd, dA_log, dB, dC, dD, dz


def scan_seq(u, delta, A, B, C, D, z):  # type: ignore[no-untyped-def]
    """u, delta, z (b, l, e); A (e, n); B, C (b, l, n): a loop over t on unbound slices."""
    dA = torch.exp(delta.unsqueeze(-1) * A)  # (b, l, e, n)
    dBu = (delta * u).unsqueeze(-1) * B.unsqueeze(2)
    h = torch.zeros_like(dA[:, 0])
    ys = []
    for a_t, bu_t, c_t in zip(dA.unbind(1), dBu.unbind(1), C.unbind(1), strict=True):
        h = a_t * h + bu_t
        ys.append((h * c_t.unsqueeze(1)).sum(-1))
    y = torch.stack(ys, 1) + u * D
    return y * F.silu(z)


def scan_pscan(u, delta, A, B, C, D, z):  # type: ignore[no-untyped-def]
    """The same recurrence as a Hillis-Steele parallel scan: log2(l) vectorised steps."""
    a = torch.exp(delta.unsqueeze(-1) * A)
    h = (delta * u).unsqueeze(-1) * B.unsqueeze(2)
    length = u.shape[1]
    k = 1
    while k < length:
        h = torch.cat([h[:, :k], h[:, k:] + a[:, k:] * h[:, :-k]], 1)
        a = torch.cat([a[:, :k], a[:, k:] * a[:, :-k]], 1)
        k *= 2
    y = (h * C.unsqueeze(2)).sum(-1) + u * D
    return y * F.silu(z)


def scan_numba(u, delta, A_log, B, C, D, z):  # type: ignore[no-untyped-def]
    return NumbaScan.apply(u, delta, A_log, B, C, D, z)


class TorchMamba(torch.nn.Module):
    def __init__(self, vocab: int, d: int, n_layer: int, scan: str, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        e, n, r, k = 2 * d, 16, math.ceil(d / 16), 4
        self.scan, self.e, self.n, self.r = scan, e, n, r
        self.emb = torch.nn.Parameter(torch.randn(vocab, d) * 0.02)
        self.layers = torch.nn.ModuleList()
        for _ in range(n_layer):
            m = torch.nn.Module()
            m.norm = torch.nn.Parameter(torch.ones(d))
            m.in_proj = torch.nn.Linear(d, 2 * e, bias=False)
            m.conv_w = torch.nn.Parameter(torch.randn(e, 1, k) * 0.3)
            m.conv_b = torch.nn.Parameter(torch.zeros(e))
            m.x_proj = torch.nn.Linear(e, r + 2 * n, bias=False)
            m.dt_proj = torch.nn.Linear(r, e)
            m.A_log = torch.nn.Parameter(torch.log(torch.arange(1, n + 1.0)).repeat(e, 1))
            m.D = torch.nn.Parameter(torch.ones(e))
            m.out_proj = torch.nn.Linear(e, d, bias=False)
            self.layers.append(m)
        self.norm_f = torch.nn.Parameter(torch.ones(d))

    @staticmethod
    def _rms(x, w):  # type: ignore[no-untyped-def]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def forward(self, tokens):  # type: ignore[no-untyped-def]
        h = self.emb[tokens]
        length = tokens.shape[1]
        for m in self.layers:
            xz = m.in_proj(self._rms(h, m.norm))
            x, z = xz[..., : self.e], xz[..., self.e :]
            xc = F.conv1d(x.transpose(1, 2), m.conv_w, m.conv_b, padding=3, groups=self.e)
            u = F.silu(xc[..., :length].transpose(1, 2))
            x_dbl = m.x_proj(u)
            dt, B, C = torch.split(x_dbl, [self.r, self.n, self.n], -1)
            delta = F.softplus(m.dt_proj(dt))
            if self.scan == "numba":
                y = scan_numba(u, delta, m.A_log, B.contiguous(), C.contiguous(), m.D,
                               z.contiguous())
            else:
                fn = scan_seq if self.scan == "seq" else scan_pscan
                y = fn(u, delta, -torch.exp(m.A_log), B, C, m.D, z)
            h = h + m.out_proj(y)
        return self._rms(h, self.norm_f) @ self.emb.T


def torch_stepper(cfg: dict[str, int], scan: str, n_rows: int):  # type: ignore[no-untyped-def]
    model = TorchMamba(cfg["vocab"], cfg["d_model"], cfg["n_layer"], scan)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, cfg["vocab"], (n_rows, cfg["seq_len"] + 1), generator=g)
    state = {"i": 0}

    def step() -> None:
        i = state["i"] % (n_rows // cfg["batch"])
        state["i"] += 1
        rows = data[i * cfg["batch"] : (i + 1) * cfg["batch"]]
        logits = model(rows[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", default="small,medium")
    ap.add_argument("--impls",
                    default="ours,ours-halves,torch-numba,torch-pscan,torch-seq-unbind")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cpu-time", action="store_true",
                    help="time steps by process CPU time (use with --threads 1 on a busy machine)")
    a = ap.parse_args()
    if "ours-halves" in a.impls.split(",") and not splits(a.threads):
        ap.error("ours-halves needs --threads 2 or 3 (training offers the halves there only)")
    clock = time.process_time if a.cpu_time else time.perf_counter
    set_threads(a.threads)
    torch.set_num_threads(a.threads)
    controller = ThreadpoolController()
    scans = {"torch-numba": "numba", "torch-pscan": "pscan", "torch-seq-unbind": "seq"}
    for name in a.configs.split(","):
        c = BENCH_CONFIGS[name]
        rounds = a.warmup + a.steps
        steppers = {}
        ours_cfg = None  # our model's config: its step's GEMMs are timed alone after the rounds
        for impl in a.impls.split(","):
            if impl == "ours":
                tr = _trainer(name, "full", (rounds + 2) * c["batch"], a.threads)  # + 2 profiled
                ours_cfg = tr.lm.config
                cur = {"i": 0}

                def ours(tr=tr, cur=cur, b=c["batch"]) -> None:  # type: ignore[no-untyped-def]
                    tr.train_step(np.arange(cur["i"] * b, (cur["i"] + 1) * b))
                    cur["i"] += 1

                steppers[impl] = ours
            elif impl == "ours-halves":
                trh = _trainer(name, "full", rounds * c["batch"], a.threads)
                curh = {"i": 0}

                def halves(tr=trh, cur=curh, b=c["batch"]) -> None:  # type: ignore[no-untyped-def]
                    per, blas, _ = two_workers(a.threads)  # as the thread tuner sets them (a
                    numba.set_num_threads(per)  # controller made once: threadpool_limits scans
                    try:  # the loaded libraries at every call)
                        with controller.limit(limits=blas, user_api="blas"):
                            tr.train_step(np.arange(cur["i"] * b, (cur["i"] + 1) * b), 2)
                    finally:
                        numba.set_num_threads(a.threads)
                    cur["i"] += 1

                steppers[impl] = halves
            else:
                steppers[impl] = torch_stepper(c, scans[impl], rounds * c["batch"])
        times: dict[str, list[float]] = {k: [] for k in steppers}
        hybrid_scan: list[float] = []
        for r in range(rounds):
            for impl, fn in steppers.items():
                SCAN_SECONDS[0] = 0.0
                t = clock()
                fn()
                if r >= a.warmup:
                    times[impl].append(clock() - t)
                    if impl == "torch-numba":
                        hybrid_scan.append(SCAN_SECONDS[0])
        split: dict[str, dict[str, float]] = {}
        if hybrid_scan:
            split["torch-numba"] = {"scan_ms": float(np.median(hybrid_scan)) * 1e3}
        if ours_cfg is not None:
            with profile_ops() as ops:
                steppers["ours"]()
                steppers["ours"]()
            split["ours"] = {
                "scan_ms": (ops.get("selective_scan_forward", 0.0)
                            + ops.get("selective_scan_backward", 0.0)) / 2 * 1e3,
                "gemm_only_ms": standalone_ms(step_gemms(ours_cfg, c["batch"], c["seq_len"])),
            }
        tokens = c["batch"] * c["seq_len"]
        ours_med = float(np.median(times["ours"])) if "ours" in times else None
        halves_med = (float(np.median(times["ours-halves"])) if "ours-halves" in times
                      else None)
        hyb_med = float(np.median(times["torch-numba"])) if "torch-numba" in times else None
        for impl, ts in times.items():
            med = float(np.median(ts))
            extra = {k: round(v, 2) for k, v in split.get(impl, {}).items()}
            if "scan_ms" in extra:
                extra["rest_ms"] = round(med * 1e3 - extra["scan_ms"], 2)
            if impl == "ours" and hyb_med is not None and "torch-numba" in split:
                hyb_rest = hyb_med * 1e3 - split["torch-numba"]["scan_ms"]
                extra["rest_for_3x_hybrid_ms"] = round((hyb_rest - 2 * extra["scan_ms"]) / 3, 2)
            print(json.dumps({
                "bench": "peers", "config": name, "impl": impl, "median_ms": round(med * 1e3, 2),
                "min_ms": round(min(ts) * 1e3, 2), "max_ms": round(max(ts) * 1e3, 2),
                "tokens_per_s": round(tokens / med, 1),
                "ours_speedup": round(med / ours_med, 2) if ours_med else None,
                "halves_speedup": round(med / halves_med, 2) if halves_med else None,
                **extra,
                "steps": a.steps, "threads": a.threads, "clock": clock.__name__,
                "torch": torch.__version__,
                "cpu": cpu_model(), **blas_info()}), flush=True)


if __name__ == "__main__":
    main()
