"""The collector's first threshold raised while a forward simulation runs
(``estimate.fewer_young_collections``; docs/benchmarks/estimates-rounds.md, "Eleventh pass"): the
estimates are those of a run at the default threshold, and the threshold is put back, also when
two runs overlap (threads) or something else changed it meanwhile."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.sim import estimate as est
from tests.sim.test_estimate_oracle import HORIZON, limits_for, small_state


@pytest.fixture(autouse=True)
def default_threshold() -> Iterator[None]:
    found = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*found)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.integers(0, 2**32 - 1))
def test_forward_estimates_as_at_the_default_threshold_and_puts_it_back(seed: int) -> None:
    s, running, grace = small_state(seed)
    limits = limits_for(seed, s, running)
    seen: list[tuple[int, int, int]] = []
    real = est._forward

    def watched(*a):  # type: ignore[no-untyped-def]
        seen.append(gc.get_threshold())
        return real(*a)

    est._forward = watched  # type: ignore[assignment]
    try:
        raised = est.forward(s, grace=grace, horizon=HORIZON, running=running, limits=limits, budget_s=1e9)
    finally:
        est._forward = real  # type: ignore[assignment]
    plain = real(s, grace, HORIZON, 1e9, None, running, limits, None)
    assert raised == (plain.starts, plain.reached), f"seed {seed}"
    assert seen == [(est.YOUNG_COLLECTIONS_AFTER, 10, 10)]
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_runs_put_the_threshold_back() -> None:
    """Two runs that overlap (A enters, B enters, A leaves, B leaves) leave the default; the one
    that entered second never puts back what it found raised."""
    a, b = est.fewer_young_collections(), est.fewer_young_collections()
    a.__enter__()
    b.__enter__()
    assert gc.get_threshold()[0] == est.YOUNG_COLLECTIONS_AFTER
    a.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)
    b.__exit__(None, None, None)
    assert gc.get_threshold() == (700, 10, 10)


def test_a_threshold_changed_meanwhile_is_kept() -> None:
    with est.fewer_young_collections():
        gc.set_threshold(5000, 10, 10)
    assert gc.get_threshold() == (5000, 10, 10)
    with est.fewer_young_collections():
        assert gc.get_threshold() == (est.YOUNG_COLLECTIONS_AFTER, 10, 10)
    assert gc.get_threshold() == (5000, 10, 10)
