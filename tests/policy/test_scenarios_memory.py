"""Every scenario of tests/scenarios/ passes on the memory backend; malformed files get clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.scenarios.runner import MemoryBackend, run_scenario
from scheduler.scenarios.spec import ScenarioError, load_scenario, parse_duration

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_passes_on_memory_backend(path: Path) -> None:
    result = run_scenario(str(path), MemoryBackend(), verbose=True)
    assert result.ok, "\n".join(result.lines)


def test_the_shared_scenarios_are_all_here() -> None:
    assert len(SCENARIOS) >= 8


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("hosts: [{name: h1}]\nsteps: [{advance: 5x}]", "steps[0].advance", "not a duration"),
        ("steps: []", "hosts", "is required"),
        ("hosts: [{name: h1, gpus: -1}]", "hosts[0].gpus", "must be >= 1"),
        ("hosts: [{name: h1}]\npending: [{id: a, budget: A, gpus: 1}]", "pending[0].min_runtime", "is required"),
        ("hosts: [{name: h1}]\nsteps: [{tick: {}, expect: {runing: [a]}}]", "steps[0].expect.runing", "unknown key"),
        ("hosts: [{name: h1}]\nsteps: [{explode: {}}]", "steps[0].explode", "unknown step"),
        ("hosts: [{name: h1}]\nsteps: [{host: {name: h1, state: melted}}]", "steps[0].host.state", "is not one of"),
        ("hosts: [{name: h1}, {name: h1}]", "hosts", "defined twice"),
        ("hosts: [{name: h1]", "line", "not valid YAML"),
        ("- just\n- a list", "(top)", "expected a mapping"),
    ],
)
def test_malformed_scenario_names_file_key_and_problem(tmp_path: Path, text: str, key: str, problem: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    assert str(f) in str(err.value) and key in str(err.value) and problem in str(err.value)


def test_unknown_budget_in_setup_is_a_scenario_error(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("hosts: [{name: h1}]\nbudgets: [{path: A}]\npending: [{id: a, budget: Z, gpus: 1, min_runtime: 1h}]")
    with pytest.raises(ScenarioError, match="unknown budget 'Z'"):
        run_scenario(str(f), MemoryBackend())


@pytest.mark.parametrize(
    ("text", "seconds"), [("90s", 90), ("2h1m", 7260), ("6d12h", 561600), ("1w", 604800), ("0", 0), (0, 0)]
)
def test_durations(text: str | int, seconds: int) -> None:
    assert parse_duration(text) == seconds


def test_command_exits_non_zero_on_a_failed_expectation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "fails.yaml"
    f.write_text(
        "hosts: [{name: h1, gpus: 1}]\nbudgets: [{path: A}]\n"
        "pending: [{id: a, budget: A, gpus: 1, min_runtime: 1h}]\n"
        "steps: [{tick: {}, expect: {started: [b]}}]"
    )
    with pytest.raises(CommandError, match="1 of 1 scenario files failed"):
        call_command("scenario", str(f))
    out = capsys.readouterr().out
    assert "FAIL" in out and "started" in out and "expected ['b']" in out


def test_command_reports_a_malformed_file_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text("hosts: 3")
    with pytest.raises(CommandError):
        call_command("scenario", str(f))
    err = capsys.readouterr().err
    assert "broken.yaml: hosts: expected a list" in err and "Traceback" not in err
