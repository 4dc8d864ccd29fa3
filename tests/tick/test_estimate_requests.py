"""Estimated starts follow the ticks (DESIGN.md §3.8, docs/estimates.md): a tick that sees new
pending work asks for estimates at once (debounced, single flight), so a newly submitted workload
does not wait for the clock's ``FAIRWAY_ESTIMATE_INTERVAL_S``. The actors are driven directly."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler import tasks
from scheduler.services import do_create_cluster, do_register_host, do_submit_workload
from tests.conftest import connected


@pytest.fixture
def one_gpu(db, org_tree, researcher, monkeypatch):
    cluster = do_create_cluster("est-req")
    connected(do_register_host(cluster, "r1", [(0, "GPU-r1-0", "H100", 80000)])[0])
    sent: list[tuple] = []
    monkeypatch.setattr(tasks.estimate_starts, "send_with_options", lambda **kw: sent.append(kw["args"]))
    tasks.reset_debounce([cluster.pk])
    yield cluster, sent
    tasks.reset_debounce([cluster.pk])


def _submit(researcher, org_tree, cluster, name, **kw):
    return do_submit_workload(
        researcher,
        name=name,
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        gpu_model="H100",
        gpu_count=1,
        image="",
        command=["true"],
        env={},
        min_runtime_s=600,
        **kw,
    )


def test_a_new_pending_workload_gets_an_estimate_without_the_clock(one_gpu, researcher, org_tree):
    cluster, sent = one_gpu
    first = _submit(researcher, org_tree, cluster, "first", max_runtime_s=3600)
    tasks.tick.fn(cluster.pk)  # starts it: the tick asks for estimates
    assert sent == [(cluster.pk,)]
    tasks.estimate_starts.fn(*sent.pop())
    first.refresh_from_db()
    assert first.state == "starting"

    waiting = _submit(researcher, org_tree, cluster, "waiting")
    tasks.tick.fn(cluster.pk)  # its first reason: a new arrival, so the tick asks again
    assert sent == [(cluster.pk,)]
    waiting.refresh_from_db()
    assert (waiting.state, waiting.estimated_start) == ("pending", None)
    tasks.estimate_starts.fn(*sent.pop())
    waiting.refresh_from_db()
    # Behind its own budget's work, it starts when that work's wall-time limit stops it (1 h
    # after its start; still starting, so counted from now) and the grace has passed.
    assert waiting.estimated_start is not None
    assert waiting.estimated_start >= first.submitted_at + timedelta(seconds=3600)

    tasks.tick.fn(cluster.pk)  # nothing new: no request
    assert sent == []


def test_without_a_wall_time_limit_work_behind_its_own_budget_has_no_estimate(one_gpu, researcher, org_tree):
    cluster, sent = one_gpu
    _submit(researcher, org_tree, cluster, "first")
    tasks.tick.fn(cluster.pk)
    waiting = _submit(researcher, org_tree, cluster, "waiting")
    tasks.tick.fn(cluster.pk)
    tasks.estimate_starts.fn(cluster.pk)
    waiting.refresh_from_db()
    assert waiting.estimated_start is None  # nothing ends on its own in the forward simulation


def test_coverage_counts_seen_pending_allocated_work(one_gpu, researcher, org_tree):
    from scheduler.estimates import Coverage, estimate_coverage

    cluster, sent = one_gpu
    _submit(researcher, org_tree, cluster, "first", max_runtime_s=3600)
    tasks.tick.fn(cluster.pk)
    _submit(researcher, org_tree, cluster, "waiting")
    # No tick has seen it: whether it is held, capped, ... is not known yet; counted apart.
    assert estimate_coverage(cluster.pk) == Coverage(counted=0, estimated=0, unseen=1)
    tasks.tick.fn(cluster.pk)
    # Seen, but no estimates run has read it yet: counted apart too (est61).
    assert estimate_coverage(cluster.pk) == Coverage(counted=0, estimated=0, unseen=0, awaiting=1)
    tasks.estimate_starts.fn(cluster.pk)
    assert estimate_coverage(cluster.pk) == Coverage(counted=1, estimated=1, unseen=0)
    assert estimate_coverage(cluster.pk).fraction == 1.0


def test_coverage_counts_work_arrived_since_the_last_run_apart(one_gpu, researcher, org_tree):
    """est61: the demo's worst sample (79 %) was a burst of arrivals that a tick had given a reason
    and the estimates run it asked for had not read yet (0.5 s debounce, then the run). Such work
    is awaiting that run, counted apart (``Coverage.awaiting``) as the work no tick has seen; work a
    run read and found no start for is counted, without an estimate."""
    from scheduler.estimates import Coverage, estimate_coverage

    cluster, _sent = one_gpu
    _submit(researcher, org_tree, cluster, "first")  # no wall-time limit: nothing ends in the simulation
    tasks.tick.fn(cluster.pk)
    _submit(researcher, org_tree, cluster, "a")
    tasks.tick.fn(cluster.pk)
    assert estimate_coverage(cluster.pk) == Coverage(counted=0, estimated=0, awaiting=1)
    tasks.estimate_starts.fn(cluster.pk)  # reads a: none within one window
    assert estimate_coverage(cluster.pk) == Coverage(counted=1, estimated=0)
    _submit(researcher, org_tree, cluster, "b")
    assert estimate_coverage(cluster.pk) == Coverage(counted=1, estimated=0, unseen=1)
    tasks.tick.fn(cluster.pk)
    assert estimate_coverage(cluster.pk) == Coverage(counted=1, estimated=0, awaiting=1)
    tasks.estimate_starts.fn(cluster.pk)
    assert estimate_coverage(cluster.pk) == Coverage(counted=2, estimated=0)


def test_a_run_begins_no_sooner_than_the_minimum_gap_after_the_last_one(one_gpu, monkeypatch, settings):
    """Under a stream of submissions every tick asks: the next run waits out
    FAIRWAY_ESTIMATE_MIN_GAP_S after the last one ended (docs/estimates.md, "Cost"), the debounce
    alone otherwise; a request during a run is still served, by a run a gap after it."""
    cluster, _sent = one_gpu
    delays: list[int | None] = []
    monkeypatch.setattr(tasks.estimate_starts, "send_with_options", lambda **kw: delays.append(kw["delay"]))
    settings.FAIRWAY = {**settings.FAIRWAY, "ESTIMATE_DEBOUNCE_S": 2.0, "ESTIMATE_MIN_GAP_S": 15.0}

    assert tasks.request_estimates(cluster.pk)  # no run yet: the debounce
    assert delays == [2000]
    assert not tasks.request_estimates(cluster.pk)  # queued: "estimate again", no message
    tasks.estimate_starts.fn(cluster.pk)  # ends; the request made during it asks again, a gap later
    assert len(delays) == 2 and 14_000 <= (delays[1] or 0) <= 15_000
    tasks.estimate_starts.fn(cluster.pk)
    assert len(delays) == 2  # nothing asked during that run: no further message

    assert tasks.request_estimates(cluster.pk)  # a tick right after the run: the gap, not the debounce
    assert 14_000 <= (delays[2] or 0) <= 15_000

    tasks.reset_debounce([cluster.pk])
    settings.FAIRWAY = {**settings.FAIRWAY, "ESTIMATE_MIN_GAP_S": 0.0}
    tasks.estimate_starts.fn(cluster.pk)
    assert tasks.request_estimates(cluster.pk)  # no gap: the debounce only, as before
    assert delays[3] == 2000


def _boot_worker(queues: set[str] | None) -> None:
    """Boot (and stop) a dramatiq worker on the configured broker, as ``rundramatiq`` and
    ``serve --with-worker`` do: its boot runs the broker's middleware."""
    import dramatiq

    worker = dramatiq.Worker(dramatiq.get_broker(), queues=queues, worker_threads=1, worker_timeout=50)
    worker.start()
    worker.stop(timeout=5000)


def test_a_restarted_estimates_worker_resumes_within_one_interval(one_gpu):
    """tryout45: a run queued or running when the estimates process was restarted left its
    "estimate pending" marker for up to 300 s, so the clock's requests sent nothing and estimates
    stopped for 3-4 minutes. A worker that consumes the estimates queue forgets the markers as it
    boots (the runs the old process held are gone, or given back and run again, which is safe): the
    clock's next request, within one interval, sends a run."""
    cluster, sent = one_gpu
    assert tasks.request_estimates(cluster.pk)
    assert not tasks.request_estimates(cluster.pk)  # a run is queued: single flight
    sent.clear()

    _boot_worker({"scheduler", "notifications", "default"})  # the worker process: not its markers
    assert not tasks.request_estimates(cluster.pk)
    assert sent == []

    _boot_worker({"estimates"})  # the estimates process, restarted
    assert tasks.request_estimates(cluster.pk)
    assert sent == [(cluster.pk,)]
    assert not tasks.request_estimates(cluster.pk)  # single flight again


def test_an_embedded_worker_forgets_the_markers_too(one_gpu):
    """``serve --with-worker`` consumes every queue, estimates included."""
    cluster, sent = one_gpu
    assert tasks.request_estimates(cluster.pk)
    _boot_worker(None)
    assert tasks.request_estimates(cluster.pk)
    assert sent == [(cluster.pk,), (cluster.pk,)]


def _run_estimates(sent: list[tuple], settings) -> None:
    """Run the estimates asked for (single flight: one asked and not run keeps later asks off)."""
    settings.FAIRWAY = {**settings.FAIRWAY, "ESTIMATE_MIN_GAP_S": 0}
    while sent:
        tasks.estimate_starts.fn(*sent.pop())


@pytest.mark.parametrize("hold", [True, False])
def test_a_budgets_hold_or_release_asks_for_estimates(one_gpu, researcher, org_tree, settings, hold):
    """est48: a tick that moves pending work into or out of a wait no forward simulation ends (here
    its budget's hold) asks for estimates: other work's estimates counted that work as starting (or
    not), and the released work read "Not known yet" until the clock's interval (60 s)."""
    from accounts.services import do_add_membership
    from budgets.services import do_set_hold

    cluster, sent = one_gpu
    _submit(researcher, org_tree, cluster, "first", max_runtime_s=3600)
    tasks.tick.fn(cluster.pk)
    _run_estimates(sent, settings)
    do_add_membership(researcher, org_tree["nlp/tulu"])
    tulu = org_tree["nlp/tulu"]
    if not hold:
        do_set_hold(tulu, True)
    other = do_submit_workload(
        researcher,
        name="other",
        budget=tulu,
        cluster=cluster,
        gpu_model="H100",
        gpu_count=1,
        image="",
        command=["true"],
        env={},
        min_runtime_s=600,
    )
    tasks.tick.fn(cluster.pk)
    _run_estimates(sent, settings)
    other.refresh_from_db()
    assert (other.pending_reason == "held") is not hold

    do_set_hold(tulu, hold)
    tasks.tick.fn(cluster.pk)

    other.refresh_from_db()
    assert (other.pending_reason == "held") is hold
    assert sent == [(cluster.pk,)]
