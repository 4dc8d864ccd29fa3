"""break31: faults found trying Fairway as a new researcher, an operator and leadership (brk31)."""

from __future__ import annotations

from django.test import Client

from scheduler import lifecycle
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def test_an_attempt_that_never_started_is_not_shown_as_starting(researcher, cluster, submit_kwargs, monkeypatch):
    """An attempt that ended ``failed_to_start`` read "starting" in the start column of the page
    and of ``fairway show``, next to its end time: it never started, and never will."""
    w = do_submit_workload(researcher, **submit_kwargs())
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_failed_to_start(attempt.host, attempt.pk, "no such command")
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{w.pk}/").content.decode()
    row = page.split("<h2>Attempts</h2>")[1].split("</table>")[0]
    assert "starting" not in row and "never started" in row
    out = run_cli(monkeypatch, researcher, "show", str(w.pk))
    attempts = out.split("attempts:")[1].split("events:")[0]
    assert "starting" not in attempts and "never started" in attempts
