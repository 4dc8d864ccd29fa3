"""A failure outright stands down to its floor of M (``SkipRuns._outright_floor``).

A workload that failed outright records, instead of its own M, the least M that rule 2 and the
reservations answer as they answer its M; the dispatch then skips the same budget's workloads of
that shape with no fewer GPUs from the floor up. Busy traces through
``IncrementalScheduler(check=True)``: at every failure with a floor below M, a workload at the
floor is searched for (``_verify_floor``) and the decisions equal a fresh ``schedule()``'s. A
floor that ignores the reservations refusing the workload, or rule 2, is caught there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy import IncrementalScheduler
from scheduler.policy.core import Pass
from scheduler.policy.skips import SkipRuns
from scheduler.policy.types import Workload
from scheduler.sim.simulate import TraceSim
from tests.policy.builders import T0, H, host, pending, snap, tree
from tests.policy.trace_checks import busy_trace, run_checked


def _count(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    seen = {"below": 0}
    real = SkipRuns._verify_floor

    def counted(self: SkipRuns, w: Workload, floor: int, reclaim: object) -> None:
        seen["below"] += floor < w.min_runtime
        real(self, w, floor, reclaim)  # type: ignore[arg-type]

    monkeypatch.setattr(SkipRuns, "_verify_floor", counted)
    return seen


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_failures_stand_down_to_their_floor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    seen = _count(monkeypatch)
    run_checked(busy_trace(tmp_path, seed))
    assert seen["below"] > 20


def _floor_without(monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    """The floor with one of its two limits left out (a mutant)."""

    def floor(self: SkipRuns, w: Workload) -> int:
        n, m = w.gpus, w.min_runtime
        out = 1 if what == "rule 2" else -(-self.allowed_floor(w.budget, n * m) // n)
        for wid, start in self.reserved.values() if what != "reservations" else ():
            if wid != w.id and self.now + m > start:
                out = max(out, start - self.now + 1)
        return min(out, m)

    monkeypatch.setattr(SkipRuns, "_outright_floor", floor)


@pytest.mark.parametrize("what", ["reservations", "rule 2"])
def test_a_floor_too_low_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    _floor_without(monkeypatch, what)
    with pytest.raises(AssertionError, match="stands down"):
        for seed in (1, 2, 3):
            TraceSim(busy_trace(tmp_path, seed), IncrementalScheduler(check=True)).run()


@st.composite
def _reservations(draw: st.DrawFn) -> tuple[list[tuple[str, int, list[str]]], int, int]:
    """Reservations (workload, start after now, its hosts: a gang's several), the failed
    workload's GPUs and M."""
    names = [f"h{i}" for i in range(8)]
    hosts = draw(st.lists(st.sampled_from(names), unique=True, max_size=8))
    out, k = [], 0
    while k < len(hosts):
        size = draw(st.integers(1, 3))
        out.append((f"r{len(out)}", T0 + draw(st.integers(0, 6 * H)), hosts[k : k + size]))
        k += size
    return out, draw(st.integers(1, 16)), draw(st.integers(1, 8 * H))


@settings(max_examples=200, deadline=None)
@given(_reservations(), st.booleans())
def test_the_floor_reads_each_reservation_once(
    case: tuple[list[tuple[str, int, list[str]]], int, int], own: bool
) -> None:
    """``_outright_floor`` reads each reservation once (``reserved_start``), not once per reserved
    host: the floor of ``_outright_floor_walk``, the workload's own reservation left out."""
    reservations, n, m = case
    ps = Pass(snap([host(f"h{i}") for i in range(8)], tree("a", "b"), pend=[pending("w", "a", n, m)]))
    for wid, start, hosts in reservations:
        wid = "w" if own and wid == "r0" else wid
        ps.dec.reserved_start[wid] = start
        ps.reserved.update(dict.fromkeys(hosts, (wid, start)))
    w = ps.pending["w"]
    assert ps._outright_floor(w) == ps._outright_floor_walk(w)
