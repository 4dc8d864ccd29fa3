"""try42: ``fairway show`` says when it leaves earlier events out."""

from __future__ import annotations

from scheduler.services import do_cancel_workload, do_submit_workload
from tests.cli.inprocess import run_cli


def _events_part(out: str) -> list[str]:
    return [line for line in out.split("events:\n")[1].splitlines() if line.strip()]


def test_fairway_show_says_how_many_earlier_events_it_left_out(monkeypatch, researcher, submit_kwargs):
    """A demo member preempted 12 times had 52 events; `fairway show` printed its last 10 under
    "events:" with no word of the 42 before them (the page and the API show all 52)."""
    w = do_submit_workload(researcher, **submit_kwargs())
    do_cancel_workload(researcher, w)
    lines = _events_part(run_cli(monkeypatch, researcher, "show", str(w.pk), "--events", "1"))
    assert lines[0].strip() == f"… 1 earlier event: fairway show {w.pk} --events 2"
    assert "canceled" in lines[1] and len(lines) == 2
    # all of them shown: no such line (the oracle: a count of the events the API gives)
    every = _events_part(run_cli(monkeypatch, researcher, "show", str(w.pk)))
    assert not any("earlier event" in line for line in every)
    assert len(every) == w.events.count()
