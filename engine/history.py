"""A run's metrics.csv rows as the curves the window draws: training steps, their held-out
losses, and one point per completed epoch (the mean of its finite steps). The rule for which
"eval" rows are a step's and which an epoch's, and when an epoch counts as completed, reads the
rows ``Run.train`` writes (``engine.runformat.metrics_file``); it lived in the window's plot
panel, away from the code that writes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class History:
    """Curves of a run, each a list of x (optimizer step) and y values."""

    steps: list[float] = field(default_factory=list)  # finite training steps
    losses: list[float] = field(default_factory=list)
    norms: list[float] = field(default_factory=list)
    nan_steps: list[float] = field(default_factory=list)  # non-finite steps, drawn at the
    nan_y: list[float] = field(default_factory=list)  # last finite loss before them
    val_step_x: list[float] = field(default_factory=list)  # held-out losses of single steps
    val_step_losses: list[float] = field(default_factory=list)
    epoch_x: list[float] = field(default_factory=list)  # completed epochs, at their last step
    epoch_losses: list[float] = field(default_factory=list)
    epoch_norms: list[float] = field(default_factory=list)
    val_x: list[float] = field(default_factory=list)  # epochs' held-out losses
    val_losses: list[float] = field(default_factory=list)
    last_step: int = 0  # the last step of the rows
    epochs_done: set[int] = field(default_factory=set)  # the completed epochs (0-based)


def read_history(rows: list[dict[str, Any]], epochs_done: int = 0) -> History:
    """``rows`` (``engine.read_kept_metrics``) as curves. An "eval" row that repeats its step
    row's ``val_loss`` is that step's held-out loss; any other is an epoch's; an epoch ending at
    an evaluated step has that step's. An epoch counts as completed when a later epoch has
    steps, it has an epoch held-out row, it has as many steps as a completed one, or it is among
    the first ``epochs_done`` (the latest snapshot's count)."""
    h = History()
    per_epoch: dict[int, list[tuple[float, float, float]]] = {}  # epoch: (step, loss, norm)
    last_step: dict[int, float] = {}
    counts: dict[int, int] = {}  # epoch: its step rows
    epoch_val: dict[int, tuple[float, float]] = {}
    step_eval: tuple[int, float] | None = None  # the step row whose eval row comes next
    for row in rows:
        epoch = int(row.get("epoch") or 0)
        if row["kind"] == "step":
            loss, norm, val = row.get("loss"), row.get("grad_norm"), row.get("val_loss")
            last_step[epoch] = max(last_step.get(epoch, 0), row["step"])
            counts[epoch] = counts.get(epoch, 0) + 1
            if loss is None or not math.isfinite(loss):
                h.nan_steps.append(row["step"])
                h.nan_y.append(h.losses[-1] if h.losses else 0.0)
                per_epoch.setdefault(epoch, [])
            else:
                h.steps.append(row["step"])
                h.losses.append(loss)
                h.norms.append(norm or 0.0)
                per_epoch.setdefault(epoch, []).append((row["step"], loss, norm or 0.0))
            step_eval = None
            if val is not None and math.isfinite(val):
                h.val_step_x.append(row["step"])
                h.val_step_losses.append(val)
                step_eval = (row["step"], val)
        elif row["kind"] == "eval" and row.get("val_loss") is not None:
            if step_eval == (row["step"], row["val_loss"]):
                step_eval = None  # the step row's own held-out loss, drawn already
            else:
                epoch_val[epoch] = (row["step"], row["val_loss"])
    top = max(per_epoch, default=-1)
    done = {e for e in per_epoch if e < top or e in epoch_val or e < epochs_done}
    full = {counts[e] for e in done}
    done |= {e for e in per_epoch if counts[e] in full}
    step_val = dict(zip(h.val_step_x, h.val_step_losses, strict=True))
    for e in done - set(epoch_val):  # its last step was evaluated: the epoch's own held-out
        if last_step[e] in step_val:  # loss is that one, logged once
            epoch_val[e] = (last_step[e], step_val[last_step[e]])
    for e in sorted(done):
        good = per_epoch[e]
        x = good[-1][0] if good else last_step[e]
        h.epoch_x.append(x)
        h.epoch_losses.append(sum(g[1] for g in good) / len(good) if good else math.nan)
        h.epoch_norms.append(sum(g[2] for g in good) / len(good) if good else math.nan)
        if e in epoch_val:
            h.val_x.append(x)
            h.val_losses.append(epoch_val[e][1])
    h.last_step = int(max(last_step.values(), default=0))
    h.epochs_done = done
    return h
