"""The Delete dialog's words about the model the next Start begins from, which only a mutation
of the code showed untested (each test fails with a small change to the code it names)."""

from __future__ import annotations


def test_deleting_the_run_whose_snapshot_is_opened_says_the_next_start_loses_it(win, tmp_path):
    """File > Open model… on a run's snapshot: deleting that run takes the next Start's model
    (the check is "inside the run", not only "the run itself")."""
    run = tmp_path / "runs" / "r"
    win.init_dir = str(run / "snapshots" / "step-2")
    assert win._next_start_use(str(run)).startswith(
        " It holds the model the next Start begins from")
    assert win._next_start_use(str(tmp_path / "runs" / "r2")) == ""  # another run: nothing
    win.init_dir = None
    win.continue_dir = str(run)
    assert win._next_start_use(str(run)) == (
        " The next Start continues it: that Start would train a new run instead.")
