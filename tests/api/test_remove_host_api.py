"""Retiring a host through the REST API and ``fairway hosts remove`` (before: the admin's action only).
One rule: ``services.do_remove_host`` (refused while an attempt is open there)."""

from __future__ import annotations

from scheduler import lifecycle
from scheduler.models import Attempt, Host, HostEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def _busy_host(researcher, submit_kwargs, cluster) -> Host:
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, gpu_model="A100"))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=workload)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    return attempt.host


def test_an_admin_removes_an_idle_host_through_the_api(admin_client_api, admin, hosts):
    response = admin_client_api.post("/api/v1/hosts/a100-1/remove/", {"reason": "decommissioned"}, format="json")

    assert response.status_code == 200, response.json()
    body = response.json()
    host = Host.objects.get(name="a100-1")
    assert host.removed_at is not None
    assert (body["name"], body["cluster"]) == ("a100-1", "default")
    assert body["removed_at"] == host.removed_at.isoformat().replace("+00:00", "Z")
    event = HostEvent.objects.get(host=host, kind="removed")
    assert (event.actor, event.message) == (admin, "decommissioned")
    assert "a100-1" not in [h["name"] for h in admin_client_api.get("/api/v1/hosts/").json()]
    # removed: gone from the API's hosts, so a second remove names it as unknown
    again = admin_client_api.post("/api/v1/hosts/a100-1/remove/", {}, format="json")
    assert again.status_code == 404 and "a100-1" in again.json()["detail"]


def test_removing_a_host_with_an_open_attempt_is_a_409_with_the_services_message(
    admin_client_api, researcher, submit_kwargs, cluster, hosts
):
    busy = _busy_host(researcher, submit_kwargs, cluster)

    response = admin_client_api.post(f"/api/v1/hosts/{busy.name}/remove/", {}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "host_busy"
    assert "still holds 1 attempt(s): drain it first" in response.json()["detail"]
    assert Host.objects.get(pk=busy.pk).removed_at is None
    assert not HostEvent.objects.filter(kind="removed").exists()


def test_only_admins_remove_hosts(researcher_client, api_client_for, hosts):
    response = researcher_client.post("/api/v1/hosts/a100-1/remove/", {}, format="json")
    assert response.status_code == 403 and response.json()["code"] == "forbidden"
    assert api_client_for(None).post("/api/v1/hosts/a100-1/remove/", {}, format="json").status_code == 401
    assert Host.objects.get(name="a100-1").removed_at is None


def test_remove_refuses_a_body_other_than_a_reason(admin_client_api, hosts):
    response = admin_client_api.post("/api/v1/hosts/a100-1/remove/", {"reasn": "typo"}, format="json")
    assert response.status_code == 400 and "reasn" in response.json()
    assert Host.objects.get(name="a100-1").removed_at is None


def test_the_schema_lists_the_remove_action(admin_client_api):
    import yaml

    schema = yaml.safe_load(admin_client_api.get("/api/schema/").content)
    post = schema["paths"]["/api/v1/hosts/{name}/remove/"]["post"]
    assert post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/HostRemoved")
    assert post["responses"]["409"]["content"]["application/json"]["schema"]["$ref"].endswith("/Error")
    assert set(schema["components"]["schemas"]["HostRemoved"]["properties"]) == {"name", "cluster", "removed_at"}


def test_fairway_hosts_remove_asks_for_yes_then_removes(monkeypatch, admin, researcher, submit_kwargs, cluster, hosts):
    err = run_cli(monkeypatch, admin, "hosts", "remove", "a100-1", expect=2)
    assert "--yes" in err and "for good" in err
    assert Host.objects.get(name="a100-1").removed_at is None

    out = run_cli(monkeypatch, admin, "hosts", "remove", "a100-1", "--yes", "--reason", "sold")
    assert out.startswith("a100-1: removed from cluster default at "), out
    assert Host.objects.get(name="a100-1").removed_at is not None
    assert HostEvent.objects.get(kind="removed").message == "sold"

    busy = _busy_host(researcher, submit_kwargs, cluster)
    err = run_cli(monkeypatch, admin, "hosts", "remove", busy.name, "--yes", expect=1)
    assert "drain it first" in err, err
    err = run_cli(monkeypatch, researcher, "hosts", "remove", "h100-1", "--yes", expect=1)
    assert "admins" in err, err
    assert Host.objects.filter(removed_at__isnull=False).count() == 1


def test_fairway_hosts_remove_json(monkeypatch, admin, hosts):
    import json

    out = run_cli(monkeypatch, admin, "--json", "hosts", "remove", "h100-1", "--yes")
    assert json.loads(out)["name"] == "h100-1"


def test_the_words_of_remove_say_the_rule_it_keeps(monkeypatch, admin, researcher, submit_kwargs, cluster, hosts):
    """try56: without --yes the CLI said "Drain it first", then removed an idle active host at
    once: the rule is "no open attempt" (as Slurm's `scontrol delete nodename` refuses a node with
    jobs), so the words say that; an idle host of any state is removed (docs/deploy.md §9)."""
    err = run_cli(monkeypatch, admin, "hosts", "remove", "a100-1", expect=2)
    assert "Drain it first" not in err, err
    assert "refused while it still holds an attempt" in err, err
    assert Host.objects.get(name="a100-1").state == Host.State.ACTIVE
    run_cli(monkeypatch, admin, "hosts", "remove", "a100-1", "--yes")
    assert Host.objects.get(name="a100-1").removed_at is not None


def test_removing_a_draining_host_says_when_it_empties_not_drain_it_first(
    admin_client_api, researcher, submit_kwargs, cluster, hosts
):
    """try56: a host already draining was told "drain it first"."""
    from scheduler.services import do_set_host_state

    busy = _busy_host(researcher, submit_kwargs, cluster)
    do_set_host_state(None, busy, Host.State.DRAINING)

    detail = admin_client_api.post(f"/api/v1/hosts/{busy.name}/remove/", {}, format="json").json()["detail"]

    assert "drain it first" not in detail, detail
    assert f"Host {busy.name} is draining and still holds 1 attempt(s)" in detail, detail
    assert "drain-now" in detail, detail


def test_a_removed_host_is_named_as_removed_not_unknown(monkeypatch, admin, admin_client_api, hosts):
    """try56: `fairway hosts gpu3` after its removal said "No host 'gpu3'.", as for a typo, and a
    join under the name is refused as taken: the 404 says when it was removed and that the name stays
    taken (still a 404 `not_found`: the host is gone from the API's hosts)."""
    admin_client_api.post("/api/v1/hosts/a100-1/remove/", {"reason": "sold"}, format="json")

    again = admin_client_api.post("/api/v1/hosts/a100-1/remove/", {"reason": "sold"}, format="json")
    assert again.status_code == 404 and "was removed from cluster default" in again.json()["detail"]
    response = admin_client_api.get("/api/v1/hosts/a100-1/")

    assert response.status_code == 404 and response.json()["code"] == "not_found"
    detail = response.json()["detail"]
    assert detail.startswith("Host 'a100-1' was removed from cluster default at "), detail
    assert "its name stays taken" in detail, detail
    err = run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", expect=1)
    assert "was removed from cluster default" in err, err
    assert admin_client_api.get("/api/v1/hosts/nosuch/").json()["detail"] == "No host 'nosuch'."


def test_the_admins_remove_action_says_the_same_rule():
    """try56: the hosts admin's action read "(decommissioned; drain it first)" as the CLI did."""
    from scheduler.admin import HostAdmin

    words = HostAdmin.remove_hosts.short_description
    assert "drain it first" not in words and "refused while it holds an attempt" in words, words
