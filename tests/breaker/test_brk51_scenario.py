"""brk51: a scenario file's ``gpu`` step naming an index its host does not have was taken. The
memory backend added a GPU to the host (every index of a policy host is present:
``scheduler.policy.types``) and, with a fatal XID, drained the host; the database backend ignored
it (a heartbeat's unknown index). The same file played two ways; now both refuse it, naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.scenarios.db_backend import DbBackend
from scheduler.scenarios.runner import Backend, MemoryBackend, run_scenario
from scheduler.scenarios.spec import ScenarioError

GPU_NINE_OF_FOUR = """
name: a GPU index the host does not have
hosts: [{name: h1, gpus: 4}]
budgets: [{path: A}]
steps:
  - gpu: {host: h1, index: 9, health: unhealthy, xid: 79}
  - tick: {}
    expect: {host_states: {h1: active}}
"""


def _refused(tmp_path: Path, backend: Backend) -> str:
    path = tmp_path / "gpu.yaml"
    path.write_text(GPU_NINE_OF_FOUR)
    with pytest.raises(ScenarioError) as refused:
        run_scenario(str(path), backend)
    return str(refused.value)


def test_a_gpu_the_host_lacks_is_refused_in_memory(tmp_path: Path) -> None:
    backend = MemoryBackend()
    words = _refused(tmp_path, backend)
    assert "steps[0]" in words and "host h1 has no GPU 9 (its GPUs are 0-3)" in words, words
    assert backend.host_states() == {"h1": "active"}


@pytest.mark.django_db(transaction=True)
def test_a_gpu_the_host_lacks_is_refused_on_the_database(tmp_path: Path) -> None:
    backend = DbBackend(scratch_db=False)
    try:
        words = _refused(tmp_path, backend)
    finally:
        backend.close()
    assert "steps[0]" in words and "host h1 has no GPU 9 (its GPUs are 0-3)" in words, words


@pytest.mark.parametrize(("step", "arg"), [("tick", "5"), ("tick", "{at: 10m}"), ("restart", "[all]"), ("tick", "now")])
def test_a_tick_or_restart_given_an_argument_is_refused(tmp_path: Path, step: str, arg: str) -> None:
    """``tick: {at: 10m}`` ran a tick now, its argument dropped without a word (FORMAT.md: ``{}``)."""
    path = tmp_path / "tick.yaml"
    path.write_text(f"name: t\nhosts: [{{name: h1, gpus: 4}}]\nbudgets: [{{path: A}}]\nsteps:\n  - {step}: {arg}\n")
    with pytest.raises(ScenarioError, match=rf"steps\[0\]\.{step}: takes no argument \(write {step}: {{}}\)"):
        run_scenario(str(path), MemoryBackend())


@pytest.mark.parametrize("arg", ["{}", "", "null"])
def test_a_tick_without_an_argument_runs(tmp_path: Path, arg: str) -> None:
    path = tmp_path / "tick.yaml"
    path.write_text(f"name: t\nhosts: [{{name: h1, gpus: 4}}]\nbudgets: [{{path: A}}]\nsteps:\n  - tick: {arg}\n")
    assert run_scenario(str(path), MemoryBackend()).ok


@pytest.mark.parametrize("value", ["[f1, f2]", "{a: 1}", "null", ""])
def test_a_host_label_that_is_no_text_is_refused(tmp_path: Path, value: str) -> None:
    """A list, a mapping or nothing was made text: ``fabric: [f1, f2]`` the label "['f1', 'f2']",
    ``rack:`` with nothing the label "None"."""
    path = tmp_path / "labels.yaml"
    path.write_text(f"name: t\nhosts: [{{name: h1, gpus: 4, labels: {{fabric: {value}}}}}]\nbudgets: [{{path: A}}]\n")
    with pytest.raises(ScenarioError, match=r"hosts\[0\]\.labels\.fabric: .* is not a text or a number"):
        run_scenario(str(path), MemoryBackend())


def test_a_host_label_written_as_a_number_is_its_text(tmp_path: Path) -> None:
    path = tmp_path / "labels.yaml"
    path.write_text("name: t\nhosts: [{name: h1, gpus: 4, labels: {rack: 1, fabric: f1}}]\nbudgets: [{path: A}]\n")
    assert run_scenario(str(path), MemoryBackend()).ok


def test_a_scenario_file_past_the_bound_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``manage.py scenario /dev/zero`` (or a large file given by mistake) read until memory ran out."""
    from fairway_common import strict_yaml

    monkeypatch.setattr(strict_yaml, "MAX_FILE_CHARS", 1000)
    path = tmp_path / "big.yaml"
    path.write_text("name: big\n# " + "x" * 2000 + "\n")
    with pytest.raises(ScenarioError, match="longer than 1,000 characters"):
        run_scenario(str(path), MemoryBackend())
    with pytest.raises(ScenarioError, match="longer than 1,000 characters"):
        run_scenario("/dev/zero", MemoryBackend())


def test_a_budget_file_past_the_bound_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fairway_common import strict_yaml
    from scheduler.sim.budgets import BudgetFileError, load_plan

    monkeypatch.setattr(strict_yaml, "MAX_FILE_CHARS", 1000)
    with pytest.raises(BudgetFileError, match="longer than 1,000 characters"):
        load_plan("/dev/zero", {})
