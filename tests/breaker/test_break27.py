"""break27: faults found trying Fairway as a new user and with hostile input; each case names what it was."""

from __future__ import annotations


def test_fairway_show_prints_every_event_when_there_are_fewer_than_asked(researcher, submit_kwargs, monkeypatch):
    """``fairway show`` (``--events 10`` by default) sliced ``events[len - N:]``: with N between
    len + 1 and 2 len - 1 the start was negative but inside the list, so a workload with 9 events
    (4 failed starts) showed only its last one, and one with 2 events under ``--events 3`` only
    ``canceled``."""
    from scheduler.services import do_cancel_workload, do_submit_workload
    from tests.cli.inprocess import run_cli

    w = do_submit_workload(researcher, **submit_kwargs())
    do_cancel_workload(researcher, w)
    for n in ["2", "3", "10"]:
        shown = run_cli(monkeypatch, researcher, "show", str(w.pk), "--events", n).split("events:\n")[1]
        assert "submitted" in shown and "canceled" in shown, (n, shown)
