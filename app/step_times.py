"""Seconds per training step by what a step's time depends on (``estimate_key``): the
estimate's timing before Start. A timing of three steps made while the window waits is kept for
this session only; a finished run's median step time replaces it and is kept across launches
(app settings), so the first estimate after a relaunch is not a three-step timing of a machine
that was busy at that moment."""

from __future__ import annotations

import json
import math

import engine

from . import settings

KEY = "estimate/run_step_seconds"  # {repr(estimate_key): seconds}
MOST = 64  # run timings kept; the oldest go first


def estimate_key(cfg: engine.MambaConfig, tc: engine.TrainConfig) -> tuple:
    """What a step's time depends on (the model's sizes, not its token ids: a Continue's config
    says eos 256 where the preset's says 0, so its run's time was never used for the next new
    run)."""
    shape = (cfg.vocab_size, cfg.d_model, cfg.n_layer, cfg.d_state, cfg.d_conv, cfg.expand,
             cfg.dt_rank, cfg.tie_embeddings)
    return (shape, tc.batch_size, tc.seq_len, tc.grad_accum, tc.activation_checkpointing,
            tc.lora, tc.wsla)


def _load() -> dict[str, float]:
    """The kept run timings; anything unreadable in the settings file is dropped."""
    try:
        d = json.loads(str(settings.load(KEY, "") or "{}"))
    except ValueError:
        return {}
    if not isinstance(d, dict):
        return {}
    return {str(k): float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and v > 0}


class StepTimes:
    def __init__(self) -> None:
        self._session: dict[tuple, float] = {}  # three-step timings made now
        self._runs = _load()  # runs' median step times, by repr(key), oldest first

    def get(self, key: tuple) -> float | None:
        """A run's median step time for ``key`` if one is known, else this session's timing."""
        return self._runs.get(repr(key), self._session.get(key))

    def timed(self, key: tuple, seconds: float) -> None:
        """A three-step timing made while the window waited (this session only)."""
        self._session[key] = seconds

    def from_run(self, key: tuple, seconds: float) -> None:
        """A run's median step time: the estimate's from now on, kept across launches."""
        self._runs.pop(repr(key), None)  # the newest last
        self._runs[repr(key)] = seconds
        while len(self._runs) > MOST:
            del self._runs[next(iter(self._runs))]
        settings.save(KEY, json.dumps(self._runs))
