"""How attempts run on a host (issue 14): the agent's ``hello.isolation`` is stored on the host and
shown by the hosts API, the clusters page and ``fairway hosts`` (WARN); the cluster's
``allow_root_workloads`` travels in every ``start`` (docs/isolation.md)."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from agent import protocol
from fairway_cli.cli import host_isolation
from scheduler import gateway
from scheduler.models import Attempt, AttemptGPU, Cluster, Host, Workload
from tests.test_gateway_batch import _communicator, _receive, _register, _run

NOT_ROOT = (
    "the agent does not run as root: attempts run as its own user (svc), not as their owners, and can read "
    "each other's environment and the agent's token"
)


def _hello(host: str, isolation: dict | None) -> str:
    payload = {
        "v": 1,
        "type": "hello",
        "id": 1,
        "host": host,
        "agent_version": "test",
        "gpus": [
            {"index": g, "uuid": f"GPU-{host}-{g}", "model": "H100", "memory_mb": 80000, "health": "healthy"}
            for g in range(2)
        ],
        "attempts": [],
    }
    if isolation is not None:  # an older agent sends no such field
        payload["isolation"] = isolation
    return json.dumps(payload)


def _connect_and_hello(token: str, frame: str) -> None:
    async def run() -> None:
        comm = _communicator(token)
        assert (await comm.connect())[0]
        await comm.send_to(text_data=frame)
        assert isinstance(await _receive(comm), protocol.Welcome)
        await comm.disconnect()

    _run(run())


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_the_hello_stores_the_isolation_state_and_an_older_agent_clears_it():
    cluster = Cluster.objects.create(name="iso")
    ((host, token),) = _register(cluster, 1, prefix="iso")
    state = {"mode": "owner", "identity": "agent", "cgroup": "none", "warnings": [NOT_ROOT]}

    _connect_and_hello(token, _hello(host.name, state))
    assert Host.objects.get(pk=host.pk).isolation == state

    _connect_and_hello(token, _hello(host.name, None))
    assert Host.objects.get(pk=host.pk).isolation is None  # unknown: not the previous agent's state


@pytest.mark.django_db
def test_the_api_the_clusters_page_and_the_cli_show_the_warning(researcher_client, admin_client, hosts):
    warned = hosts["a100-1"]
    Host.objects.filter(pk=warned.pk).update(
        isolation={"mode": "owner", "identity": "agent", "cgroup": "v2", "warnings": [NOT_ROOT]}
    )
    Host.objects.filter(pk=hosts["a100-2"].pk).update(
        isolation={"mode": "owner", "identity": "owner", "cgroup": "v2", "warnings": []}
    )
    rows = {h["name"]: h for h in researcher_client.get("/api/v1/hosts/").json()}
    assert rows["a100-1"]["isolation"]["warnings"] == [NOT_ROOT]
    assert rows["h100-1"]["isolation"] is None

    page = admin_client.get(f"/clusters/{warned.cluster.name}/").content.decode()
    row = page[page.index('id="host-a100-1"') : page.index('id="host-a100-2"')]
    assert "isolation warning" in row and "does not run as root" in row
    other = page[page.index('id="host-a100-2"') :]
    assert "isolation warning" not in other

    assert [host_isolation(rows[n]) for n in ("a100-1", "a100-2", "h100-1")] == ["WARN agent", "owner", "-"]


def test_fairway_hosts_prints_the_warnings(logged_in_cli_hosts):
    out = logged_in_cli_hosts
    lines = out.splitlines()
    assert "ISOLATION" in lines[0].split()
    assert any(line.split()[0] == "a100-1" and "WARN" in line.split() for line in lines)
    assert f"WARN a100-1: {NOT_ROOT}" in lines


@pytest.fixture
def logged_in_cli_hosts(live_server, tmp_path, monkeypatch, researcher, cluster):
    import io
    import sys

    from fairway_cli.cli import main
    from tests.conftest import PASSWORD

    Host.objects.filter(name="a100-1").update(
        isolation={"mode": "owner", "identity": "agent", "cgroup": "v2", "warnings": [NOT_ROOT]}
    )
    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("FAIRWAY_URL", live_server.url)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(PASSWORD + "\n"))
    assert main(["login", "-u", "researcher", "--password-stdin"], out=io.StringIO(), err=io.StringIO()) == 0
    out = io.StringIO()
    assert main(["hosts"], out=out, err=io.StringIO()) == 0
    return out.getvalue()


def _start_on(cluster: Cluster) -> protocol.Start:
    from accounts.models import User
    from budgets.models import Budget
    from scheduler.services import do_register_host

    host, _token = do_register_host(cluster, f"{cluster.name}-1", [(0, f"GPU-{cluster.name}-0", "H100", 80000)])
    user, _ = User.objects.get_or_create(username="rooted")
    budget, _ = Budget.objects.get_or_create(name="root-budget")
    workload = Workload.objects.create(
        name="w", owner=user, budget=budget, cluster=cluster, gpu_model="H100", gpu_count=1,
        command=["true"], min_runtime_s=60, submitted_at=timezone.now(), seq=Workload.objects.count() + 1,
        state=Workload.State.STARTING,
    )  # fmt: skip
    attempt = Attempt.objects.create(workload=workload, number=1, host=host, allocated=True, placed_at=timezone.now())
    AttemptGPU.objects.create(attempt=attempt, gpu=host.gpus.get(index=0))
    (start,) = gateway.desired_commands(host.pk, set())
    assert isinstance(start, protocol.Start)
    return start


@pytest.mark.django_db
def test_the_start_carries_the_clusters_allow_root_workloads():
    assert _start_on(Cluster.objects.create(name="strict")).allow_root is False  # the default
    assert _start_on(Cluster.objects.create(name="lax", allow_root_workloads=True)).allow_root is True


@pytest.mark.django_db
def test_the_cluster_admin_edits_allow_root_workloads(admin_client):
    cluster = Cluster.objects.create(name="edit")
    page = admin_client.get(f"/admin/scheduler/cluster/{cluster.pk}/change/").content.decode()
    assert 'name="allow_root_workloads"' in page
