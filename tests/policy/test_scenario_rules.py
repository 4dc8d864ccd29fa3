"""FORMAT.md rules both scenario backends must follow, each played on memory and on the database
with an expectation the rule decides: a stop's reason outlives a host removal (DESIGN.md §4), the
last victim tie goes by scenario id whatever the primary keys, and a preempted workload's remaining
duration is counted to the release of its GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.scenarios.db_backend import DbBackend
from scheduler.scenarios.runner import Backend, MemoryBackend, run_scenario

CANCELED_IN_GRACE_THEN_HOST_REMOVED = """
name: a workload canceled inside its grace period stays canceled when its host is removed
settings: {grace: 30s}
hosts: [{name: h, count: 2, gpus: 4}]
budgets: [{path: A}]
running:
  - {id: A1, budget: A, gpus: 4, host: h1, min_runtime: 1h, elapsed: 2h}
steps:
  - cancel: [A1]
  - advance: 10s
    expect: {preempting: [A1]}
  - remove_host: h1
  - advance: 1m
    expect: {not_started: [A1], running_exactly: []}
"""

LAST_TIE_BY_SCENARIO_ID = """
name: two victims equal in everything but their id; the smaller id (plain string order) goes
hosts: [{name: h1, gpus: 2}]
budgets: [{path: A}, {path: B}]
running:
  # listed b first: the database gives b the smaller primary key
  - {id: b, budget: A, gpus: 1, host: h1, gpu_indices: [0], min_runtime: 0, elapsed: 1h}
  - {id: a, budget: A, gpus: 1, host: h1, gpu_indices: [1], min_runtime: 0, elapsed: 1h}
pending:
  - {id: P, budget: B, gpus: 1, min_runtime: 1h}
steps:
  - tick: {}
    expect: {preempted: [a], not_preempted: [b], started: {P: {host: h1, gpu_indices: [1]}}}
"""

REMAINING_COUNTED_TO_RELEASE = """
name: a preempted workload keeps running (and using up its duration) until its GPUs are released
settings: {grace: 5m, tick_interval: 1h}  # events drive it; few grid ticks keep the db run short
hosts: [{name: h1, gpus: 4}]
budgets: [{path: A}, {path: B}]
usage: [{budget: A, gpu_hours: 300}]
running:
  # 1h of its 3h left at t0; stopped at t0, released at t0+5m: 55m left, not 1h
  - {id: A1, budget: A, gpus: 4, host: h1, min_runtime: 1h, elapsed: 2h, duration: 3h}
pending:
  - {id: B1, budget: B, gpus: 4, min_runtime: 1h, duration: 10m}
steps:
  - tick: {}
    expect: {preempted: [A1], preempting: [A1]}
  - at: 5m
    expect: {started: [B1], pending: [A1]}
  - at: 15m
    expect: {started: [A1], running_exactly: [A1]}
  - at: 69m59s
    expect: {running_exactly: [A1]}
  - at: 70m
    expect: {running_exactly: []}
"""


def _play(text: str, tmp_path: Path, backend: Backend) -> dict[str, str]:
    path = tmp_path / "rule.yaml"
    path.write_text(text)
    result = run_scenario(str(path), backend, verbose=True)
    assert result.ok, "\n".join(result.lines)
    return backend.states()


@pytest.fixture
def db_backend(transactional_db: None):
    backend = DbBackend(scratch_db=False)
    yield backend
    backend.close()


def test_canceled_in_grace_stays_canceled_when_host_removed_in_memory(tmp_path: Path) -> None:
    assert _play(CANCELED_IN_GRACE_THEN_HOST_REMOVED, tmp_path, MemoryBackend())["A1"] == "canceled"


def test_canceled_in_grace_stays_canceled_when_host_removed_on_db(tmp_path: Path, db_backend: DbBackend) -> None:
    assert _play(CANCELED_IN_GRACE_THEN_HOST_REMOVED, tmp_path, db_backend)["A1"] == "canceled"


def test_last_victim_tie_goes_by_scenario_id_in_memory(tmp_path: Path) -> None:
    _play(LAST_TIE_BY_SCENARIO_ID, tmp_path, MemoryBackend())


def test_last_victim_tie_goes_by_scenario_id_on_db_whatever_the_pks(tmp_path: Path, db_backend: DbBackend) -> None:
    _play(LAST_TIE_BY_SCENARIO_ID, tmp_path, db_backend)


def test_remaining_duration_counts_to_the_release_in_memory(tmp_path: Path) -> None:
    assert _play(REMAINING_COUNTED_TO_RELEASE, tmp_path, MemoryBackend())["A1"] == "succeeded"


def test_remaining_duration_counts_to_the_release_on_db(tmp_path: Path, db_backend: DbBackend) -> None:
    assert _play(REMAINING_COUNTED_TO_RELEASE, tmp_path, db_backend)["A1"] == "succeeded"


PARENT_OF_ARCHIVED_WORK = """
name: a budget whose archived sub-budgets still have work takes none of its own (brk63)
hosts: [{name: h1, gpus: 4}]
budgets: [{path: A}, {path: A/x}]
running:
  - {id: X1, budget: A/x, gpus: 4, host: h1, min_runtime: 1h, elapsed: 10m, duration: 1h}
steps:
  - archive_budget: A/x
  - submit: [{id: P1, budget: A, gpus: 1, min_runtime: 1h}]
    expect: {rejected: {P1: not_a_leaf}}
  - at: 50m
    expect: {running_exactly: []}
  - submit: [{id: P2, budget: A, gpus: 1, min_runtime: 1h}]
    expect: {rejected: null}
"""


def test_a_budget_with_archived_work_below_takes_none_of_its_own_in_memory(tmp_path: Path) -> None:
    _play(PARENT_OF_ARCHIVED_WORK, tmp_path, MemoryBackend())


def test_a_budget_with_archived_work_below_takes_none_of_its_own_on_db(tmp_path: Path, db_backend: DbBackend) -> None:
    _play(PARENT_OF_ARCHIVED_WORK, tmp_path, db_backend)


ARCHIVE_THE_ROOT = """
name: the root is never archived (brk63)
hosts: [{name: h1, gpus: 4}]
budgets: [{path: A}]
steps:
  - archive_budget: (root)
"""


def _refused(text: str, tmp_path: Path, backend: Backend) -> str:
    from scheduler.scenarios.spec import ScenarioError

    path = tmp_path / "rule.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as refused:
        run_scenario(str(path), backend)
    return str(refused.value)


def test_archiving_the_root_is_the_scenarios_error_in_memory(tmp_path: Path) -> None:
    assert "is the root" in _refused(ARCHIVE_THE_ROOT, tmp_path, MemoryBackend())


def test_archiving_the_root_is_the_scenarios_error_on_db(tmp_path: Path, db_backend: DbBackend) -> None:
    """It was a BudgetError traceback out of ``manage.py scenario --backend db`` once the root was refused."""
    assert "is the root" in _refused(ARCHIVE_THE_ROOT, tmp_path, db_backend)
