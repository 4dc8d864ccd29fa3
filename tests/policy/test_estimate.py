"""Estimated start times from a forward simulation of the policy (DESIGN.md §3.8)."""

from __future__ import annotations

from dataclasses import replace

from scheduler.policy import UsageRecord, Workload
from scheduler.sim.estimate import cap_by_reservations, estimate_starts
from tests.conftest import connected
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree
from tests.sim.estimate_oracle import reference_estimates


def test_waiting_for_protection_is_estimated_at_the_victims_release():
    victim = running("v", "b", [("h1", 0), ("h1", 1)], m=3 * H, started=T0 - H)
    s = snap([host("h1", 2)], tree("a", "b"), [victim], [pending("w", "a", 2)], usage=[lump("b", 1000)])
    est = estimate_starts(s, grace=30)
    # The simulation starts it when the victim's protection and 30 s grace have ended; its
    # reservation (at the protection end) counts its room from that release (DESIGN.md §3.5).
    assert est == {"w": T0 + 2 * H + 30}


def test_a_workload_behind_its_own_budget_has_no_estimate():
    mine = running("m", "a", [("h1", 0)], m=H, started=T0 - H)
    s = snap([host("h1", 1)], tree("a"), [mine], [pending("w", "a", 1)])
    assert estimate_starts(s) == {}


def test_free_gpus_give_an_immediate_estimate():
    s = snap([host("h1", 2)], tree("a"), [], [pending("w", "a", 1)])
    assert estimate_starts(s) == {"w": T0}


def test_usage_sliding_past_a_rule2_threshold_is_an_exact_event():
    # a's unprotected attempt grows a's load 1 GPU-s per second; b (pending, M = 1 h) may take it
    # once (load_b + 3600) < load_a: 10000 + 3600 < 3600 + (t - T0), i.e. from T0 + 10001 on.
    victim = running("v", "a", [("h1", 0)], m=H // 2, started=T0 - H)
    s = snap(
        [host("h1", 1)],
        tree("a", "b"),
        [victim],
        [pending("w", "b", 1)],
        usage=[UsageRecord("b", T0 - 99, T0 - 90, None, 10000)],
    )
    assert estimate_starts(s, grace=30) == {"w": T0 + 10001 + 30}


def test_usage_leaving_the_window_is_an_exact_event():
    # b's lump of 20000 GPU-s leaves the window (7 d) at T0 + 100: from then on b's load is 0
    # and b may take a's unprotected attempt (load_a = 3600 + (t - T0) > 3600).
    victim = running("v", "a", [("h1", 0)], m=H // 2, started=T0 - H)
    w = 7 * 86400
    lumped = UsageRecord("b", T0 - w + 100, T0 - w + 100, None, 20000)
    s = snap([host("h1", 1)], tree("a", "b"), [victim], [pending("w", "b", 1)], usage=[lumped])
    assert estimate_starts(s, grace=0) == {"w": T0 + 100}


def test_estimates_do_not_move_when_time_passes_without_events():
    victim = running("v", "a", [("h1", 0)], m=3 * H, started=T0 - H)
    s = snap([host("h1", 1)], tree("a", "b"), [victim], [pending("w", "b", 1)], usage=[lump("a", 100)])
    first = estimate_starts(s, grace=30)
    later = estimate_starts(replace(s, now=T0 + 600), grace=30)
    assert first == later == {"w": T0 + 2 * H + 30}  # the victim's protection end, then its grace


def test_a_reservation_caps_the_estimate_from_its_victims_release():
    assert cap_by_reservations({"w": T0 + 900, "x": T0 + 50}, {"w": T0 + 600, "x": T0 + 60, "y": T0}) == {
        "w": T0 + 600,
        "x": T0 + 50,
        "y": T0,
    }
    # Room made by a stop counts from the release, a grace after the reservation's start (§3.5).
    assert cap_by_reservations({"w": T0 + 900, "x": T0 + 50}, {"w": T0 + 600, "x": T0 + 60}, 30) == {
        "w": T0 + 630,
        "x": T0 + 50,
    }


def test_wall_time_limits_end_running_work_in_the_forward_simulation():
    # a's own attempt holds the only GPU and is protected (rule 2 never lets a take its own
    # work): without a wall-time limit nothing ends and w has no estimate; with a limit of 2 h
    # (started 1 h ago) the timeout stops it at T0 + H, released a grace later, and w starts then.
    holder = running("v", "a", [("h1", 0)], m=3 * H, started=T0 - H)
    s = snap([host("h1", 1)], tree("a"), [holder], [pending("w", "a", 1, m=H)])
    assert estimate_starts(s, grace=30) == {}
    assert estimate_starts(s, grace=30, limits={"v": 2 * H}) == {"w": T0 + H + 30}
    # w's own limit ends it in turn: x (behind it) starts a limit and a grace later.
    s2 = replace(s, pending=[pending("w", "a", 1, m=H), pending("x", "a", 1, m=H, seq=1)])
    assert estimate_starts(s2, grace=30, limits={"v": 2 * H, "w": H}) == {"w": T0 + H + 30, "x": T0 + 2 * H + 60}


def test_a_capped_array_member_starts_when_a_siblings_wall_time_limit_frees_a_slot():
    # Group 7 runs at most one member (%1): m0 holds it, m1 and m2 wait on the cap (free GPUs
    # aside). m0's limit (2 h, started 1 h ago) stops it at T0 + H, released a grace later: the
    # slot frees and m1 starts then; m1's own limit frees it for m2 a limit and a grace later.
    holder = running("m0", "a", [("h1", 0)], m=H, started=T0 - H)
    members = [replace(pending(f"m{i}", "a", 1, m=H, seq=i), group="7") for i in (1, 2)]
    s = snap([host("h1", 4)], tree("a"), [holder], members, group_limits={"7": (1, 1)})
    known = {"m0": Workload("m0", "a", 1, "H100", H, T0 - 2 * H, 0, group="7")}
    assert estimate_starts(s, grace=30, running=known) == {}  # nothing ends: no slot frees
    assert estimate_starts(s, grace=30, running=known, limits={"m0": 2 * H}) == {"m1": T0 + H + 30}
    both = {"m0": 2 * H, "m1": H}
    assert estimate_starts(s, grace=30, running=known, limits=both) == {"m1": T0 + H + 30, "m2": T0 + 2 * H + 60}
    assert reference_estimates(s, grace=30, horizon=4 * H, running=known, limits=both) == {
        "m1": T0 + H + 30,
        "m2": T0 + 2 * H + 60,
    }
    # A holder whose group is unknown (its workload not given) frees no slot it is not known to hold.
    assert estimate_starts(s, grace=30, limits=both) == {}
    # A member waiting on its after list has none either: that dependency does not end at a limit.
    waits = replace(s, pending=[replace(members[0], waiting=True), members[1]])
    assert estimate_starts(waits, grace=30, running=known, limits=both) == {"m2": T0 + H + 30}


def test_only_stops_once_the_named_workloads_started():
    s = snap([host("h1", 2)], tree("a"), [], [pending("w", "a", 1), pending("x", "a", 1, seq=1)])
    assert estimate_starts(s, only=["x"]) == {"x": T0}


def test_estimate_actor_stores_estimates_on_pending_workloads(db, org_tree, researcher):
    from scheduler.models import Workload
    from scheduler.services import do_create_cluster, do_register_host, do_submit_workload
    from scheduler.tasks import estimate_starts as actor

    cluster = do_create_cluster("est")
    connected(do_register_host(cluster, "e1", [(0, "GPU-e1-0", "H100", 80000)])[0])
    w = do_submit_workload(
        researcher,
        name="x",
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        gpu_model="H100",
        gpu_count=1,
        image="",
        command=["true"],
        env={},
        min_runtime_s=3600,
    )
    actor.fn(cluster.pk)
    w.refresh_from_db()
    assert w.estimated_start is not None
    assert Workload.objects.get(pk=w.pk).state == "pending"


def test_estimates_are_not_requested_again_while_one_is_queued(db, org_tree, researcher, monkeypatch):
    from scheduler import tasks
    from scheduler.services import do_create_cluster

    cluster = do_create_cluster("est2")
    sent: list[tuple] = []
    monkeypatch.setattr(tasks.estimate_starts, "send_with_options", lambda **kw: sent.append(kw["args"]))
    tasks.reset_debounce([cluster.pk])
    assert tasks.request_estimates(cluster.pk) is True
    assert tasks.request_estimates(cluster.pk) is False  # the first is still queued
    assert tasks.request_estimates(cluster.pk) is False
    assert len(sent) == 1
    # The run clears its marker when it ends and, as requests came meanwhile, asks once more
    # (work that arrived during a run is estimated by the next one): one more run, not two.
    tasks.estimate_starts.fn(cluster.pk)
    assert len(sent) == 2
    tasks.estimate_starts.fn(cluster.pk)  # nothing asked during this one
    assert len(sent) == 2
    assert tasks.request_estimates(cluster.pk) is True
    assert sent == [(cluster.pk,)] * 3
    tasks.reset_debounce([cluster.pk])


def test_preempted_work_is_requeued_with_its_submission_time():
    # b's unprotected 1-GPU attempt is taken by a's w at once; b's r (the victim, submitted long
    # ago) then waits behind nothing of its own and returns ahead of b's later x when a's
    # protection ends... unless it is requeued, x would take its place.
    victim = running("v", "b", [("h1", 0)], m=H // 2, started=T0 - H)
    s = snap(
        [host("h1", 1)],
        tree("a", "b"),
        [victim],
        [pending("w", "a", 1, m=H), pending("x", "b", 1, m=H, seq=2, submitted=T0)],
        usage=[lump("b", 100)],
    )
    requeued = pending("v", "b", 1, m=H, seq=1, submitted=T0 - 2 * H)
    with_requeue = estimate_starts(s, grace=0, running={"v": requeued})
    without = estimate_starts(s, grace=0)
    assert with_requeue["w"] == without["w"] == T0
    # Without the requeue x gets the GPU when w's protection ends and b may take a's work back;
    # with it, v (submitted earlier) goes first and x later, or not within the window.
    assert with_requeue.get("x", float("inf")) > without["x"]


def test_a_run_cut_short_keeps_the_estimates_it_did_not_reach(db, org_tree, researcher, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from scheduler import estimates
    from scheduler.models import Workload
    from scheduler.services import do_create_cluster, do_register_host, do_submit_workload
    from scheduler.tick import run_tick

    cluster = do_create_cluster("est3")
    connected(do_register_host(cluster, "e3", [(0, "GPU-e3-0", "H100", 80000)])[0])
    kw = {"budget": org_tree["nlp/olmo"], "cluster": cluster, "gpu_model": "H100", "gpu_count": 1, "image": ""}
    do_submit_workload(researcher, name="holder", command=["true"], env={}, min_runtime_s=3600, **kw)
    run_tick(cluster.pk)  # the holder takes the only GPU; the next two wait behind their own budget
    later = do_submit_workload(researcher, name="later", command=["true"], env={}, min_runtime_s=3600, **kw)
    stale = do_submit_workload(researcher, name="stale", command=["true"], env={}, min_runtime_s=3600, **kw)
    now = timezone.now()
    Workload.objects.filter(pk=later.pk).update(estimated_start=now + timedelta(days=3))
    Workload.objects.filter(pk=stale.pk).update(estimated_start=now - timedelta(hours=1))
    monkeypatch.setattr(estimates, "ESTIMATE_BUDGET_S", 0.0)  # the run stops after its first pass

    estimates.store_estimates(cluster.pk, now)

    later.refresh_from_db()
    stale.refresh_from_db()
    assert later.estimated_start is not None  # beyond what the run reached: not contradicted
    assert stale.estimated_start is None  # before it: contradicted
