"""Answers kept between passes by the log of host changes (``ClusterState.changed_since``).

The screen's host walk (``KeptSummary``), a gang's vacatable hosts (``gang_victims``), a gang's
and a single-host workload's reservation instants per host (``reserve._gang_starts``,
``reserve._single_starts``), the single-host victim search's most room per host
(``victims._most_room``) and the rest proofs' reservation bound per host (``tail.bound_rooms``)
read again only the hosts bumped since their last reading. Busy random traces (single hosts and
gangs, reservations) run through ``IncrementalScheduler(check=True)``: every kept answer is
compared with a fresh walk and every pass with a fresh ``schedule()``. A log that forgets one
host per reading, for one reader at a time (a skipped invalidation), fails that comparison.
"""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.state as state_module
from scheduler.policy import IncrementalScheduler
from scheduler.policy.state import ClusterState
from scheduler.sim.simulate import TraceSim
from tests.policy.trace_checks import busy_trace, run_checked


def _inputs(tmp_path: Path, seed: int) -> object:
    return busy_trace(
        tmp_path,
        seed,
        jobs=220,
        gap_s=500,
        sizes=[1, 1, 2, 2, 4, 8, 16, 24],
        longest_s=6 * 3600,
        hosts=5,
        max_reservations=3,
    )


def _reads(monkeypatch: pytest.MonkeyPatch, forget_in: str | None = None) -> dict[str, int]:
    """Count the kept readings per reader module; with ``forget_in``, that reader's log
    forgets the first host (by name) of every non-empty reading."""
    real = ClusterState.changed_since
    seen: dict[str, int] = {}

    def logged(self: ClusterState, mark: int) -> set[str] | None:
        got = real(self, mark)
        frame = sys._getframe(1)  # the reader: the first caller outside the log's own module
        while frame.f_globals["__name__"] == "scheduler.policy.state":  # (ClusterState.kept_per_host)
            frame = frame.f_back  # type: ignore[assignment]
        reader = frame.f_globals["__name__"]
        seen[reader] = seen.get(reader, 0) + (got is not None)
        if got and reader == forget_in:
            got = got - {min(got)}
        return got

    monkeypatch.setattr(ClusterState, "changed_since", logged)
    return seen


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_kept_by_the_log_decides_as_fresh_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    seen = _reads(monkeypatch)
    run_checked(_inputs(tmp_path, seed))
    for reader in ("screen_summary", "gang_victims", "reserve", "victims", "tail"):
        assert seen.get(f"scheduler.policy.{reader}", 0) > 20, seen


@pytest.mark.parametrize(
    ("reader", "message"),
    [
        ("screen_summary", "screen summary"),
        ("gang_victims", "kept gang options"),
        ("reserve", "kept (gang starts|reservation ranking)"),
        ("victims", "kept victim room"),
        ("tail", "kept bound rooms"),
    ],
)
def test_a_forgotten_change_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str, message: str
) -> None:
    _reads(monkeypatch, forget_in=f"scheduler.policy.{reader}")
    with pytest.raises(AssertionError, match=message):
        for seed in (11, 12, 13):
            TraceSim(_inputs(tmp_path, seed), IncrementalScheduler(check=True)).run()


@st.composite
def _bumps(draw: st.DrawFn) -> tuple[list[str | None], int]:
    """Bumps of a few hosts with marks taken among them (None: take a mark), and a log size."""
    hosts = [f"h{i}" for i in range(draw(st.integers(1, 6)))]
    steps = draw(st.lists(st.one_of(st.none(), st.sampled_from(hosts)), min_size=1, max_size=80))
    return steps, draw(st.integers(2, 40))


@settings(max_examples=300, deadline=None)
@given(_bumps())
def test_changed_since_reads_each_hosts_last_bump_as_the_log(case: tuple[list[str | None], int]) -> None:
    """A stretch of the log longer than the hosts is read from each host's last bump: the same
    set as every bump since the mark (``changed_since_walk``), before and after the log is cut,
    and from a state pickled before the last bumps were kept."""
    steps, kept = case
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(state_module, "_LOG_KEPT", kept)
        _compare_log(steps)


def _compare_log(steps: list[str | None]) -> None:
    st_ = ClusterState([], [], {})
    marks = [st_.mark()]
    for host in steps:
        if host is None:
            marks.append(st_.mark())
        else:
            st_.bump(host)
        for mark in marks:
            assert st_.changed_since(mark) == st_.changed_since_walk(mark)
    old = dict(st_.__dict__)
    del old["_last"]
    loaded = ClusterState.__new__(ClusterState)
    loaded.__setstate__(old)
    for mark in marks:
        assert loaded.changed_since(mark) == st_.changed_since_walk(mark)
    st_.bump("h0")
    copied = pickle.loads(pickle.dumps(st_))  # noqa: S301 (written here)
    assert all(copied.changed_since(m) == st_.changed_since_walk(m) for m in marks)
