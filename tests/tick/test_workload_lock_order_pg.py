"""left50: the tick and the estimate run take several workload rows in one order (docs/locking.md:
id order, one statement), so neither deadlocks with the other nor with any ordered locker.

Before, the tick locked the workloads it starts (one statement), then wrote pending reasons
with an ``UPDATE … FROM`` whose row order PostgreSQL chooses, and the estimate run wrote its
estimates with ``UPDATE … WHERE id IN (…)`` in the heap's order: a transaction that locked the
lower id first and then waited for the higher one (the documented order) deadlocked with either.
Each test makes that interleaving happen for sure: the ordered locker runs in a thread, and each
side waits until the other is blocked on a row lock. Skipped on SQLite (one writer, no row locks).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models import F
from django.utils import timezone

from scheduler import notify, tick
from scheduler.estimates import _write_estimates
from scheduler.models import Workload
from scheduler.services import do_submit_workload

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and deadlocks need PostgreSQL"),
]


@pytest.fixture(autouse=True)
def _no_side_effects(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify, "request_tick_on_commit", lambda cluster_id: None)
    monkeypatch.setattr(notify, "push_hosts_on_commit", lambda host_ids: None)


def _wait_until_blocked(seconds: float = 5.0) -> bool:
    """Whether another session of the test database waits on a lock, within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cur.fetchone()[0]:
                return True
        time.sleep(0.02)
    return False


def _in_thread(job: Callable[[], Any], errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 -- a deadlock here is the finding
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _ordered_locker(lo: int, hi: int) -> None:
    """A transaction that takes both rows in the documented order (one statement, id order)."""
    with transaction.atomic():
        list(Workload.objects.select_for_update().filter(pk__in=[lo, hi]).order_by("pk").values_list("pk"))


def test_a_tick_writing_reasons_after_its_starts_does_not_deadlock_with_an_ordered_locker(
    researcher, submit_kwargs, cluster, monkeypatch
):
    # Given a held workload (lower id: the tick writes its reason) and one the tick starts (higher id)
    lo = do_submit_workload(researcher, **submit_kwargs(name="held", hold=True))
    Workload.objects.filter(pk=lo.pk).update(pending_reason="")  # as a tick finds a new one
    hi = do_submit_workload(researcher, **submit_kwargs(name="starts"))
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    apply_starts = tick._apply_starts

    def starts_then_wait(*args: Any, **kwargs: Any) -> Any:
        started = apply_starts(*args, **kwargs)
        # ... when another transaction asks for both rows in id order right after the starts
        threads.append(_in_thread(lambda: _ordered_locker(lo.pk, hi.pk), errors))
        assert _wait_until_blocked(), "the ordered locker never waited"
        return started

    monkeypatch.setattr(tick, "_apply_starts", starts_then_wait)

    # When the tick goes on to write the held one's reason
    try:
        result = tick.run_tick(cluster.pk)
    except BaseException as exc:  # noqa: BLE001
        errors.append(exc)
        result = None
    for t in threads:
        t.join(30)

    # Then neither side was chosen as a deadlock victim, and the tick did its work
    assert errors == []
    assert result is not None and len(result.starts) == 1
    lo.refresh_from_db()
    assert lo.pending_reason == "held"


def test_the_estimate_write_does_not_deadlock_with_an_ordered_locker(researcher, submit_kwargs, cluster):
    # Given two pending workloads whose rows lie in the heap in the other order than their ids
    lo = do_submit_workload(researcher, **submit_kwargs(name="first"))
    hi = do_submit_workload(researcher, **submit_kwargs(name="second"))
    # a change of an indexed column: lo's new version (and its index entries) lie after hi's
    Workload.objects.filter(pk=lo.pk).update(submitted_at=F("submitted_at") + timedelta(microseconds=1))
    at = timezone.now().replace(microsecond=0) + timedelta(hours=1)
    for w in (hi, lo):  # the run's order: whatever it found them in
        w.estimated_start, w.no_start_found, w.estimate_told = at, False, at
    errors: list[BaseException] = []
    holding, go_on = threading.Event(), threading.Event()

    def locker() -> None:
        # an ordered locker has taken the lower id and takes the higher one next
        with transaction.atomic():
            list(Workload.objects.select_for_update().filter(pk=lo.pk).values_list("pk"))
            holding.set()
            go_on.wait(10)
            list(Workload.objects.select_for_update().filter(pk=hi.pk).values_list("pk"))

    holder = _in_thread(locker, errors)
    assert holding.wait(10)
    # When the estimate run writes both while the locker holds the lower one
    writer = _in_thread(lambda: _write_estimates([hi, lo]), errors)
    assert _wait_until_blocked(), "the estimate write never waited"
    go_on.set()
    holder.join(30)
    writer.join(30)

    # Then neither side was chosen as a deadlock victim, and the estimates are written
    assert errors == []
    assert set(Workload.objects.filter(pk__in=[lo.pk, hi.pk]).values_list("estimated_start", flat=True)) == {at}
