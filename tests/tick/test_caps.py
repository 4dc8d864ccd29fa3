"""Budget caps in the live tick (DESIGN.md §3.7; the rule is in docs/policy.md, "Decisions").

A budget with ``cap_gpu_hours`` is capped when the allocated usage of its subtree over the
rolling period ``(now − cap_period_days, now]`` reaches the cap: its next allocated workloads
then start unallocated ("unfunded", ``on_cap=downgrade``) or stay pending (``on_cap=hold``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from budgets.models import Budget, UsageEntry
from scheduler.models import GPU, Attempt, Cluster, Host, Workload
from scheduler.snapshot import load_snapshot
from scheduler.tick import run_tick

HOUR = 3600


def _cap(budget: Budget, hours: str, days: int = 1, on_cap: str = Budget.OnCap.DOWNGRADE) -> None:
    Budget.objects.filter(pk=budget.pk).update(cap_gpu_hours=Decimal(hours), cap_period_days=days, on_cap=on_cap)


def _used(
    tw, budget: Budget, gpus: int, start_ago: int, end_ago: int | None, *, allocated: bool = True, host: str = "h1"
) -> Attempt:
    """An attempt of ``budget`` on ``host``'s first GPUs that ran from ``start_ago`` to ``end_ago`` seconds
    before now (still open when ``end_ago`` is None); ``allocated=False`` makes it unfunded."""
    workload = tw.workload(budget=budget, gpus=gpus, min_runtime=HOUR)
    host_gpus = list(GPU.objects.filter(host__name=host).order_by("index")[:gpus])
    attempt = tw.attempt(workload, host_gpus, started_ago=start_ago)
    if not allocated:
        Attempt.objects.filter(pk=attempt.pk).update(allocated=False, unfunded=True, protected_until=None)
    if end_ago is not None:
        Attempt.objects.filter(pk=attempt.pk).update(
            ended_at=tw.now - timedelta(seconds=end_ago), end_reason=Attempt.EndReason.SUCCEEDED
        )
        attempt.gpu_links.update(open=False)
        Workload.objects.filter(pk=workload.pk).update(state=Workload.State.SUCCEEDED)
    return attempt


def _next_start(tw, budget: Budget) -> tuple[Workload, Attempt | None]:
    """Submit a 1-GPU allocated workload of ``budget``, tick, and return it with its new attempt."""
    workload = tw.workload(budget=budget, gpus=1, min_runtime=HOUR)
    result = run_tick(tw.cluster.pk, now=tw.now)
    assert result.status == "ran"
    workload.refresh_from_db()
    return workload, workload.attempts.first()


@pytest.fixture
def cluster(tw):
    tw.host("h1", 4)
    tw.host("h2", 4)
    return tw


def test_usage_just_below_the_cap_stays_funded(cluster, pushed):
    tw = cluster
    _cap(tw.alpha, "2")
    _used(tw, tw.alpha, 1, start_ago=3 * HOUR, end_ago=HOUR + 1)  # 2 GPU-hours less one GPU-second

    workload, attempt = _next_start(tw, tw.alpha)

    assert workload.state == Workload.State.STARTING
    assert attempt.allocated and not attempt.unfunded


def test_at_exactly_the_cap_the_next_workload_starts_unfunded(cluster, pushed):
    tw = cluster
    _cap(tw.alpha, "2")
    _used(tw, tw.alpha, 2, start_ago=2 * HOUR, end_ago=HOUR)  # 2 GPUs × 1 h

    workload, attempt = _next_start(tw, tw.alpha)

    assert workload.state == Workload.State.STARTING
    assert attempt.unfunded and not attempt.allocated
    event = workload.events.get(kind="placed")
    assert event.data["unfunded"] is True and event.message.endswith("(unfunded)")


def test_at_the_cap_with_on_cap_hold_the_workload_stays_pending(cluster, pushed):
    tw = cluster
    _cap(tw.alpha, "2", on_cap=Budget.OnCap.HOLD)
    _used(tw, tw.alpha, 2, start_ago=2 * HOUR, end_ago=HOUR)

    workload, attempt = _next_start(tw, tw.alpha)

    assert attempt is None
    assert workload.state == Workload.State.PENDING
    assert workload.pending_reason == "budget_capped"
    assert workload.pending_detail == {"budget": "alpha"}


def test_usage_outside_the_period_does_not_count_and_the_edge_counts_pro_rata(cluster, pushed):
    tw = cluster
    _cap(tw.alpha, "2")  # period: the last 24 hours
    _used(tw, tw.alpha, 4, start_ago=30 * HOUR, end_ago=25 * HOUR)  # 20 GPU-hours, all before the period
    # 1 GPU from 25 h ago to 22 h 0 min 1 s ago: 1 h 59 min 59 s of it inside the period
    _used(tw, tw.alpha, 1, start_ago=25 * HOUR, end_ago=22 * HOUR + 1)

    _workload, attempt = _next_start(tw, tw.alpha)
    assert attempt.allocated and not attempt.unfunded

    # One GPU-second more inside the period reaches the cap.
    UsageEntry.objects.create(budget=tw.alpha, cluster=tw.cluster, start=tw.now, end=tw.now, gpu_seconds=1)
    _workload, attempt = _next_start(tw, tw.alpha)
    assert attempt.unfunded and not attempt.allocated


def test_running_attempts_and_usage_entries_count_unallocated_time_does_not(cluster, pushed):
    tw = cluster
    _cap(tw.alpha, "1.5")  # 5,400 GPU-seconds
    _used(tw, tw.alpha, 1, start_ago=HOUR, end_ago=None)  # running: 3,600 so far
    _used(tw, tw.alpha, 2, start_ago=10 * HOUR, end_ago=None, allocated=False, host="h2")  # unfunded: never counted
    UsageEntry.objects.create(  # an interval half inside the period: 1,200 GPU-seconds
        budget=tw.alpha,
        cluster=tw.cluster,
        start=tw.now - timedelta(hours=24, minutes=10),
        end=tw.now - timedelta(hours=23, minutes=50),
        gpus=2,
    )
    UsageEntry.objects.create(  # a lump before the period: not counted
        budget=tw.alpha, cluster=tw.cluster, start=tw.now, end=tw.now - timedelta(days=2), gpu_seconds=10**6
    )

    _workload, attempt = _next_start(tw, tw.alpha)
    assert attempt.allocated  # 4,800 < 5,400

    UsageEntry.objects.create(  # a lump inside the period: 600 more, 5,400 in all
        budget=tw.alpha, cluster=tw.cluster, start=tw.now, end=tw.now - timedelta(hours=3), gpu_seconds=600
    )
    _workload, attempt = _next_start(tw, tw.alpha)
    assert attempt.unfunded and not attempt.allocated


def test_a_parents_cap_counts_its_whole_subtree_in_every_cluster(cluster, pushed):
    tw = cluster
    _cap(tw.org, "3")
    _used(tw, tw.beta, 1, start_ago=3 * HOUR, end_ago=HOUR)  # 2 GPU-hours by beta here
    other = Cluster.objects.create(name="c2")
    UsageEntry.objects.create(  # 1 GPU-hour by alpha on another cluster
        budget=tw.alpha, cluster=other, start=tw.now - timedelta(hours=2), end=tw.now - timedelta(hours=1), gpus=1
    )

    workload, attempt = _next_start(tw, tw.alpha)

    assert attempt.unfunded and not attempt.allocated
    assert workload.state == Workload.State.STARTING


def test_a_cap_adds_one_query_to_the_snapshot_whatever_the_size(cluster):
    tw = cluster
    _cap(tw.alpha, "2")
    _cap(tw.org, "100", days=30)

    def queries(pending: int, history: int) -> int:
        for _ in range(history):
            _used(tw, tw.beta, 1, start_ago=2 * HOUR, end_ago=HOUR)
        for _ in range(pending):
            tw.workload(gpus=1)
        with CaptureQueriesContext(connection) as ctx:
            load_snapshot(tw.cluster, tw.now)
        with CaptureQueriesContext(connection) as summed:  # the tick's: the caps summed in SQL (left44)
            load_snapshot(tw.cluster, tw.now, with_cap_records=False)
        assert len(summed.captured_queries) == len(ctx.captured_queries)
        return len(ctx.captured_queries)

    assert queries(1, 1) == queries(50, 20) == 8  # no open attempt: their GPUs are not read (lat32)


def test_a_workload_held_by_a_cap_is_told_the_cap_s_numbers(cluster, pushed):
    """tryout36: "Budget alpha has reached its cap and holds new work until its usage falls below
    the cap." named no cap: the reader had to find it on the budgets page."""
    from scheduler.reports import explain_pending

    tw = cluster
    _cap(tw.alpha, "2", days=7, on_cap=Budget.OnCap.HOLD)
    _used(tw, tw.alpha, 2, start_ago=2 * HOUR, end_ago=HOUR)
    workload, _attempt = _next_start(tw, tw.alpha)
    assert explain_pending(workload).sentences[0] == (
        "Budget alpha has reached its cap (2 GPU-hours of allocated use per 7 days) and holds new work "
        "until its usage falls below the cap."
    )


def test_a_cap_lifts_as_usage_leaves_its_period_and_the_estimate_is_the_tick_that_starts_the_work(cluster, pushed):
    """left39: the forward simulation (estimates, quotes) kept a capped budget capped, so a cap that
    lifts as old usage leaves its period gave no estimate though the tick starts the work then. A
    cap does not lift when the budget's running work ends (the period's usage counts ended
    attempts too): only as that usage leaves the rolling period, an instant the simulation now
    follows (docs/estimates.md, "Caps in the simulation")."""
    from scheduler.estimates import store_estimates

    tw = cluster
    # Given alpha at its cap (2 GPU-hours a day, on_cap hold) with 2 GPUs running for 2 h, and a
    # 1-GPU workload of alpha waiting while h2's 4 GPUs are free
    _cap(tw.alpha, "2", on_cap=Budget.OnCap.HOLD)
    running = _used(tw, tw.alpha, 2, start_ago=2 * HOUR, end_ago=None)
    waiting, attempt = _next_start(tw, tw.alpha)
    assert attempt is None and waiting.pending_reason == "budget_capped"
    store_estimates(tw.cluster.pk, tw.now)
    waiting.refresh_from_db()
    assert waiting.estimated_start is None  # its running work goes on: no start within the window
    # When the running work ends five minutes later and a tick runs ten minutes later
    ended = tw.now + timedelta(minutes=5)
    Attempt.objects.filter(pk=running.pk).update(ended_at=ended, end_reason=Attempt.EndReason.SUCCEEDED)
    running.gpu_links.update(open=False)
    Workload.objects.filter(pk=running.workload_id).update(state=Workload.State.SUCCEEDED, finished_at=ended)
    later = tw.now + timedelta(minutes=10)
    assert run_tick(tw.cluster.pk, now=later).status == "ran"
    # Then the work still waits at the cap
    waiting.refresh_from_db()
    assert (waiting.state, waiting.pending_reason) == (Workload.State.PENDING, "budget_capped")
    assert not waiting.attempts.exists()
    # and its estimate is the first second at which the 4 h 10 min of the ended attempt have left
    # enough of the day below the cap: 2 GPUs × (ended − (t − 24 h)) < 2 h from t = ended + 23 h + 1 s
    store_estimates(tw.cluster.pk, later)
    waiting.refresh_from_db()
    assert waiting.estimated_start == ended + timedelta(hours=23, seconds=1)
    # which is the tick that starts it, allocated: one second earlier it still waits at the cap
    for host in ("h1", "h2"):  # the agents kept reporting
        Host.objects.filter(name=host).update(last_heartbeat=waiting.estimated_start)
    assert run_tick(tw.cluster.pk, now=waiting.estimated_start - timedelta(seconds=1)).status == "ran"
    waiting.refresh_from_db()
    assert (waiting.state, waiting.pending_reason) == (Workload.State.PENDING, "budget_capped")
    assert run_tick(tw.cluster.pk, now=waiting.estimated_start).status == "ran"
    waiting.refresh_from_db()
    assert waiting.state == Workload.State.STARTING
    assert waiting.attempts.get().allocated


def _crossing(tw) -> tuple[Workload, datetime]:
    """alpha runs 1 GPU for 1 h 30 min of a 2 GPU-hour daily cap (reached 30 min from now); beta
    holds the other 7 GPUs, protected for 8 h but stopped by a 1 h wall-time limit (50 min from
    now, released a grace later); alpha's 1-GPU workload waits for those GPUs. Returns it and the
    instant at which the cap is reached."""
    _used(tw, tw.alpha, 1, start_ago=90 * 60, end_ago=None)
    beta = tw.workload(budget=tw.beta, gpus=7, min_runtime=8 * HOUR, max_runtime_s=HOUR)
    gpus = list(GPU.objects.filter(host__name="h1").order_by("index")[1:]) + list(GPU.objects.filter(host__name="h2"))
    tw.attempt(beta, gpus, started_ago=10 * 60)
    waiting = tw.workload(budget=tw.alpha, gpus=1, min_runtime=HOUR)
    assert run_tick(tw.cluster.pk, now=tw.now).status == "ran"
    return waiting, tw.now + timedelta(minutes=30)


def test_a_budget_whose_running_work_reaches_its_cap_is_held_after_the_crossing_in_estimates(cluster, pushed):
    """The other direction: a budget below its cap whose running allocated work reaches it within
    the window started allocated work in the simulation after the crossing; the tick holds it."""
    from scheduler.estimates import store_estimates

    tw = cluster
    _cap(tw.alpha, "2", on_cap=Budget.OnCap.HOLD)
    waiting, crossing = _crossing(tw)
    # The tick's rule: below the cap a second before the crossing, at it from the crossing on
    assert not _capped_at(tw, crossing - timedelta(seconds=1)) and _capped_at(tw, crossing)
    # The estimate: beta's GPUs come back after the crossing, and alpha's running work keeps it
    # at the cap for the rest of the window: no start
    store_estimates(tw.cluster.pk, tw.now)
    waiting.refresh_from_db()
    assert waiting.estimated_start is None and waiting.no_start_found


def test_a_budget_whose_running_work_reaches_its_cap_starts_unfunded_after_the_crossing_in_estimates(cluster, pushed):
    from scheduler.estimates import running_workloads, wall_time_limits
    from scheduler.sim.estimate import Forward

    tw = cluster
    _cap(tw.alpha, "2")  # on_cap downgrade
    waiting, crossing = _crossing(tw)
    snap, _ = load_snapshot(tw.cluster, tw.now)
    end = snap.now + snap.window
    fw = Forward(snap, 30, running_workloads(snap), wall_time_limits(snap), end)
    fw.tick()
    while str(waiting.pk) not in fw.started and fw.now < end:
        fw.now = fw.next_event(end)
        fw.tick()
    # beta's limit (50 min from now) and the grace: after the crossing, so it starts unfunded
    assert fw.started[str(waiting.pk)] == int((tw.now + timedelta(minutes=50, seconds=30)).timestamp())
    (attempt,) = [a for a in fw.attempts.values() if a.workload == str(waiting.pk)]
    assert not attempt.allocated
    assert _capped_at(tw, crossing)


def _capped_at(tw, at: datetime) -> bool:
    snap, _ = load_snapshot(tw.cluster, at)
    return next(b for b in snap.budgets if b.key == str(tw.alpha.pk)).capped


def test_an_archived_budget_s_cap_sentence_keeps_its_numbers(cluster, pushed):
    """pages46 (tryout46): archived, pending work carries on, and its sentence still named the cap
    ("has reached its cap, so …") but no longer its numbers, read of live budgets only. They come
    from the budget the workload's chain names, archived or not, not from a live namesake."""
    from budgets.services import do_archive_budget
    from scheduler.reports import explain_pending

    tw = cluster
    _cap(tw.alpha, "2", days=7, on_cap=Budget.OnCap.HOLD)
    _used(tw, tw.alpha, 2, start_ago=2 * HOUR, end_ago=HOUR)
    workload, _attempt = _next_start(tw, tw.alpha)
    do_archive_budget(Budget.objects.get(pk=tw.alpha.pk))
    workload.refresh_from_db()
    said = (
        "Budget alpha has reached its cap (2 GPU-hours of allocated use per 7 days) and holds new work "
        "until its usage falls below the cap."
    )
    assert explain_pending(workload).sentences[0] == said
    # a live namesake created since, with a cap of its own: not the workload's budget
    Budget.objects.create(name="alpha", parent_id=tw.alpha.parent_id, shares=1, cap_gpu_hours=Decimal("9"))
    assert explain_pending(workload).sentences[0] == said
