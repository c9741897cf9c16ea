"""A run's metrics.csv rows read as the window's curves (engine.read_history), headless."""

import math

from engine import read_history


def _step(step, epoch, loss, norm=1.0, val=None):  # noqa: ANN001, ANN202
    return {"kind": "step", "step": step, "epoch": epoch, "loss": loss, "grad_norm": norm,
            "val_loss": val}


def test_steps_their_held_out_losses_and_completed_epochs():
    rows = [_step(1, 0, 4.0, 2.0), _step(2, 0, float("nan")), _step(3, 0, 2.0, 1.0, val=3.0),
            {"kind": "eval", "step": 3, "epoch": 0, "val_loss": 3.0},  # the step's own: once
            {"kind": "eval", "step": 3, "epoch": 0, "val_loss": 2.9},  # the epoch's
            _step(4, 1, 1.5), _step(5, 1, 1.0)]  # an epoch still going
    h = read_history(rows)
    assert (h.steps, h.losses, h.norms) == ([1, 3, 4, 5], [4.0, 2.0, 1.5, 1.0], [2.0, 1.0, 1.0, 1.0])
    assert (h.nan_steps, h.nan_y) == ([2], [4.0])  # drawn at the loss before it
    assert (h.val_step_x, h.val_step_losses) == ([3], [3.0])
    assert (h.epoch_x, h.epoch_losses, h.epoch_norms) == ([3], [3.0], [1.5])  # finite steps' mean
    assert (h.val_x, h.val_losses) == ([3], [2.9])
    assert (h.last_step, h.epochs_done) == (5, {0})


def test_an_epoch_is_completed_by_its_count_by_the_snapshot_or_by_its_evaluated_last_step():
    rows = [_step(1, 0, 2.0), _step(2, 0, 1.0, val=1.5), _step(3, 1, 1.0), _step(4, 1, 0.5)]
    h = read_history(rows)  # epoch 1 has as many steps as the completed epoch 0
    assert h.epochs_done == {0, 1} and h.epoch_x == [2, 4]
    assert (h.val_x, h.val_losses) == ([2], [1.5])  # epoch 0 ended at an evaluated step
    h = read_history([_step(1, 0, 2.0)], epochs_done=1)  # the latest snapshot says it ended
    assert h.epochs_done == {0} and h.epoch_losses == [2.0]
    h = read_history([_step(1, 0, float("inf"))], epochs_done=1)  # no finite step: a gap
    assert h.epoch_x == [1] and math.isnan(h.epoch_losses[0])
    assert read_history([]).last_step == 0
