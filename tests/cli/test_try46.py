"""try46: `fairway resubmit --help` gives the workload's values as its flags' defaults; hold, update
and release say the same of a held workload."""

from __future__ import annotations

from fairway_cli import cli as fw
from scheduler.models import ArrayGroup, Workload
from scheduler.services import do_hold_workload, do_release_workload, do_submit_workload
from tests.cli.inprocess import run_cli


def _help(command: str) -> dict[str, str]:
    parser = fw.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command_name")
    return {
        opt: action.help or ""
        for action in sub.choices[command]._actions  # type: ignore[attr-defined]
        for opt in action.option_strings
    }


def test_resubmit_help_gives_the_workloads_values_as_defaults():
    """`fairway resubmit --help` said "GPU count (default 1)", "re-runs after a non-zero exit
    (default 0)": a user resubmitting an 8-GPU run read that it comes back with 1 GPU."""
    again, first = _help("resubmit"), _help("submit")
    for flag in ("--gpus", "--gpu-model", "--cpus", "--memory", "--shm", "--retries"):
        assert "the workload's" in again[flag], flag
        assert "the workload's" not in first[flag], flag
    assert "default 1" not in again["--gpus"] and "default 0" not in again["--retries"]


def test_an_update_of_a_held_workload_says_it_is_still_held(monkeypatch, researcher, submit_kwargs):
    """`fairway update` of a held workload said only "— pending, its place in the queue kept": the
    user who held it to change it read nothing of the release it still waits for."""
    w = do_submit_workload(researcher, **submit_kwargs())
    do_hold_workload(researcher, w)
    out = run_cli(monkeypatch, researcher, "update", str(w.pk), "-g", "2")
    assert out.endswith(f"— pending, held (fairway release {w.pk}), its place in the queue kept\n"), out
    do_release_workload(researcher, w)
    out = run_cli(monkeypatch, researcher, "update", str(w.pk), "-g", "1")
    assert out.endswith("— pending, its place in the queue kept\n"), out


def test_a_group_release_counts_held_members(monkeypatch, researcher, submit_kwargs):
    """`fairway release --group` said "3 pending members released" and a group update "1 pending
    members changed"."""
    do_submit_workload(researcher, **submit_kwargs(), array="0-2", hold=True)
    group = ArrayGroup.objects.get()
    out = run_cli(monkeypatch, researcher, "release", "--group", str(group.pk))
    assert out == f"array group {group.pk}: 3 held members released\n"
    Workload.objects.filter(array_index__gt=0).update(state=Workload.State.CANCELED)
    out = run_cli(monkeypatch, researcher, "update", "--group", str(group.pk), "-g", "2")
    assert out == f"array group {group.pk}: 1 pending member changed\n"
