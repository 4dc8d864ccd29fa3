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
