"""Estimated start times from a forward simulation of the policy (DESIGN.md §3.8)."""

from __future__ import annotations

from scheduler.sim.estimate import estimate_starts
from tests.policy.builders import T0, H, host, lump, pending, running, snap, tree


def test_waiting_for_protection_is_estimated_at_the_protection_end():
    victim = running("v", "b", [("h1", 0), ("h1", 1)], m=3 * H, started=T0 - H)
    s = snap([host("h1", 2)], tree("a", "b"), [victim], [pending("w", "a", 2)], usage=[lump("b", 1000)])
    est = estimate_starts(s, grace=30)
    assert est == {"w": T0 + 2 * H + 30}  # protection ends, then the victim's 30 s grace


def test_a_workload_behind_its_own_budget_has_no_estimate():
    mine = running("m", "a", [("h1", 0)], m=H, started=T0 - H)
    s = snap([host("h1", 1)], tree("a"), [mine], [pending("w", "a", 1)])
    assert estimate_starts(s, grid=3600) == {}


def test_free_gpus_give_an_immediate_estimate():
    s = snap([host("h1", 2)], tree("a"), [], [pending("w", "a", 1)])
    assert estimate_starts(s) == {"w": T0}


def test_estimate_actor_stores_estimates_on_pending_workloads(db, org_tree, researcher):
    from scheduler.models import Workload
    from scheduler.services import do_create_cluster, do_register_host, do_submit_workload
    from scheduler.tasks import estimate_starts as actor

    cluster = do_create_cluster("est")
    do_register_host(cluster, "e1", [(0, "GPU-e1-0", "H100", 80000)])
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
