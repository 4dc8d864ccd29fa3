"""left53: ``fairway logs ID -f --attempt N`` of an old, finished attempt whose host is gone kept
following (a part's error is no end while the workload is open, try50) until the workload ended.
The logs answer says whether the attempt ``ended``; a finished attempt's log is printed once and
the command ends."""

from __future__ import annotations

import pytest
from django.utils import timezone

from fairway_cli import cli as fairway_cli
from scheduler.models import Attempt, Host, Workload
from scheduler.services import do_submit_workload
from tests.breaker.test_brk51 import _running
from tests.cli.inprocess import run_cli


@pytest.fixture
def old_attempt(researcher, submit_kwargs) -> tuple[Workload, Attempt]:
    """A running workload whose attempt 1 ended (it runs again elsewhere), attempt 1's host offline."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    attempt = _running(w)
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=timezone.now())
    Host.objects.filter(pk=attempt.host_id).update(state=Host.State.OFFLINE)
    return w, attempt


def test_the_logs_answer_says_whether_the_attempt_ended(researcher_client, old_attempt):
    w, attempt = old_attempt
    body = researcher_client.get(f"/api/v1/workloads/{w.pk}/logs/", {"attempt": 1}).json()
    assert body["ended"] is True and body["parts"][0]["error"].endswith("is offline")


def test_following_a_finished_attempt_prints_it_once_and_ends(monkeypatch, researcher, old_attempt):
    w, attempt = old_attempt
    assert Workload.objects.get(pk=w.pk).state == Workload.State.RUNNING  # the workload goes on

    def sleep(seconds: float) -> None:
        raise AssertionError("followed a finished attempt")

    monkeypatch.setattr(fairway_cli.time, "sleep", sleep)
    out = run_cli(monkeypatch, researcher, "logs", str(w.pk), "-f", "--attempt", "1")
    assert out == f"[{attempt.host.name}: host {attempt.host.name} is offline]\n"
