"""Our own scenarios (tests/policy/scenarios/, beside the shared ones of tests/scenarios/) pass on
both backends, among them the ``estimated_start`` expectation (tests/scenarios/FORMAT.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.scenarios.runner import MemoryBackend, run_scenario

OWN = sorted((Path(__file__).resolve().parent / "scenarios").glob("*.yaml"))


@pytest.mark.parametrize("path", OWN, ids=[p.stem for p in OWN])
def test_own_scenario_passes_on_memory_backend(path: Path) -> None:
    result = run_scenario(str(path), MemoryBackend(), verbose=True)
    assert result.ok, "\n".join(result.lines)


@pytest.mark.parametrize("path", OWN, ids=[p.stem for p in OWN])
@pytest.mark.django_db(transaction=True)
def test_own_scenario_passes_on_db_backend(path: Path) -> None:
    from scheduler.scenarios.db_backend import DbBackend

    backend = DbBackend(scratch_db=False)
    try:
        result = run_scenario(str(path), backend, verbose=True)
    finally:
        backend.close()
    assert result.ok, "\n".join(result.lines)


def test_a_wrong_estimate_fails_with_its_value(tmp_path: Path) -> None:
    text = (OWN[0]).read_text().replace("H1: none}", "H1: 5m}")
    f = tmp_path / "wrong.yaml"
    f.write_text(text)
    result = run_scenario(str(f), MemoryBackend())
    assert not result.ok
    assert any("estimated_start.H1" in line for line in result.lines)
