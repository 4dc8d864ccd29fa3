"""Every scenario of tests/scenarios/ passes on the database backend — real models, services,
tick and lifecycle with a simulated clock and simulated agents — and decides exactly what the
memory backend decides (tests/scenarios/FORMAT.md: "Both backends must give the same results").

``transactional_db``: every service call and tick commits for real, so ``restart`` rebuilds
from committed rows and the after-commit hooks run. They only enqueue: tick requests go to the
broker (the stub broker when ``REDIS_URL`` is unset; nothing consumes them without a worker)
and pushes go to agent groups nobody listens to, so nothing here waits on them.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import call_command
from django.db import connection

from budgets.models import Budget
from scheduler.models import Cluster
from scheduler.scenarios.db_backend import DbBackend
from scheduler.scenarios.runner import MemoryBackend, run_scenario

pytestmark = pytest.mark.first  # a long file: make test hands it out first (tests/conftest.py)

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml"))


def _canonical(lines: list[str], *, details: bool = True, restarts: bool = True) -> list[str]:
    """Lines with their trailing ``{...}`` printed with sorted keys (PostgreSQL's jsonb does not
    keep the key order of a stored reason's detail). ``details=False`` drops the details (they
    name budgets by key: database pks on one side, paths on the other; workloads are named by
    scenario id on both, the db backend's snapshots use them as the policy's workload ids);
    ``restarts=False`` keeps the decisions only (after a restart the memory backend has no
    reasons and reservations until its next tick, the database keeps its reasons)."""
    out = []
    for line in lines:
        if not restarts and (line.startswith(("  pending ", "  reserved ")) or "] restart:" in line):
            continue
        head, brace, rest = line.partition("{")
        if brace and line.endswith("}"):
            line = (
                head.rstrip()
                if not details and line.startswith("  pending ")
                else (f"{head}{dict(sorted(ast.literal_eval(brace + rest).items()))!r}")
            )
        out.append(line)
    return out


def _play_db(path: Path) -> Any:
    backend = DbBackend(scratch_db=False)
    try:
        return run_scenario(str(path), backend, verbose=True)
    finally:
        backend.close()


def _is_pk(value: object) -> bool:
    return (isinstance(value, str) and value.isdigit()) or (
        isinstance(value, list) and bool(value) and all(_is_pk(v) for v in value)
    )


def _same_up_to_ids(db: list[str], memory: list[str]) -> tuple[list[str], list[str]]:
    """Reason details name budgets by key (``other_budget_key``): database pks on one side, paths
    on the other. Where a detail value differs only that way, show ``<id>`` on both. (Workloads
    are named by scenario id on both sides.)"""
    db, memory = list(db), list(memory)
    for i, (a, b) in enumerate(zip(db, memory, strict=False)):
        head_a, brace, rest_a = a.partition("{")
        head_b, _, rest_b = b.partition("{")
        if not (brace and a.startswith("  pending ") and head_a == head_b and b.endswith("}")):
            continue
        da, mb = ast.literal_eval("{" + rest_a), ast.literal_eval("{" + rest_b)
        for key in set(da) & set(mb):
            if da[key] != mb[key] and _is_pk(da[key]) and not _is_pk(mb[key]):
                da[key] = mb[key] = "<id>"
        db[i], memory[i] = f"{head_a}{dict(sorted(da.items()))!r}", f"{head_b}{dict(sorted(mb.items()))!r}"
    return db, memory


def _assert_same(db: list[str], memory: list[str]) -> None:
    db, memory = _same_up_to_ids(db, memory)
    assert db == memory, "\n".join(
        f"{'  ' if a == b else '≠ '}db: {a}\n  mem: {b}" for a, b in zip(db, memory, strict=False)
    )


TICKING = ("tick", "advance", "at")
"""The steps that run the scheduler: only after them is the last pass's reservation news."""


def _steps_as_played(lines: list[str]) -> list[str]:
    """A restarted run's lines as a plain run prints them: each ``restart`` step's block (its
    head and state lines) left out, and the ``reserved`` line kept only after a step that ran the
    scheduler (after any other step both backends print the last pass's reservations again, which
    a restart forgets on the database side: the backend keeps them in memory, not in the database,
    and the line after the last ticking step already compared them)."""
    out: list[str] = []
    kind = ""
    for line in lines:
        if line.startswith("["):
            kind = line.split("] ", 1)[1].split(":", 1)[0]
        if kind == "restart" or (kind not in TICKING and line.startswith("  reserved ")):
            continue
        out.append(line)
    return out


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario_passes_on_db_backend_like_memory_restarted_before_every_step(
    path: Path, tmp_path: Path, transactional_db: None
) -> None:
    """The scenario passes on the database backend, restarted before every step (the scheduler's
    state is the database: a restart changes nothing), and decides step by step what the memory
    backend decides without restarts: the same starts (hosts and GPU indices), preemptions, pending
    reasons with their numbers, and reservations. (trim63: one database run per scenario; a second,
    unrestarted run compared a subset of these lines: the same decisions, reasons and reservations.)"""
    assert "restart:" not in path.read_text(), "a shared scenario with restarts: compare as restarts=False"
    doc = yaml.safe_load(path.read_text())
    doc["steps"] = [s for step in doc.get("steps") or [] for s in ({"restart": {}}, step)]
    variant = tmp_path / path.name
    variant.write_text(yaml.safe_dump(doc, sort_keys=False))

    result = _play_db(variant)

    assert result.ok, "\n".join(result.lines)
    memory = run_scenario(str(path), MemoryBackend(), verbose=True)
    assert memory.ok, "\n".join(memory.lines)
    _assert_same(_steps_as_played(_canonical(result.lines)), _steps_as_played(_canonical(memory.lines)))


# Steps the shared scenarios do not use (grace, durations, cancel, exits, holds, budgets created
# on the way, rejected submissions, drains, GPU faults, offline and lost hosts, hosts added and
# removed): both backends must still decide the same, step by step.
PARITY = {
    "grace-durations-cancel-budgets": """
settings: {grace: 30s, tick_interval: 30s}
hosts: [{name: h, count: 2, gpus: 8}]
budgets: [{path: A}, {path: B}, {path: C/c1, shares: 2}]
usage: [{budget: A, gpu_hours: 300}]
running:
  - {id: A1, budget: A, gpus: 4, host: h1, min_runtime: 1h, elapsed: 2h, duration: 2h20m}
  - {id: A2, budget: A, gpus: 4, host: h1, min_runtime: 1h, elapsed: 2h}
  - {id: A3, budget: A, gpus: 8, host: h2, min_runtime: 30m, elapsed: 1h, duration: 5h}
pending:
  - {id: B1, budget: B, gpus: 6, min_runtime: 1h, duration: 25m}
  - {id: U1, budget: C/c1, gpus: 2, min_runtime: 0, duration: 2h}
steps:
  - tick: {}
  - advance: 1m
  - advance: 30m
  - submit: [{id: B2, budget: B, gpus: 2, min_runtime: 10m, duration: 1h}, {id: Z, budget: C, gpus: 1,
              min_runtime: 1h}, {id: Y, budget: B, gpus: 9, min_runtime: 1h}, {id: X, budget: Q, gpus: 1,
              min_runtime: 1h}]
  - advance: 20m
  - cancel: [A3]
  - advance: 15s
  - advance: 1m
  - budget: {path: B, hold: true}
  - submit: [{id: B3, budget: B, gpus: 1, min_runtime: 1h}]
  - advance: 10m
  - budget: {path: B, hold: false}
  - create_budget: {path: D/d1, shares: 3}
  - submit: [{id: D1, budget: D/d1, gpus: 4, min_runtime: 20m, duration: 3h}]
  - advance: 1h
  - fail: [D1]
  - cancel: [B3, U1]
  - advance: 1h
  - finish: [A2]
  - advance: 1h
    expect: {total_preemptions: 2, usage: {A: 340.95}}
""",
    "drains-faults-offline-hosts": """
settings: {grace: 20s, host_lost_after: 2m}
hosts: [{name: n, count: 3, gpus: 4}]
budgets: [{path: A}, {path: B}]
running:
  - {id: A1, budget: A, gpus: 4, host: n1, min_runtime: 1h, elapsed: 2h}
  - {id: A2, budget: A, gpus: 2, host: n2, min_runtime: 2h, elapsed: 1h}
  - {id: U1, budget: B, gpus: 2, host: n2, min_runtime: 0, elapsed: 1h}
pending:
  - {id: B1, budget: B, gpus: 4, min_runtime: 1h}
  - {id: B2, budget: B, gpus: 2, min_runtime: 1h}
steps:
  - tick: {}
  - advance: 1m
  - host: {name: n2, state: drain_now}
  - advance: 1m
  - host: {name: n2, state: active}
  - gpu: {host: n3, index: 1, health: unhealthy, xid: 79}
  - advance: 1m
  - gpu: {host: n3, index: 1, health: healthy}
  - host: {name: n3, state: active}
  - advance: 1m
  - host: {name: n1, state: cordoned}
  - advance: 1m
  - host: {name: n3, state: offline}
  - advance: 5m
  - add_host: {name: m1, gpus: 4}
  - advance: 1m
  - remove_host: n2
  - advance: 10m
  - host: {name: n1, state: active}
  - advance: 10m
""",
    # max_runtime (FORMAT.md, DESIGN.md §4): a wall-time stop at confirmed start + limit, released
    # after the grace, not a preemption; the timed-out workload ends (failed), it is not requeued.
    "max-runtime": """
settings: {grace: 30s, tick_interval: 10s}
hosts: [{name: h1, gpus: 4}]
budgets: [{path: A}, {path: B}]
running:
  - {id: R1, budget: A, gpus: 2, host: h1, min_runtime: 30m, elapsed: 50m, max_runtime: 1h}
pending:
  - {id: T1, budget: B, gpus: 2, min_runtime: 10m, max_runtime: 20m, duration: 1h}
  - {id: W1, budget: B, gpus: 4, min_runtime: 1h}
steps:
  - tick: {}
    expect: {started: [T1], running_exactly: [R1, T1], pending: [W1]}
  - at: 10m15s
    expect: {preempted: [], preempting: [R1], running: [T1]}
  - at: 10m30s
    expect: {running_exactly: [T1], pending: [W1], total_preemptions: 0}
  - at: 21m
    expect: {started: [W1], running_exactly: [W1], total_preemptions: 0}
""",
}


@pytest.mark.parametrize("name", sorted(PARITY))
def test_db_backend_decides_like_memory_beyond_the_shared_scenarios(
    name: str, tmp_path: Path, transactional_db: None
) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}" + PARITY[name])

    result = _play_db(path)

    memory = run_scenario(str(path), MemoryBackend(), verbose=True)
    assert memory.ok, "\n".join(memory.lines)
    assert result.ok, "\n".join(result.lines)
    _assert_same(_canonical(result.lines, details=False), _canonical(memory.lines, details=False))


# A cancel inside the grace period of a stop the server issued (DESIGN.md §4: the issued stop's
# reason is the end reason): a wall-time stop stands and the workload ends failed; a drain's stop
# (a requeue) is replaced and the workload ends canceled. One rule (scheduler/stop_rules.py
# cancel_replaces) for the services and the simulator; both backends end the same.
CANCEL_OVER_A_STOP = """name: cancel over an issued stop
settings: {grace: 30s, tick_interval: 10s}
hosts: [{name: h1, gpus: 2}, {name: h2, gpus: 2}]
budgets: [{path: A}]
running:
  - {id: T1, budget: A, gpus: 2, host: h1, min_runtime: 10m, elapsed: 59m, max_runtime: 1h}
  - {id: D1, budget: A, gpus: 2, host: h2, min_runtime: 10m, elapsed: 1h}
steps:
  - tick: {}
  - at: 1m
    expect: {preempting: [T1], running: [D1]}
  - host: {name: h2, state: drain_now}
  - tick: {}
    expect: {preempting: [T1, D1]}
  - cancel: [T1, D1]
  - advance: 1m
"""


def test_both_backends_end_a_canceled_stop_by_the_one_rule(tmp_path: Path, transactional_db: None) -> None:
    path = tmp_path / "cancel-over-a-stop.yaml"
    path.write_text(CANCEL_OVER_A_STOP)
    memory = MemoryBackend()
    assert run_scenario(str(path), memory, verbose=True).ok
    db = DbBackend(scratch_db=False)
    try:
        assert run_scenario(str(path), db, verbose=True).ok
        db_states = db.states()
    finally:
        db.close()

    assert memory.states() == {"T1": "failed", "D1": "canceled"}
    assert db_states == memory.states()


def test_the_command_plays_db_scenarios_in_a_scratch_database(
    django_db_setup: None, django_db_blocker: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``manage.py scenario --backend db`` creates its own database and drops it: the configured
    one (here the test database, left empty) is never read or written."""
    with django_db_blocker.unblock():
        configured = connection.settings_dict["NAME"]
        # the shortest shared scenario (trim48: P01, 180 ticks, plays on this backend above)
        call_command("scenario", str(next(p for p in SCENARIOS if p.name.startswith("P03-"))), "--backend", "db")
        assert connection.settings_dict["NAME"] == configured
        assert not Cluster.objects.exists() and not Budget.objects.exists()
    assert "PASS" in capsys.readouterr().out
