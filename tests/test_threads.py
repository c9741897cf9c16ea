"""engine.threads.ThreadTuner: the (Numba, BLAS) thread counts follow measured step times (a fake
clock stands in for the machine, so nothing here depends on this machine's speed); and the
choice changes no result bit."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from engine.bench import _trainer
from engine.threads import Choice, ThreadTuner

needs_two = pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs 2 Numba threads")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(tuner: ThreadTuner, clock: _Clock, steps: int,
         cost: dict[Choice, float]) -> list[Choice]:
    used = []
    for _ in range(steps):
        with tuner.step():
            blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"][0]
            used.append((numba.get_num_threads(), blas, tuner.current[2]))
            assert tuner.current == used[-1]  # what the replay bench reads instead of asking
            clock.now += cost[used[-1]]
    return used


QUIET = {(2, 2, 1): 0.05, (2, 1, 1): 0.09, (1, 1, 1): 0.12}


class _Fixed(ThreadTuner):
    """The trainer's tuner with its four choices, holding ``fixed`` at every step."""

    def __init__(self, fixed: Choice) -> None:
        super().__init__(threads=2)
        self.fixed = fixed

    def _planned(self) -> tuple[Choice, int | None]:
        return self.fixed, None


@needs_two
def test_without_the_far_rule_every_choice_is_tried_and_probed() -> None:
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock,
                        far=float("inf"), split=False)
    used = _run(tuner, clock, 30, QUIET)
    assert used[1:10] == [(2, 2, 1), (2, 1, 1), (1, 1, 1)] * 3  # the first trials take turns
    assert tuner.choice == (2, 2, 1) and tuner.blas == 2 and tuner.numba == 2
    assert used[-10:].count((2, 2, 1)) == 6  # each other choice is probed for 2 steps in 10
    assert set(used[-10:]) == {(2, 2, 1), (2, 1, 1), (1, 1, 1)}


@needs_two
def test_tuner_follows_a_machine_that_gets_busy() -> None:
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock,
                        split=False)
    _run(tuner, clock, 20, QUIET)
    assert tuner.choice == (2, 2, 1)
    # only the BLAS hand-off suffers: two Numba threads with one BLAS thread is best
    _run(tuner, clock, 30, {(2, 2, 1): 0.30, (2, 1, 1): 0.08, (1, 1, 1): 0.10})
    assert tuner.choice == (2, 1, 1)
    # a core fully taken: one thread of each is best (two threads must not be slower than one)
    _run(tuner, clock, 30, {(2, 2, 1): 0.30, (2, 1, 1): 0.12, (1, 1, 1): 0.10})
    assert tuner.choice == (1, 1, 1)
    # and back when the machine is quiet again: (2, 2, 1), far slower when last measured, is
    # probed again at the fourth window's end at the latest (here within 40 steps)
    _run(tuner, clock, 40, QUIET)
    assert tuner.choice == (2, 2, 1)


@needs_two
def test_far_choices_skip_later_first_trials_and_are_probed_every_fourth_time() -> None:
    """A choice 1.25x the best median or slower (a far choice) costs 2 first trials, not 3 (one
    slow step is no verdict), and 2 probe steps every 4th window instead of every window
    (QUIET: both others are far)."""
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock,
                        split=False)
    used = _run(tuner, clock, 81, QUIET)
    assert used[1:10] == [(2, 2, 1), (2, 1, 1), (1, 1, 1)] * 2 + [(2, 2, 1)] * 3
    # step i has s = i - 1; windows of 10 s end with 4 probe slots; the 4th window (s 30-39)
    # and the 8th (s 70-79) probe both far choices, the others none
    assert used[10:37] == [(2, 2, 1)] * 27
    assert used[37:41] == [(2, 1, 1), (2, 1, 1), (1, 1, 1), (1, 1, 1)]
    assert used[41:77] == [(2, 2, 1)] * 36
    assert used[77:81] == [(2, 1, 1), (2, 1, 1), (1, 1, 1), (1, 1, 1)]
    assert tuner.choice == (2, 2, 1)
    # the far rule off: the same run probes each other choice in every window
    clock = _Clock()
    every = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock,
                        far=float("inf"), split=False)
    # 2 x 3 first trials of the others, s 9 (window 0's last probe slot), 4 in windows 1-7
    assert _run(every, clock, 81, QUIET).count((2, 2, 1)) == 81 - 2 * 3 - 1 - 7 * 4


@needs_two
def test_a_far_choice_that_became_fastest_is_taken_at_its_probe() -> None:
    """A far choice's probe starts its history afresh: one fast probe step is enough to switch
    (its older, slow times would otherwise outvote it for several probes); and a far choice
    probed later in the same window, after the choice (so the order of the others) changed,
    starts afresh too."""
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock,
                        split=False)
    _run(tuner, clock, 30, {(2, 2, 1): 0.30, (2, 1, 1): 0.12, (1, 1, 1): 0.10})
    assert tuner.choice == (1, 1, 1) and tuner._is_far((2, 2, 1))
    assert len(tuner.history[(2, 1, 1)]) > 1  # (2, 1, 1), 1.2x: near, probed each window
    quiet_now = {(2, 2, 1): 0.05, (2, 1, 1): 0.07, (1, 1, 1): 0.10}  # s 29.. from here
    used = _run(tuner, clock, 8, quiet_now)  # up to s 36, window 3's first probe slot: (2, 2, 1)
    assert used[-1] == (2, 2, 1) and tuner.choice == (2, 2, 1)  # taken at its first probe step
    assert list(tuner.history[(2, 2, 1)]) == [pytest.approx(0.05)]  # its history started afresh
    # s 37: with (2, 2, 1) chosen, (2, 1, 1) (now 1.4x: far) takes the slot, afresh although it is the
    # slot's second step; then (1, 1, 1)
    used = _run(tuner, clock, 3, quiet_now)
    assert used == [(2, 1, 1), (1, 1, 1), (1, 1, 1)]
    assert list(tuner.history[(2, 1, 1)]) == [pytest.approx(0.07)]
    assert _run(tuner, clock, 19, quiet_now) == [(2, 2, 1)] * 19  # kept


def test_loops_are_dynamically_scheduled_only_with_several_numba_threads() -> None:
    """Chunk size 1 spreads a loop's iterations over busy threads; with one thread it only costs
    (2.6-3.1 % of a step's CPU time, measured), so (1, 1, 1) runs with the caller's setting."""
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=1, clock=clock, far=float("inf"), split=False)
    before = numba.get_parallel_chunksize()
    seen = {}
    for _ in range(4):  # step 0, then one first trial of each choice
        with tuner.step():
            seen[tuner.current] = numba.get_parallel_chunksize()
            clock.now += 0.1
    assert seen == {(2, 2, 1): 1, (2, 1, 1): 1, (1, 1, 1): before} and before != 1
    assert numba.get_parallel_chunksize() == before


def test_single_thread_tuner_never_probes() -> None:
    clock = _Clock()
    tuner = ThreadTuner(threads=1, clock=clock, split=False)
    assert set(_run(tuner, clock, 12, {(1, 1, 1): 0.1})) == {(1, 1, 1)}


@needs_two
def test_thread_counts_change_no_result_bit() -> None:
    """The same three training steps at (Numba, BLAS, workers) = (2, 2, 1), (1, 1, 1) and
    (1, 1, 2) give the same bits, so the tuner's probing cannot make a run depend on the
    machine's load; where the BLAS's own count changes its bits
    (``blas_bits_depend_on_threads``), the Numba and worker counts still change none and the
    BLAS's changes the weights by under 1e-4 relative (1e-5 absolute)."""
    def run(numba_threads: int, blas_threads: int, workers: int = 1) -> dict[str, np.ndarray]:
        tr = _trainer("small", "full", 12)
        tr.thread_tuner = ThreadTuner(threads=2)  # (the tests' tuner may lack the halves)
        numba.set_num_threads(numba_threads)
        try:
            with threadpool_limits(blas_threads, user_api="blas"):
                for i in range(3):
                    tr.train_step(np.arange(i * 4, (i + 1) * 4), workers)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        return {k: np.asarray(v).copy() for k, v in tr.lm.params.items()}

    from engine.threads import blas_bits_depend_on_threads

    one = run(1, 1)
    if blas_bits_depend_on_threads(2):  # (OpenBLAS's Haswell kernel): our kernels' counts
        other = run(2, 1)  # change no bit, and the BLAS's count changes the weights by little
        for k, v in run(2, 2).items():  # (AdamW's first steps magnify the gradients' last
            # bits where a gradient is ~0: up to 1.3e-6 of weights ~1e-3 since the halves)
            np.testing.assert_allclose(v, one[k], rtol=1e-4, atol=1e-5, err_msg=k)
    else:
        other = run(2, 2)
    halves = run(1, 1, workers=2)  # each half of the 4 rows in its own thread
    for k in one:
        assert np.array_equal(one[k].view(np.uint8), other[k].view(np.uint8)), k
        assert np.array_equal(one[k].view(np.uint8), halves[k].view(np.uint8)), k


@needs_two
def test_two_workers_are_a_choice_and_taken_when_fastest() -> None:
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock)
    assert tuner.candidates == [(2, 2, 1), (2, 1, 1), (1, 1, 1), (1, 1, 2)]
    assert ThreadTuner(threads=1).candidates == [(1, 1, 1)]  # no second core: no second worker
    assert ThreadTuner(threads=1).max_workers == 1 and tuner.max_workers == 2
    # 3 threads: threads // 2 Numba threads a worker, BLAS (one count for the process) at 1;
    # 4 or more: no two-worker choice (slower there, measured), so whole micro-batches
    assert ThreadTuner(threads=3).candidates[-1] == (1, 1, 2)
    for t in (4, 8, 16):
        assert ThreadTuner(threads=t).candidates == [(t, t, 1), (t, 1, 1), (1, 1, 1)]
        assert ThreadTuner(threads=t).max_workers == 1
    used = _run(tuner, clock, 30, {**QUIET, (1, 1, 2): 0.04})
    assert tuner.choice == (1, 1, 2) and tuner.workers == 2 and tuner.numba == 1
    assert used.count((1, 1, 2)) >= 15  # (the main thread's counts; the worker copies them)
    _run(tuner, clock, 30, {**QUIET, (1, 1, 2): 0.07})  # the halves' threads got slower
    assert tuner.choice == (2, 2, 1) and tuner.workers == 1


@needs_two
def test_a_worker_is_waited_for_when_the_callers_half_fails() -> None:
    """A half that raises in the calling thread must not leave the other half writing into the
    buffers the next step zeroes: ``both`` returns (raises) only once the worker is done; and
    the worker runs with the caller's Numba thread count."""
    import threading
    import time

    from engine.halves import HalfWorker

    seen: dict[str, object] = {}

    def there() -> int:
        time.sleep(0.2)
        seen["threads"] = numba.get_num_threads()
        seen["thread"] = threading.current_thread()
        return 2

    def broken() -> int:
        raise ValueError("broke")

    worker = HalfWorker()
    numba.set_num_threads(1)
    try:
        with pytest.raises(ValueError, match="broke"):
            worker.both(broken, there)
        assert seen.get("threads") == 1 and seen["thread"] is not threading.current_thread()
        assert worker.both(lambda: 1, lambda: 2) == (1, 2)
    finally:
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        worker.close()


@needs_two
def test_training_runs_its_halves_in_two_threads_when_the_tuner_says_so(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The trainer's loop hands the tuner's worker count to the step: with (1, 1, 2) chosen,
    every step's micro-batch runs its halves through ``HalfWorker.both``, and the run's
    weights equal those of a run at (1, 1, 1) bit for bit."""
    from engine.halves import HalfWorker

    calls = []
    both = HalfWorker.both

    def counted(self, here, there):  # type: ignore[no-untyped-def]
        calls.append(1)
        return both(self, here, there)

    monkeypatch.setattr(HalfWorker, "both", counted)

    def run(choice: Choice) -> dict[str, np.ndarray]:
        tr = _trainer("small", "full", 16)
        tr.thread_tuner = _Fixed(choice)
        tr.run()
        return {k: np.asarray(v).copy() for k, v in tr.lm.params.items()}

    one = run((1, 1, 1))
    assert calls == []
    two = run((1, 1, 2))
    assert len(calls) == 4  # one micro-batch a step
    for k in one:
        assert np.array_equal(one[k].view(np.uint8), two[k].view(np.uint8)), k


@needs_two
@pytest.mark.parametrize("mode", ["full-accum-checkpointed", "lora-dropout", "wsla"])
def test_the_worker_count_changes_no_bit_in_any_mode(mode: str) -> None:
    """Halves at once in two threads (workers 2) and one after the other (1) give the same
    weights bit for bit with gradient accumulation, activation checkpointing and odd batches
    (a last micro-batch of one row), LoRA with dropout (each half's adapter terms gathered
    apart) and WSLA."""
    from engine import LoRAConfig, MambaConfig, MambaLM, TrainConfig, Trainer

    targets = ("in_proj", "x_proj", "dt_proj", "out_proj")
    settings = {"full-accum-checkpointed": {"batch_size": 3, "grad_accum": 2,
                                            "activation_checkpointing": True},
                "lora-dropout": {"batch_size": 5, "activation_checkpointing": True,
                                 "lora": LoRAConfig(targets, rank=4, dropout=0.2)},
                "wsla": {"batch_size": 4, "wsla": True}}[mode]
    ids = np.random.default_rng(3).integers(0, 64, size=40 * 33)

    def run(workers: int) -> dict[str, np.ndarray]:
        lm = MambaLM.create(MambaConfig(vocab_size=64, d_model=32, n_layer=2), seed=1)
        tr = Trainer(lm, ids, ids[:0], TrainConfig(seq_len=32, epochs=1, shuffle=False,
                                                   **settings))  # type: ignore[arg-type]
        tr.thread_tuner = ThreadTuner(threads=2)  # (the tests' tuner may lack the halves)
        assert tr.trainable is not None
        rows = np.arange(7 if mode.startswith("full") else settings["batch_size"])
        numba.set_num_threads(1)
        try:
            with threadpool_limits(1, user_api="blas"):
                for i in range(3):
                    tr.train_step(rows + i * len(rows), workers)
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        return {k: np.asarray(v).copy() for k, v in {**tr.lm.params,
                                                      **tr.trainable.tensors}.items()}

    one, two = run(1), run(2)
    for k in one:
        assert np.array_equal(one[k].view(np.uint8), two[k].view(np.uint8)), k


@pytest.mark.parametrize("threads", [1, 4])
def test_a_trainer_without_a_two_worker_choice_runs_whole_micro_batches(threads: int) -> None:
    """With no two-worker choice (one thread, or 4 and more, where the halves were slower) there
    are no halves: no second gradient buffer (the memory estimate, given those threads, counts
    none either), even when a step is asked for two workers."""
    from engine.config import MambaConfig
    from engine.limits import MemorySpec, estimate

    tr = _trainer("small", "full", 12)
    tr.thread_tuner = ThreadTuner(threads=threads)
    tr.train_step(np.arange(4))
    tr.train_step(np.arange(4, 8), 2)
    assert tr._grads_b is None
    tr.thread_tuner = ThreadTuner(threads=2)
    tr.train_step(np.arange(8, 12))
    assert tr._grads_b is not None
    cfg = MambaConfig(vocab_size=256, d_model=64, n_layer=2)
    one, two = (estimate(MemorySpec(cfg, batch_size=4, threads=t)) for t in (threads, 2))
    assert two.grads == 2 * one.grads and one.optimizer == 2 * one.grads
