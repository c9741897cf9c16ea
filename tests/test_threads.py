"""engine.threads.ThreadTuner: the BLAS thread count follows measured step times (a fake clock
stands in for the machine, so nothing here depends on this machine's speed)."""

from __future__ import annotations

from threadpoolctl import threadpool_info

from engine.threads import ThreadTuner


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(tuner: ThreadTuner, clock: _Clock, steps: int, cost: dict[int, float]) -> list[int]:
    used = []
    for _ in range(steps):
        with tuner.step():
            blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"][0]
            used.append(blas)
            clock.now += cost[blas]
    return used


def test_tuner_keeps_two_blas_threads_when_they_are_faster() -> None:
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock)
    used = _run(tuner, clock, 30, {2: 0.05, 1: 0.09})
    assert used[1:7] == [2, 1, 2, 1, 2, 1]  # the first trials alternate
    assert tuner.blas == 2
    assert used[-10:].count(2) >= 8  # only the probes use 1


def test_tuner_switches_to_one_blas_thread_when_the_machine_gets_busy() -> None:
    clock = _Clock()
    tuner = ThreadTuner(threads=2, first_trials=3, probe_every=10, probe_steps=2, clock=clock)
    _run(tuner, clock, 20, {2: 0.05, 1: 0.09})
    assert tuner.blas == 2
    _run(tuner, clock, 30, {2: 0.30, 1: 0.10})  # two threads now 3x slower than one
    assert tuner.blas == 1


def test_single_thread_tuner_never_probes() -> None:
    clock = _Clock()
    tuner = ThreadTuner(threads=1, clock=clock)
    assert set(_run(tuner, clock, 12, {1: 0.1})) == {1}
