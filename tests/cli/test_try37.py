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
