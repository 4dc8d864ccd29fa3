"""try41: ``fairway hosts`` and ``fairway hosts NAME`` say that a host's GPU inventory awaits approval."""

from __future__ import annotations

from scheduler.models import Host
from tests.cli.inprocess import run_cli


def test_fairway_hosts_says_a_gpu_inventory_awaits_approval(monkeypatch, researcher, hosts):
    """An agent back with 7 of its 8 GPUs: its inventory was held, the host showed 8 GPUs and no word."""
    reported = [
        {"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mb": g.memory_mb}
        for g in hosts["a100-1"].gpus.order_by("index")[:7]
    ]
    Host.objects.filter(name="a100-1").update(state="drained", pending_inventory={"gpus": reported, "cordoned": False})
    words = "the agent reports 7×A100, 8×A100 registered: awaiting an admin's approval"
    one = run_cli(monkeypatch, researcher, "hosts", "a100-1")
    assert f"inventory: {words}" in " ".join(one.split())
    listing = run_cli(monkeypatch, researcher, "hosts")
    assert f"a100-1: {words}" in listing
    assert "a100-2: the agent reports" not in listing


def test_fairway_hosts_says_when_an_offline_hosts_attempts_end_lost(monkeypatch, researcher, submit_kwargs, hosts):
    """An agent killed in maintenance: the host read "offline" with its attempts, not when they end lost."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Workload
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(w.cluster_id)
    host = Workload.objects.get(pk=w.pk).attempts.get().gpu_links.first().gpu.host
    Host.objects.filter(pk=host.pk).update(
        state="offline", state_before_offline="active", last_heartbeat=timezone.now() - timedelta(seconds=40)
    )
    listing = " ".join(run_cli(monkeypatch, researcher, "hosts").split())
    assert f"{host.name}: offline: its attempt ends lost at " in listing and "unless its agent is back" in listing
    one = " ".join(run_cli(monkeypatch, researcher, "hosts", host.name).split())
    assert "attempts: 1 open; its attempt ends lost at " in one


def test_an_offline_hosts_reason_is_the_state_it_returns_to_everywhere(monkeypatch, admin, hosts):
    """`fairway hosts` listed an offline host with "a100-1: cordoned by admin at …", as if it were
    cordoned now; the action's answer and the clusters page said "when its agent is back"."""
    from scheduler.services import do_set_host_state

    do_set_host_state(admin, hosts["a100-1"], "cordoned", "BIOS update")
    Host.objects.filter(name="a100-1").update(state="offline", state_before_offline="cordoned")
    listing = run_cli(monkeypatch, admin, "hosts")
    assert "a100-1: cordoned by admin at " in listing and "BIOS update (from when its agent is back)" in listing
    one = " ".join(run_cli(monkeypatch, admin, "hosts", "a100-1").split())
    assert "BIOS update (from when its agent is back)" in one


def test_resuming_an_offline_host_says_it_returns_active(admin, hosts, monkeypatch):
    """try56: `fairway hosts resume gpu1` of a cordoned host whose agent was away answered only
    "gpu1: offline" (a cordon or drain there names the state it returns to)."""
    Host.objects.filter(name="a100-1").update(state=Host.State.OFFLINE, state_before_offline=Host.State.CORDONED)
    out = run_cli(monkeypatch, admin, "hosts", "resume", "a100-1")
    assert out == "a100-1: offline; active from when its agent is back\n", out
    assert Host.objects.get(name="a100-1").state_before_offline == Host.State.ACTIVE
