"""wgpu path vs the CPU step. Runs on Mesa lavapipe in CI; skips only where no adapter exists,
and fails instead when MAMBA_STUDIO_REQUIRE_GPU=1 (set by scripts/test.sh, which installs it)."""

import os

import numpy as np
import pytest

from engine import MambaLM, SamplingConfig, TrainConfig, Trainer
from engine.gpu import open_stepper
from engine.inference import prefill, step
from engine.tokenizer import ByteTokenizer
from tests.helpers import random_params, tiny_config


def _lm(seed, **kw):
    cfg = tiny_config(vocab_size=264, **kw)
    return MambaLM(cfg, random_params(cfg, seed=seed, dtype=np.float32), ByteTokenizer())


@pytest.mark.parametrize("matvec", ["rows", "workgroup"])
@pytest.mark.parametrize("seed,kw", [(0, {}), (1, {"d_model": 32, "n_layer": 3, "d_state": 16}),
                                     (2, {"d_model": 48, "d_state": 8, "d_conv": 3})])
def test_gpu_logits_match_cpu_step(gpu, seed, kw, matvec, monkeypatch):
    from engine.gpu.stepper import GpuStepper

    monkeypatch.setenv("MAMBA_STUDIO_GPU_MATVEC", matvec)
    lm = _lm(seed, **kw)
    st = GpuStepper(lm, gpu)
    assert st.matvec == matvec
    rng = np.random.default_rng(seed)
    for prompt_len in (1, 6):
        ids = rng.integers(0, 256, size=prompt_len + 8)
        g = st.prefill(ids[:prompt_len])
        c, state = prefill(lm.params, ids[None, :prompt_len], lm.config)
        np.testing.assert_allclose(g, c[0], rtol=1e-4, atol=1e-4 * np.abs(c).max())
        for t in range(prompt_len, len(ids)):
            g = st.step(int(ids[t]))
            c = step(lm.params, ids[t : t + 1], state, lm.config)
            np.testing.assert_allclose(g, c[0], rtol=1e-4, atol=1e-4 * np.abs(c).max())


def test_greedy_generation_is_identical(gpu):
    from engine.gpu.stepper import GpuStepper

    lm = _lm(3)
    st = GpuStepper(lm, gpu)
    s = SamplingConfig(temperature=0.0, max_new_tokens=40)
    cpu = list(lm.generate_ids(np.array([72, 105]), s))
    gpu_ids = list(lm.generate_ids(np.array([72, 105]), s, backend=st))
    assert cpu == gpu_ids and len(cpu) == 40


def test_gpu_serves_weights_updated_by_training(gpu):
    from engine.gpu.stepper import GpuStepper

    lm = _lm(4)
    st = GpuStepper(lm, gpu)
    before = st.prefill(np.array([1, 2, 3]))
    ids = np.tile(np.arange(40), 10)
    Trainer(lm, ids, ids[:0], TrainConfig(batch_size=2, seq_len=16, max_steps=2, lr=1e-2)).run()
    changed = st.sync()
    assert changed and len(changed) == len(lm.params)
    assert st.sync() == []  # nothing changed since: nothing re-uploaded
    after = st.prefill(np.array([1, 2, 3]))
    assert not np.allclose(before, after)
    c, _ = prefill(lm.params, np.array([[1, 2, 3]]), lm.config)
    np.testing.assert_allclose(after, c[0], rtol=1e-4, atol=1e-4 * np.abs(c).max())


def test_fallback_when_no_adapter(monkeypatch):
    import engine.gpu.device as device

    try:
        import wgpu  # noqa: F401
    except ImportError as exc:  # without wgpu the reason is "no-wgpu" (next test)
        if os.environ.get("MAMBA_STUDIO_REQUIRE_GPU") == "1":
            pytest.fail(f"wgpu is required here: {exc}")
        pytest.skip(f"wgpu cannot be imported: {exc}")
    monkeypatch.setattr(device, "_enumerate", lambda: [])
    st, reason = open_stepper(_lm(5))
    assert st is None and "no-adapter" in reason


def test_fallback_when_disabled_or_without_wgpu(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "wgpu", None)  # as if the package were not installed
    st, reason = open_stepper(_lm(5))
    assert st is None and "no-wgpu" in reason
    monkeypatch.setenv("MAMBA_STUDIO_GPU", "off")
    st, reason = open_stepper(_lm(5))
    assert st is None and "disabled" in reason
    lm = _lm(5)  # the CPU path still generates
    assert len(list(lm.generate_ids(np.array([1]), SamplingConfig(max_new_tokens=5)))) == 5


def test_generation_loop_allocates_no_gpu_objects(gpu):
    """Every buffer, bind group and pipeline is made once in __init__; steps only write/read."""
    from engine.gpu.stepper import GpuStepper

    lm = _lm(6)
    st = GpuStepper(lm, gpu)
    real = st.dev

    class NoAllocDevice:
        def __getattr__(self, name):  # noqa: ANN001, ANN204
            if name.startswith("create_") and name != "create_command_encoder":
                raise AssertionError(f"{name} called during generation")
            return getattr(real, name)

    st.dev = NoAllocDevice()
    s = SamplingConfig(temperature=0.7, max_new_tokens=10, seed=1)
    out = list(lm.generate_ids(np.array([1, 2, 3]), s, backend=st))
    assert len(out) == 10
    lm.params["backbone.norm_f.weight"] *= 1.01
    assert st.sync() == ["backbone.norm_f.weight"]  # only the changed tensor is re-uploaded


def test_adapter_probe_noise_is_dropped_and_other_stderr_kept(capfd):
    """libwayland's "error: XDG_RUNTIME_DIR is invalid or not set in the environment." (printed
    four times by `generate` on a machine without that variable) read like our own errors."""
    from engine.gpu.device import quiet_probe_noise

    with quiet_probe_noise():
        os.write(2, b"error: XDG_RUNTIME_DIR is invalid or not set in the environment.\n")
        os.write(2, b"a driver line we keep\n")
    os.write(2, b"after\n")
    err = capfd.readouterr().err
    assert "XDG_RUNTIME_DIR" not in err
    assert "a driver line we keep\n" in err and err.index("a driver line") < err.index("after")


def test_adapter_probes_from_two_threads_leave_stderr_working(capfd):
    import threading

    from engine.gpu.device import quiet_probe_noise

    def probe(i):
        with quiet_probe_noise():
            os.write(2, b"error: XDG_RUNTIME_DIR is invalid or not set in the environment.\n")
            os.write(2, f"kept {i}\n".encode())

    threads = [threading.Thread(target=probe, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.write(2, b"still here\n")
    err = capfd.readouterr().err
    assert "XDG" not in err and "still here" in err and all(f"kept {i}" in err for i in range(4))


def test_gpu_reads_a_prompt_longer_than_its_token_buffer(gpu, monkeypatch):
    """A prompt longer than the token buffer (MAX_TOKENS, 4,096) failed with "prompt must have
    1..4096 tokens" (`generate --backend gpu`, the Playground on a GPU): it is now run a buffer
    at a time, from the state the buffers before it left. The buffer is made 4 tokens here."""
    import engine.gpu.stepper as gs

    monkeypatch.setattr(gs, "MAX_TOKENS", 4)
    lm = _lm(5)
    st = gs.GpuStepper(lm, gpu)
    ids = np.random.default_rng(5).integers(0, 256, size=11)
    c, state = prefill(lm.params, ids[None, :], lm.config)
    g = st.prefill(ids)
    np.testing.assert_allclose(g, c[0], rtol=1e-4, atol=1e-4 * np.abs(c).max())
    g = st.feed(ids[:6])  # and goes on from there
    c, state = prefill(lm.params, ids[None, :6], lm.config, state)
    np.testing.assert_allclose(g, c[0], rtol=1e-4, atol=1e-4 * np.abs(c).max())
    np.testing.assert_allclose(st.step(7), step(lm.params, np.array([7]), state, lm.config)[0],
                               rtol=1e-4, atol=1e-4 * np.abs(c).max())


def test_gpu_feed_of_no_tokens_is_a_value_error(gpu):
    """``GpuStepper.feed`` needs at least one token, as ``prefill`` of the CPU does: an empty
    feed says so (ValueError) instead of failing on logits it never computed
    (UnboundLocalError), which no test tried."""
    from engine.gpu.stepper import GpuStepper

    st = GpuStepper(_lm(6), gpu)
    with pytest.raises(ValueError, match="at least one token"):
        st.feed(np.array([], dtype=np.int64))
