"""brk39: a budget's cap edited in the admin, and a membership removed, racing a tick or a
submission on PostgreSQL (real threads, each with its own connection; skipped on SQLite, where one
writer at a time leaves no such window)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.urls import reverse

from accounts.models import Membership
from budgets.models import Budget
from scheduler import services
from scheduler.models import Attempt, Workload
from scheduler.services import SubmissionError, do_submit_workload
from tests.pg_locks import BOUND_S, Waiting, until, waits_on_a_lock
from tests.services.test_share_audit import _change_form, _client
from tests.tick.test_brk38_pg import _tick_racing

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL"),
    pytest.mark.usefixtures("no_tick_pushes"),
]


def test_a_cap_set_in_the_admin_while_the_tick_ran_applies_after_its_starts(
    monkeypatch, admin, hosts, researcher, submit_kwargs
) -> None:
    """A cap of 0 GPU-hours that holds new work (``on_cap=hold``), saved in the admin between a
    tick's snapshot and its apply: the tick then started the budget's work after the cap was
    recorded, as a hold did before brk38. An admin save of a budget now waits for the ticks in
    flight first, so the cap applies after their decisions, as a later save would."""
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    olmo = workload.budget
    url = reverse("admin:budgets_budget_change", args=[olmo.pk])
    client = _client(admin)

    def save_cap(_host: Any) -> Any:
        return client.post(url, _change_form(olmo, cap_gpu_hours="0", on_cap=Budget.OnCap.HOLD))

    _result, other, _name, committed_first = _tick_racing(monkeypatch, workload.cluster_id, save_cap)

    assert other.error is None, other.error
    assert other.result.status_code == 302, other.result.content.decode()[:2000]
    assert not committed_first
    olmo.refresh_from_db()
    assert olmo.cap_gpu_hours == 0 and Attempt.objects.filter(workload=workload).exists()


def test_a_submission_whose_membership_was_removed_meanwhile_is_refused(monkeypatch, researcher, submit_kwargs) -> None:
    """The owner's membership removed after the submission checked it and before its transaction
    committed: the workload landed, submitted after the removal, by someone no longer a member.
    The submission now reads the membership again under a key share lock in its transaction: a
    removal committed first refuses it ``not_a_member``; a later one waits for its commit."""
    real = services._share_lock_budget
    seen: dict[str, Any] = {}

    def remove_then_lock(*args: Any, **kwargs: Any) -> Any:
        if "other" not in seen:
            other = Waiting(lambda: Membership.objects.filter(user=researcher).delete())
            assert until(lambda: (other.pid is not None and waits_on_a_lock(other.pid)) or other.ended.is_set())
            seen["other"] = other
        return real(*args, **kwargs)

    monkeypatch.setattr(services, "_share_lock_budget", remove_then_lock)
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    assert seen["other"].ended.wait(BOUND_S) and seen["other"].error is None
    assert refused.value.problems[0].code == "not_a_member"
    assert not Workload.objects.filter(owner=researcher).exists()
