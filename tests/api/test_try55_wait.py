"""try55: the wait of a running workload, in ``fairway ls`` and on its page, read ``1s`` at one
look and ``0`` at the next (submitted 0.3 s before its start): each of "now - submitted" and
"now - start" was cut to whole seconds before the one was taken from the other."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduler.accounting import account_from_attempts, accounting
from scheduler.models import Workload

T = datetime(2026, 12, 6, 22, 27, 4, 700_000, tzinfo=UTC)


@pytest.mark.parametrize("later_s", [10.2, 10.9, 11.0, 11.25, 3600.5])
def test_a_running_workloads_wait_does_not_change_while_it_runs(later_s):
    w = Workload(submitted_at=T, gpu_count=1)
    started = T + timedelta(seconds=1.3)  # queued 1.3 s: 1 s, at every look
    account_from_attempts(w, [(started, None, 0, True, False, "")])

    assert accounting(w, now=T + timedelta(seconds=later_s))["wait_s"] == 1


def test_a_finished_workloads_wait_is_what_it_was_while_it_ran():
    started, ended = T + timedelta(seconds=1.3), T + timedelta(seconds=61.9)
    w = Workload(submitted_at=T, gpu_count=1, finished_at=ended)
    account_from_attempts(w, [(started, ended, 60, True, False, "")])

    assert accounting(w, now=ended + timedelta(hours=1))["wait_s"] == 1
