"""left56: instants are shown rounded up (tryout28) and the wait was cut down, so "submitted
22:35:38, started 22:35:39" sat beside "wait 0". The one rule (``fairway_cli.numbers.second_up``):
the wait is the difference of the instants as shown, whichever reader computes it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fairway_cli.numbers import instant_text, second_up, seconds_between
from scheduler import lifecycle
from scheduler.accounting import ATTEMPT_ROW, account_from_attempts, accounting, with_accounting
from scheduler.models import Attempt, Host, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli

T = datetime(2026, 12, 6, 22, 35, 37, 900_000, tzinfo=UTC)


def test_the_rule():
    assert second_up(T) == T.replace(second=38, microsecond=0)
    assert second_up(T.replace(microsecond=0)) == T.replace(microsecond=0)
    assert seconds_between(T, T + timedelta(seconds=0.2)) == 1  # 38 → 39 as shown
    assert seconds_between(T + timedelta(seconds=0.2), T) == 0


@pytest.mark.parametrize(
    ("queued_s", "ran_s"), [(0.2, 5.0), (0.1, 0.95), (1.0, 3.3), (0.05, 60.05), (59.95, 0.3), (2.15, 7.0)]
)
def test_the_wait_is_the_difference_of_the_instants_shown(queued_s, ran_s):
    started = T + timedelta(seconds=queued_s)
    ended = started + timedelta(seconds=ran_s)
    shown = int((second_up(started) - second_up(T)).total_seconds())
    running = Workload(submitted_at=T, gpu_count=1)
    account_from_attempts(running, [(started, None, 0, True, False, "")])
    for later in (0.01, 0.5, 3600.7):
        assert accounting(running, now=started + timedelta(seconds=later))["wait_s"] == shown
    done = Workload(submitted_at=T, gpu_count=1, finished_at=ended)
    account_from_attempts(done, [(started, ended, 0, True, False, "failed")])
    assert accounting(done, now=ended + timedelta(hours=1))["wait_s"] == shown


def test_sql_memory_and_the_cli_agree(researcher, cluster, submit_kwargs, monkeypatch):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    Workload.objects.filter(pk=w.pk).update(submitted_at=T)
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    start = T + timedelta(seconds=0.2)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=start)
    host = Host.objects.get(pk=attempt.host_id)
    lifecycle.attempt_exited(host, attempt.pk, 1, now=start + timedelta(seconds=9.85))
    w.refresh_from_db()
    at = start + timedelta(hours=1)
    by_sql = accounting(with_accounting(Workload.objects.filter(pk=w.pk)).get(), at)
    rows = Attempt.objects.filter(workload=w).values_list(*ATTEMPT_ROW)
    in_memory = accounting(account_from_attempts(Workload.objects.get(pk=w.pk), rows), at)
    assert by_sql == in_memory
    assert by_sql["wait_s"] == 1
    shown = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert f"submitted:       {instant_text(T)}" in shown and f"started:         {instant_text(start)}" in shown
    assert "wait:            1s\n" in shown
