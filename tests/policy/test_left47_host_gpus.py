"""left47: a scenario file (and ``simulate --gpus-per-host``, ``seed_demo --gpus``) allowed 1,024
GPUs a host, the agent protocol's GPU *index* bound, while a host reports, joins and starts with at
most ``agent.protocol.MAX_HOST_GPUS`` (256) GPUs: a simulated cluster no real one could be. The
scenario's bound is the protocol's one constant."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import protocol
from scheduler.scenarios import spec
from scheduler.scenarios.spec import ScenarioError, cluster_size_problem, load_scenario

ROOT = Path(__file__).resolve().parents[2]

SCENARIO = """\
name: a host of many GPUs
hosts:
  - {name: h1, gpus: %d}
budgets:
  - {path: A, shares: 1}
pending:
  - {id: A1, budget: A, gpus: 1, min_runtime: 1h}
steps:
  - expect:
      ratio_order: [A]
"""


def test_the_scenario_bound_is_the_protocol_s():
    assert spec.MAX_HOST_GPUS is protocol.MAX_HOST_GPUS
    assert cluster_size_problem(("--hosts", 1), ("--gpus", protocol.MAX_HOST_GPUS)) is None
    assert cluster_size_problem(("--hosts", 1), ("--gpus", protocol.MAX_HOST_GPUS + 1)) == (
        f"--gpus: at most {protocol.MAX_HOST_GPUS}, not {protocol.MAX_HOST_GPUS + 1}"
    )


def test_a_scenario_host_past_the_protocol_s_gpus_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(SCENARIO % (protocol.MAX_HOST_GPUS + 1))
    with pytest.raises(ScenarioError, match=r"hosts\[0\]\.gpus"):
        load_scenario(path)
    path.write_text(SCENARIO % protocol.MAX_HOST_GPUS)
    assert load_scenario(path).hosts[0].gpus == protocol.MAX_HOST_GPUS


def test_no_shipped_scenario_has_a_host_past_it():
    files = [p for p in ROOT.glob("tests/**/*.yaml") if p.read_text().startswith(("budgets", "#", "name", "hosts"))]
    checked = 0
    for path in files:
        try:
            scenario = load_scenario(path)
        except ScenarioError:
            continue  # not a scenario (or a deliberately broken one)
        checked += 1
        assert all(h.gpus <= protocol.MAX_HOST_GPUS for h in scenario.hosts), path
    assert checked >= 10
