"""Background jobs of the window (estimates, corpus counts, loads) when the app quits under them."""

import shiboken6

from app.workers import _Job


def test_a_job_ending_after_the_app_quit_is_silent(qapp, capsys):
    """Closing the window in its first seconds (the step timing still running) printed
    'RuntimeError: Signal source has been deleted' tracebacks on the way out."""
    for fn in (lambda: 42, lambda: 1 / 0):
        job = _Job(fn)
        shiboken6.delete(job.signals)  # what the quitting app did to it
        job.run()  # no RuntimeError
    assert "Traceback" not in capsys.readouterr().err


def test_a_job_still_reports_while_the_app_runs(qapp):
    got: list[object] = []
    job = _Job(lambda: 42)
    job.signals.done.connect(got.append)
    job.run()
    bad = _Job(lambda: 1 / 0)
    bad.signals.failed.connect(got.append)
    bad.run()
    assert got[0] == 42 and "division by zero" in str(got[1])
