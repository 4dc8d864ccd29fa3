"""try37: ``fairway hosts NAME`` shows one host (it was argparse's "invalid choice")."""

from __future__ import annotations

from scheduler.services import do_set_host_state
from tests.cli.inprocess import run_cli


def test_hosts_name_shows_one_host(monkeypatch, researcher, admin, hosts):
    """An operator watching a drain typed ``fairway hosts a100-1`` and got "argument action:
    invalid choice: 'a100-1' (choose from 'cordon', …)"; it shows that host: its state and why,
    hardware, labels and each GPU."""
    do_set_host_state(admin, hosts["a100-1"], "draining", "bios update")
    shown = run_cli(monkeypatch, researcher, "hosts", "a100-1")
    lines = shown.splitlines()
    assert lines[0] == "a100-1"
    assert "  state:     draining" in lines
    assert any(line.startswith("  why:") and line.endswith(": bios update") for line in lines)
    assert any(line.startswith("  hardware:  8×A100") for line in lines)
    assert sum(1 for line in lines if " A100 " in line and "healthy" in line) == 8  # one row per GPU
    assert "a100-2" not in shown

    missing = run_cli(monkeypatch, researcher, "hosts", "no-such-host", expect=1)
    assert "No host" in missing
    usage = run_cli(monkeypatch, researcher, "hosts", "a100-1", "a100-2", expect=2)
    assert "not an action" in usage
    # the list and the actions are unchanged
    assert "a100-2" in run_cli(monkeypatch, researcher, "hosts")
    assert "drain NAME" in run_cli(monkeypatch, admin, "hosts", "drain", expect=2)


def test_an_array_member_held_by_its_limit_says_so_in_the_lists(
    monkeypatch, researcher, researcher_client, submission, cluster
):
    """``fairway ls`` and the web lists said "waits for other workloads" for a member held by its
    group's %N, while its page says "Its array group already runs 1 members, its limit (%1)"; an
    ``after`` wait keeps those words."""
    from django.test import Client

    from scheduler.tick import run_tick

    body = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1, array="0-2%1"), format="json").json()
    first = body["workloads"][0]["id"] if "workloads" in body else body["id"]
    waiting = researcher_client.post("/api/v1/workloads/", submission(after=[str(first)]), format="json").json()["id"]
    run_tick(cluster.pk)
    rows = {r["id"]: r for r in researcher_client.get("/api/v1/workloads/").json()["results"]}
    held = [r for r in rows.values() if r["state"] == "pending" and r["group"] is not None]
    assert len(held) == 2 and all(r["pending_group_limit"] == 1 for r in held)
    assert rows[waiting]["pending_group_limit"] is None
    lines = {line.split()[0]: line for line in run_cli(monkeypatch, researcher, "ls").splitlines()[1:]}
    assert all("array at its limit (%1)" in lines[str(r["id"])] for r in held)
    assert "waits for other workloads" in lines[str(waiting)]
    browser = Client()
    browser.force_login(researcher)
    assert browser.get("/workloads/").content.decode().count("array at its limit (%1)") == 2
