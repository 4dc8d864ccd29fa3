"""The bulk action tests' shared setup (left55: the service's, the API's and the CLI's tests each
defined it again): three pending workloads of ``researcher``'s, two of ``teammate``'s in the same
budget, and the states to compare before and after. Registered as a plugin by tests/conftest.py;
a module with a setup of its own (other counts) defines its own fixture of the name."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Workload
from scheduler.services import do_submit_workload


@pytest.fixture
def mine(researcher: Any, submit_kwargs: Any) -> list[Workload]:
    """Three pending workloads of ``researcher``'s, ``r0`` to ``r2``."""
    return [do_submit_workload(researcher, **submit_kwargs(name=f"r{i}")) for i in range(3)]


@pytest.fixture
def theirs(teammate: Any, submit_kwargs: Any) -> list[Workload]:
    """Two pending workloads of ``teammate``'s (same budget), ``t0`` and ``t1``."""
    return [do_submit_workload(teammate, **submit_kwargs(name=f"t{i}")) for i in range(2)]


def states() -> dict[int, tuple[str, str]]:
    """Every workload's ``(state, hold)`` by id."""
    return {w.pk: (w.state, w.hold) for w in Workload.objects.all()}
