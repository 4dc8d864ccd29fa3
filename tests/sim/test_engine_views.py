"""The engine hands the policy the same view of a pending workload while it is unchanged
(``SimWorkload.as_pending``): the incremental policy follows views by identity, and a fresh object
per snapshot made it drop and re-add every pending workload on every pass. The plain views
(``plain_pending``, a fresh object each time) are the oracle: the same random clusters decide the
same with either."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.policy import IncrementalScheduler
from scheduler.sim.engine import SimWorkload
from tests.policy.oracle_harness import Tally, build_cluster, play


def _decisions(seed: int) -> list[tuple[int, str]]:
    e, events, horizon = build_cluster(seed, Tally())
    e.scheduler = IncrementalScheduler()  # the policy the simulators run (not the harness's compare)
    seen: list[tuple[int, str]] = []
    e.on_decisions = lambda dec: seen.append(
        (e.now, repr((dec.starts, dec.stops, dec.reserved_start, sorted(dec.pending.items()))))
    )
    play(e, events, horizon)
    return seen


@pytest.mark.parametrize("seed", range(40))
def test_kept_views_decide_as_fresh_views(seed, monkeypatch):
    kept = _decisions(seed)
    monkeypatch.setattr(SimWorkload, "as_pending", SimWorkload.plain_pending)
    assert kept == _decisions(seed)


def test_a_view_is_kept_while_equal_and_replaced_when_a_field_changes():
    w = SimWorkload("w1", "org/a", 2, "H100", 600, 0, 1)
    first = w.as_pending()
    assert w.as_pending() is first
    w.gpus = 4
    changed = w.as_pending()
    assert changed is not first and changed == replace(first, gpus=4) == w.plain_pending()
    w.state = "running"  # not part of the view
    assert w.as_pending() is changed
