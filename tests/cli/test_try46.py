"""try46: `fairway resubmit --help` gives the workload's values as its flags' defaults."""

from __future__ import annotations

from fairway_cli import cli as fw


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
