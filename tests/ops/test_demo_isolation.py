"""The demo's isolation choice (scripts/demo.py, docs/isolation.md): as root, attempts run as dedicated
accounts ``fw-<user>``; a Python they cannot run makes the workloads use the system's Python, and only
without one do attempts run as root (the cluster then allows root workloads)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo():
    spec = importlib.util.spec_from_file_location("fairway_demo_script", ROOT / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_as_root_a_private_python_gives_the_workloads_the_system_python(demo, monkeypatch):
    import agent.runtime.isolation as iso

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(iso, "usable_by_others", lambda path: path == demo.SYSTEM_PYTHON)
    monkeypatch.setattr(iso, "access_problem", lambda *a, **k: None)
    if not Path(demo.SYSTEM_PYTHON).exists():
        pytest.skip(f"no {demo.SYSTEM_PYTHON} here")
    assert demo.demo_isolation() == demo.DemoIsolation({}, demo.SYSTEM_PYTHON, allow_root=False)


def test_without_a_usable_python_attempts_run_as_the_agents_user_and_the_cluster_allows_root(demo, monkeypatch):
    import agent.runtime.isolation as iso

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(iso, "usable_by_others", lambda path: False)
    chosen = demo.demo_isolation()
    assert chosen.agent_env == {"FAIRWAY_ISOLATION": "{mode: agent, allow_root: true}"}
    assert chosen.allow_root and chosen.workload_python == demo.PYTHON


def test_not_root_nothing_changes(demo, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    assert demo.demo_isolation() == demo.DemoIsolation({}, demo.PYTHON)
