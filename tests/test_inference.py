import numpy as np
import pytest

from engine import ByteTokenizer, MambaLM
from engine.inference import CpuStepper, InferenceState, prefill, step
from engine.model import logits_forward
from engine.sampling import SamplingConfig, sample
from tests.helpers import random_batch, random_params, tiny_config


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 1e-4)])
def test_recurrent_step_equals_full_forward(dtype, tol):
    cfg = tiny_config()
    p = random_params(cfg, dtype=dtype)
    tokens, _ = random_batch(cfg, b=2, length=10)
    full = logits_forward(p, tokens, cfg)
    state = InferenceState.zeros(cfg, 2, dtype)
    for t in range(tokens.shape[1]):
        logits = step(p, tokens[:, t], state, cfg)
        np.testing.assert_allclose(logits, full[:, t], rtol=tol, atol=tol)


@pytest.mark.parametrize("prompt_len", [1, 2, 5, 9])
def test_prefill_then_step_equals_full_forward(prompt_len):
    cfg = tiny_config()
    p = random_params(cfg, seed=1)
    tokens, _ = random_batch(cfg, b=1, length=12, seed=2)
    full = logits_forward(p, tokens, cfg)
    logits, state = prefill(p, tokens[:, :prompt_len], cfg)
    np.testing.assert_allclose(logits, full[:, prompt_len - 1], atol=1e-10)
    for t in range(prompt_len, 12):
        logits = step(p, tokens[:, t], state, cfg)
        np.testing.assert_allclose(logits, full[:, t], atol=1e-10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("pieces", [[1] * 12, [2, 1, 5, 4], [3, 9], [7, 5]])
def test_prefill_in_pieces_equals_prefill_whole(dtype, pieces):
    """A prompt read piece by piece, each piece from the state the pieces before it left (pieces
    shorter than the conv window included), gives the logits and states of reading it whole,
    and the steps after it the full forward's logits. float64 to rounding (the GEMMs see other
    row counts), float32 within 1e-5."""
    cfg = tiny_config()
    p = random_params(cfg, seed=3, dtype=dtype)
    tokens, _ = random_batch(cfg, b=2, length=16, seed=4)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    whole, whole_state = prefill(p, tokens[:, :12], cfg)
    state, at = None, 0
    for n in pieces:
        logits, state = prefill(p, tokens[:, at : at + n], cfg, state)
        at += n
    assert at == 12 and state is not None
    np.testing.assert_allclose(logits, whole, rtol=tol, atol=tol)
    for mine, theirs in zip(state.conv + state.ssm, whole_state.conv + whole_state.ssm,
                            strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=tol, atol=tol)
    full = logits_forward(p, tokens, cfg)
    for t in range(12, 16):
        np.testing.assert_allclose(step(p, tokens[:, t], state, cfg), full[:, t], rtol=tol * 10,
                                   atol=tol * 10)
    cold, _ = prefill(p, tokens[:, 12 - pieces[-1] : 12], cfg)
    assert not np.allclose(cold, whole, atol=1e-3), "the state carried nothing"


def test_a_forward_from_a_recurrent_state_has_no_backward():
    """``layer_forward(start=...)`` reads on from a state; its cache has no gradient for that
    state, so a backward from it would be silently wrong: refused."""
    from engine.model import layer_backward, layer_forward
    from engine.ops.embedding import embedding_forward
    from engine.params import EMBEDDINGS

    cfg = tiny_config()
    p = random_params(cfg, seed=5)
    tokens, _ = random_batch(cfg, b=1, length=6, seed=6)
    _, state = prefill(p, tokens[:, :3], cfg)
    h = embedding_forward(tokens[:, 3:], p[EMBEDDINGS])
    _, cache = layer_forward(p, 0, h, cfg, start=(state.conv[0], state.ssm[0]))
    with pytest.raises(ValueError, match="recurrent state"):
        layer_backward(p, 0, cache, np.ones_like(h), {}, cfg)
    _, cache = layer_forward(p, 0, h, cfg)  # from a zero state: it has one
    assert layer_backward(p, 0, cache, np.ones_like(h), {k: np.zeros_like(v) for k, v in
                                                         p.items()}, cfg) is not None


class _Recording(CpuStepper):
    """The CPU stepper, keeping the logits of each piece of prompt it reads (prefill, feed)."""

    def __init__(self, lm: MambaLM) -> None:
        super().__init__(lm.params, lm.config)
        self.read: list[np.ndarray] = []

    def _read(self, ids: np.ndarray, state: InferenceState | None) -> np.ndarray:
        self.read.append(super()._read(ids, state))
        return self.read[-1]


def test_a_long_prompt_is_read_in_pieces_that_can_be_stopped(monkeypatch):
    """generate_ids reads a prompt PROMPT_PIECE tokens at a time (one call took 7-12 s for
    200,000 tokens, with no way to stop it): the same tokens as one read, the prompt's last
    logits those of reading it whole (the greedy tokens of a random model hardly depend on
    the pieces before, so a feed that dropped the state gave the same tokens), ``reading``
    hears each piece's start, and True from it ends the generation before any token."""
    import engine.lm

    cfg = tiny_config()
    lm = MambaLM(cfg, random_params(cfg, seed=5, dtype=np.float32), ByteTokenizer())
    prompt = np.random.default_rng(6).integers(0, cfg.vocab_size, size=23)
    s = SamplingConfig(temperature=0.0, max_new_tokens=12)
    at_once = list(lm.generate_ids(prompt, s))
    monkeypatch.setattr(engine.lm, "PROMPT_PIECE", 5)
    heard: list[int] = []
    rec = _Recording(lm)
    assert list(lm.generate_ids(prompt, s, backend=rec,
                                reading=lambda n: heard.append(n) is not None)) == at_once
    assert heard == [5, 10, 15, 20]
    whole, _ = prefill(lm.params, prompt[None], cfg)
    np.testing.assert_allclose(rec.read[len(heard)], whole[0], rtol=1e-5, atol=1e-5)
    heard.clear()
    assert list(lm.generate_ids(prompt, s, reading=lambda n: heard.append(n) or n >= 10)) == []
    assert heard == [5, 10]


def test_feed_goes_on_from_what_was_read_before():
    """``CpuStepper.feed`` reads its tokens after those read so far: prefill of 5 tokens, then
    feed of the other 7, gives the logits and state of a prefill of all 12. A feed that started
    from a zero state passed every test (the Playground read a long prompt's last piece
    alone)."""
    cfg = tiny_config()
    p = random_params(cfg, seed=7, dtype=np.float32)
    ids = np.random.default_rng(8).integers(0, cfg.vocab_size, size=12)
    st = CpuStepper(p, cfg)
    st.prefill(ids[:5])
    got = st.feed(ids[5:])
    whole, state = prefill(p, ids[None], cfg)
    np.testing.assert_allclose(got, whole[0], rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(st.state.conv + st.state.ssm, state.conv + state.ssm, strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)


def test_a_prompt_one_token_past_its_last_whole_piece_reads_that_token(monkeypatch):
    """A 21-token prompt in pieces of 5 ends in a piece of one token: it is read (``reading``
    hears 20) and the prompt's last logits are those of all 21 tokens. Every test's prompt
    had a longer last piece, so dropping a one-token tail passed."""
    import engine.lm

    cfg = tiny_config()
    lm = MambaLM(cfg, random_params(cfg, seed=9, dtype=np.float32), ByteTokenizer())
    prompt = np.random.default_rng(10).integers(0, cfg.vocab_size, size=21)
    monkeypatch.setattr(engine.lm, "PROMPT_PIECE", 5)
    heard: list[int] = []
    rec = _Recording(lm)
    s = SamplingConfig(temperature=0.0, max_new_tokens=1)
    list(lm.generate_ids(prompt, s, backend=rec, reading=lambda n: heard.append(n) is not None))
    assert heard == [5, 10, 15, 20]
    whole, _ = prefill(lm.params, prompt[None], cfg)
    np.testing.assert_allclose(rec.read[len(heard)], whole[0], rtol=1e-5, atol=1e-5)


def test_sampling_modes():
    rng = np.random.default_rng(0)
    logits = np.array([0.0, 5.0, 1.0, 4.9])
    assert sample(logits, SamplingConfig(temperature=0), rng) == 1
    got = {sample(logits, SamplingConfig(temperature=1.0, top_k=2, top_p=1.0), rng)
           for _ in range(200)}
    assert got == {1, 3}
    got = {sample(logits, SamplingConfig(temperature=1.0, top_k=0, top_p=0.3), rng)
           for _ in range(50)}
    assert got == {1}
    seq1 = [sample(logits, SamplingConfig(temperature=2.0), np.random.default_rng(7))
            for _ in range(5)]
    seq2 = [sample(logits, SamplingConfig(temperature=2.0), np.random.default_rng(7))
            for _ in range(5)]
    assert seq1 == seq2
    with pytest.raises(FloatingPointError):
        sample(np.array([np.nan, 1.0]), SamplingConfig(), rng)


def test_generate_stops_at_stop_token_and_is_seeded():
    from engine.lm import MambaLM
    from engine.tokenizer import ByteTokenizer

    cfg = tiny_config(vocab_size=264)
    lm = MambaLM(cfg, random_params(cfg, dtype=np.float32), ByteTokenizer())
    s = SamplingConfig(temperature=1.0, max_new_tokens=30, seed=3)
    a = list(lm.generate_ids(np.array([65, 66]), s))
    b = list(lm.generate_ids(np.array([65, 66]), s))
    assert a == b and len(a) == 30
    stop = a[5]
    c = list(lm.generate_ids(np.array([65, 66]), SamplingConfig(temperature=1.0, max_new_tokens=30,
                                                                 seed=3, stop_token=stop)))
    assert c == a[: a.index(stop)]


def test_text_prompt_is_read_as_the_start_of_a_document(monkeypatch):
    # training puts an end-of-text id before every document, so generate() reads the prompt
    # after one: the ids it hands to generate_ids are [eos] + the prompt's ids
    tok = ByteTokenizer()
    lm = MambaLM.create(tiny_config(vocab_size=tok.vocab_size), tok, seed=5)
    seen = []
    real = MambaLM.generate_ids

    def spy(self, ids, sampling, backend=None):
        seen.append(np.asarray(ids).tolist())
        return real(self, ids, sampling, backend)

    monkeypatch.setattr(MambaLM, "generate_ids", spy)
    out = "".join(lm.generate("ab", SamplingConfig(temperature=0.0, max_new_tokens=3)))
    assert seen == [[tok.eos_id, *tok.encode("ab").tolist()]]
    assert isinstance(out, str)


def test_a_small_step_runs_its_kernels_in_one_thread_with_the_same_logits(monkeypatch):
    """A batch-1 token step ran each Numba kernel at the process's thread count: waking the
    OpenMP threads cost ~70 us a launch, more than the work (decoding 3x slower on 2 cores).
    Small states now run in one thread; the logits are the same bits as the parallel path's,
    and the caller's thread count is kept."""
    import numba

    import engine.inference as inference

    cfg = tiny_config()
    p = random_params(cfg, seed=5, dtype=np.float32)
    tokens, _ = random_batch(cfg, b=2, length=6, seed=6)
    seen: list[int] = []
    real = inference.rmsnorm_forward

    def counted(*a, **k):
        seen.append(numba.get_num_threads())
        return real(*a, **k)

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("one Numba thread: nothing to tell apart")
    monkeypatch.setattr(inference, "rmsnorm_forward", counted)
    kept = numba.get_num_threads()
    numba.set_num_threads(2)
    try:
        serial, parallel = InferenceState.zeros(cfg, 2), InferenceState.zeros(cfg, 2)
        for t in range(tokens.shape[1]):
            one = step(p, tokens[:, t], serial, cfg)
            assert set(seen) == {1} and numba.get_num_threads() == 2
            seen.clear()
            limit = inference.SERIAL_STEP_ELEMENTS
            monkeypatch.setattr(inference, "SERIAL_STEP_ELEMENTS", 0)  # a large state: as before
            many = step(p, tokens[:, t], parallel, cfg)
            monkeypatch.setattr(inference, "SERIAL_STEP_ELEMENTS", limit)
            assert set(seen) == {2}
            seen.clear()
            np.testing.assert_array_equal(one, many)
    finally:
        numba.set_num_threads(kept)
    for a, b in zip(serial.conv + serial.ssm, parallel.conv + parallel.ssm, strict=True):
        np.testing.assert_array_equal(a, b)
