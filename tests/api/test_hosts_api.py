"""Hosts (read by everybody, operated by admins), the metrics summary and the budget tree."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils.html import escape

from scheduler.models import Host, HostEvent, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


def test_everybody_reads_hosts_with_their_gpus(researcher_client, hosts):
    rows = researcher_client.get("/api/v1/hosts/").json()

    assert [h["name"] for h in rows] == ["a100-1", "a100-2", "h100-1"]
    a100 = rows[0]
    assert (a100["cluster"], a100["state"], a100["model"], a100["gpu_count"]) == ("default", "active", "A100", 8)
    assert [g["index"] for g in a100["gpus"]] == list(range(8))
    assert a100["gpus"][0]["workload"] is None
    assert researcher_client.get("/api/v1/hosts/?state=draining").json() == []
    assert researcher_client.get("/api/v1/hosts/h100-1/").json()["gpu_count"] == 4


@pytest.mark.parametrize(
    ("verb", "state", "drain_now", "kind"),
    [
        ("cordon", "cordoned", False, "cordoned"),
        ("drain", "drained", False, "draining"),  # nothing runs there: drained at once by the tick
        ("drain-now", "draining", True, "drain_now"),
    ],
)
def test_admin_operates_a_host_and_it_is_audited(admin_client_api, admin, hosts, verb, state, drain_now, kind):
    response = admin_client_api.post(f"/api/v1/hosts/a100-1/{verb}/", {"reason": "maintenance"}, format="json")

    assert response.status_code == 200, response.json()
    host = Host.objects.get(name="a100-1")
    assert host.drain_now is drain_now
    assert host.state in {state, "draining"}
    event = HostEvent.objects.filter(host=host).latest("id")
    assert (event.kind, event.actor, event.message) == (kind, admin, "maintenance")

    resumed = admin_client_api.post("/api/v1/hosts/a100-1/resume/", {}, format="json")
    assert resumed.status_code == 200
    assert resumed.json()["state"] == "active"


def test_researcher_cannot_operate_a_host(researcher_client, hosts):
    response = researcher_client.post("/api/v1/hosts/a100-1/drain/", {}, format="json")

    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"  # the one code of a 403 (config.api)
    assert Host.objects.get(name="a100-1").state == "active"
    assert not HostEvent.objects.filter(kind="draining").exists()


def test_metrics_count_gpus_by_what_they_do(researcher_client, researcher, submit_kwargs, cluster):
    do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=0))
    run_tick(cluster.pk)

    [row] = researcher_client.get("/api/v1/metrics/").json()

    assert (row["cluster"], row["gpus"], row["allocated"], row["unallocated"]) == ("default", 20, 8, 4)
    assert row["idle"] == 8
    assert row["unavailable"] == 0
    assert row["occupancy"] == 0.6
    assert row["workloads_by_state"] == {"starting": 2}
    assert row["models"] == {"A100": 16, "H100": 4}


def test_budget_tree_shows_usage_entitlement_ratio_and_rank(researcher_client, researcher, submit_kwargs, cluster):
    do_submit_workload(researcher, **submit_kwargs(gpu_count=8, min_runtime_s=3600))
    run_tick(cluster.pk)
    assert Workload.objects.get().state == "starting"

    [tree] = researcher_client.get("/api/v1/budgets/tree/?cluster=default").json()

    assert (tree["cluster"], tree["gpus"], tree["window_s"]) == ("default", 20, 7 * 86400)
    rows = {b["path"]: b for b in tree["budgets"]}
    assert list(rows) == ["org", "nlp", "nlp/olmo", "nlp/tulu", "vision", "vision/sam"]
    week = 20 * 7 * 24
    assert rows["nlp"]["entitlement_gpu_hours"] == pytest.approx(week * 2 / 3, abs=0.01)
    assert rows["nlp/olmo"]["normalized_share"] == pytest.approx(1 / 3, abs=1e-5)
    assert rows["nlp/olmo"]["committed_gpu_hours"] == 8.0
    assert rows["nlp/olmo"]["ratio"] == pytest.approx(8 / (week / 3), abs=1e-3)
    assert (rows["nlp/olmo"]["rank"], rows["nlp/olmo"]["siblings"]) == (2, 2)
    assert rows["nlp/tulu"]["rank"] == 1
    assert rows["vision"]["rank"] == 1
    assert rows["nlp/olmo"]["running_gpus"] == 8
    assert rows["org"]["rank"] is None


def test_host_list_costs_the_same_queries_for_more_hosts(
    researcher_client, researcher, submit_kwargs, cluster, django_assert_max_num_queries
):
    from scheduler.services import do_register_host
    from tests.conftest import gpu_specs

    do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    with django_assert_max_num_queries(8) as few:
        researcher_client.get("/api/v1/hosts/")
    for i in range(6):
        do_register_host(cluster, f"extra-{i}", gpu_specs(f"extra-{i}", "A100", 8))
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert len(researcher_client.get("/api/v1/hosts/").json()) == 9


def test_the_hosts_api_says_why_a_host_is_cordoned(admin_client_api, researcher_client, admin, hosts):
    """tryout: the reason an admin gave for a cordon showed only in the admin's event log; the
    hosts API (and so ``fairway hosts`` and the clusters page) now say who, when and why."""
    # Given an admin cordoning a100-1 for a reason, after an older drain-and-resume
    admin_client_api.post("/api/v1/hosts/a100-1/drain/", {"reason": "old"}, format="json")
    admin_client_api.post("/api/v1/hosts/a100-1/resume/", {}, format="json")
    admin_client_api.post("/api/v1/hosts/a100-1/cordon/", {"reason": "fan replacement"}, format="json")

    # When anybody reads the hosts
    rows = {h["name"]: h for h in researcher_client.get("/api/v1/hosts/").json()}

    # Then the cordoned one carries its reason, the active ones none
    reason = rows["a100-1"]["state_reason"]
    assert (reason["kind"], reason["message"], reason["by"]) == ("cordoned", "fan replacement", "admin")
    assert reason["at"] == HostEvent.objects.get(kind="cordoned").at.isoformat().replace("+00:00", "Z")
    assert rows["a100-2"]["state_reason"] is None
    # A resumed host has no reason left
    admin_client_api.post("/api/v1/hosts/a100-1/resume/", {}, format="json")
    assert researcher_client.get("/api/v1/hosts/a100-1/").json()["state_reason"] is None


def test_resume_of_a_host_holding_an_unapproved_inventory_is_a_409(admin_client_api, hosts):
    Host.objects.filter(name="a100-1").update(
        state=Host.State.CORDONED, pending_inventory={"gpus": [], "cordoned": True}
    )

    response = admin_client_api.post("/api/v1/hosts/a100-1/resume/", {}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "inventory_pending"
    assert "approve its GPU inventory" in response.json()["detail"]
    assert Host.objects.get(name="a100-1").state == Host.State.CORDONED


def test_a_held_gpu_inventory_is_shown_wherever_hosts_are(researcher_client, admin, hosts):
    """try41: an agent that came back with 3 of its 4 GPUs had its inventory held for approval, but
    the hosts API, ``fairway hosts`` and the clusters page showed the 4 registered GPUs and nothing
    else: a drained host offered no Resume and said nothing of why. Every surface now says it."""
    # Given a100-1 drained, whose agent now reports one GPU fewer than registered
    registered = list(Host.objects.get(name="a100-1").gpus.order_by("index"))
    reported = [
        {"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mb": g.memory_mb, "health": "healthy"}
        for g in registered[:-1]
    ]
    Host.objects.filter(name="a100-1").update(
        state=Host.State.DRAINED, pending_inventory={"gpus": reported, "cordoned": False, "cpus": 24}
    )

    # When anybody reads the hosts
    rows = {h["name"]: h for h in researcher_client.get("/api/v1/hosts/").json()}
    one = researcher_client.get("/api/v1/hosts/a100-1/").json()

    # Then the held inventory is there, in numbers and in words, and nowhere else
    held = one["pending_inventory"]
    n = len(registered)
    assert [g["uuid"] for g in held["gpus"]] == [g.uuid for g in registered[:-1]]
    assert held["summary"] == (
        f"the agent reports {n - 1}×A100, {n}×A100 registered: awaiting an admin's approval "
        "(admin → Hosts → Approve the GPU inventory the agent reported); resume is refused until then"
    )
    assert rows["a100-1"]["pending_inventory"] == held
    assert rows["a100-2"]["pending_inventory"] is None
    # and the clusters page says the same words
    browser = Client()
    browser.force_login(admin)
    assert escape(held["summary"]) in browser.get("/clusters/").content.decode()


def test_an_offline_host_says_when_its_attempts_end_lost(researcher_client, admin, researcher, submit_kwargs, hosts):
    """try41: an agent killed during maintenance: ``fairway hosts`` and the clusters page said
    "offline" and "2 attempts", but not that those attempts end ``lost`` (and are requeued) once the
    host has been silent ``HOST_LOST_AFTER_S``: the operator could not tell how long to bring it back."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from scheduler import lifecycle

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(w.cluster_id)
    host = Workload.objects.get(pk=w.pk).attempts.get().gpu_links.first().gpu.host
    heard = timezone.now() - timedelta(seconds=40)
    Host.objects.filter(pk=host.pk).update(
        state=Host.State.OFFLINE, state_before_offline="active", last_heartbeat=heard
    )
    lost_at = heard + timedelta(seconds=settings.FAIRWAY["HOST_LOST_AFTER_S"])
    stamp = lost_at.isoformat().replace("+00:00", "Z")

    one = researcher_client.get(f"/api/v1/hosts/{host.name}/").json()
    assert one["attempts_lost_at"] == stamp
    # the workload's own silent-host time is the same instant (one rule: lifecycle.host_lost_at)
    [silent] = lifecycle.silent_hosts(Workload.objects.get(pk=w.pk).attempts.get())
    assert silent.lost_at == lost_at
    others = [h for h in researcher_client.get("/api/v1/hosts/").json() if h["name"] != host.name]
    assert all(h["attempts_lost_at"] is None for h in others)
    browser = Client()
    browser.force_login(admin)
    page = browser.get("/clusters/").content.decode()
    assert "1 attempt; ends lost at " in page and "unless its agent is back" in page
