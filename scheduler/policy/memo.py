"""The pass's one memo: every cached answer of a pass, with one invalidation rule.

**Rule: a change drops every entry that read what changed.** The pass reports each change
through :meth:`Memo.changed`, naming what it touched:

- every decision that moves GPUs, work or nominations (start, stop, nomination, load change)
  changes the *state*;
- a reservation changes none of that, only what reads reservations: the reasons
  (``reserved_for``, ``reserved_start``); :meth:`Memo.reserved`;
- ``load``: a budget's ``U + C`` changed (ratios, hence rule 2's answers);
- ``room``: room for pending work can grow (a stop; a nomination released or turned into an
  attempt). Within a pass starts and reservations only take room away or delay it, so a failed
  search stays failed until room can grow (``Pass.failed_before``).

Each table below says what its entries read. The one exception reads a single host: room
profiles carry that host's version (:attr:`ClusterState.version`, bumped by every change of its
GPUs, work or nominations) in their key, so a change elsewhere never drops them.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

OUTRIGHT_USES = ("thresholds", "rest")
"""The kinds of answer kept in ``Memo.outright_of``: ``SkipRuns._threshold``, ``Tail._rest``."""


class Memo:
    """Cached answers of one pass (module docstring). Plain dicts, read and filled by the pass."""

    __slots__ = (
        "allowed",
        "allowed_of",
        "classes",
        "failed",
        "free_failed",
        "gang_options",
        "gang_table",
        "host_room",
        "level_table",
        "levels",
        "outright",
        "outright_of",
        "reason",
        "sides",
        "single_ranked",
        "tail_gang",
        "thresholds",
        "unallocated_short",
    )

    def __init__(self) -> None:
        # read loads: (budget, commitment, budgets seen) -> budgets rule 2 allows / class of each budget
        self.allowed: dict[tuple[str, int, int], frozenset[str]] = {}
        self.allowed_of: dict[str, tuple[int, frozenset[str]]] = {}  # workload id -> (budgets seen, allowed)
        self.classes: dict[tuple[str, int, int], dict[str, int]] = {}
        # (budget, budgets seen) -> rule 2's thresholds (contract.rule2_thresholds)
        self.thresholds: dict[tuple[str, int], tuple[list[Any], list[str]]] = {}
        self.sides: dict[tuple[str, str], Fraction] = {}  # (preemptor budget, victim budget) -> -r(B)
        # read room: (search kind, model, CPUs, memory) -> failed searches as (allowed budgets, GPUs, M)
        self.failed: dict[tuple[str, str, int | None, int | None], list[tuple[frozenset[str], int, int]]] = {}
        # read room: (model, gang, CPUs, memory) -> failed free placements of allocated work as (GPUs, M)
        self.free_failed: dict[tuple[str, bool, int | None, int | None], list[tuple[int, int]]] = {}
        # read room and loads: (budget, model, gang, CPUs, memory) -> (GPUs, M) of workloads that failed outright
        self.outright: dict[tuple[str, str, bool, int | None, int | None], list[tuple[int, int]]] = {}
        # read one budget's failures outright: (use, budget) -> what was derived from them (the
        # skipped runs' thresholds, a tail proof's rest of that budget's queue); dropped with
        # ``outright`` and, per budget, when a failure of that budget is recorded (failed_outright)
        self.outright_of: dict[tuple[str, str], Any] = {}
        # read the state: reason tables (reservations ignored, §3.8)
        self.levels: dict[tuple[object, ...], tuple[int, dict[str, object]]] = {}
        self.level_table: dict[tuple[object, ...], Any] = {}  # per level, keyed by what it reads
        self.gang_table: dict[tuple[object, ...], Any] = {}  # the gang tables and their index (reason_tables)
        self.gang_options: dict[tuple[object, ...], list[str]] = {}
        # read the state, not the reservations (reserved hosts are skipped when read):
        # (model, GPUs, allowed budgets, CPUs, memory) -> a single-host reservation search's
        # ranking of hosts, walked as far as needed (reserve.Ranking)
        self.single_ranked: dict[tuple[object, ...], Any] = {}
        # read the state; the reservations by their count (they only grow in a pass):
        # (model, allowed budgets, reservations) -> whole hosts a gang's reservation may find (tail.py)
        self.tail_gang: dict[tuple[str, frozenset[str], int], int] = {}
        # read the state and the reservations: reasons
        self.reason: dict[tuple[object, ...], Any] = {}
        # read the state: (model, GPUs, CPUs, memory, starts) -> resources short for unallocated work
        self.unallocated_short: dict[tuple[object, ...], list[str]] = {}
        # read one host: (host, host version, allowed budgets) -> its room profile's answers
        self.host_room: dict[tuple[object, ...], Any] = {}

    def changed(self, *, load: bool = False, room: bool = False) -> None:
        """Drop what read the state (always), the loads (``load``) or the room (``room``)."""
        self.levels.clear()
        self.level_table.clear()
        self.gang_table.clear()
        self.gang_options.clear()
        self.single_ranked.clear()
        self.tail_gang.clear()
        self.reason.clear()
        self.unallocated_short.clear()
        if load:
            self.allowed.clear()
            self.allowed_of.clear()
            self.classes.clear()
            self.thresholds.clear()
            self.sides.clear()
            self.outright.clear()
            self.outright_of.clear()
        if room:
            self.failed.clear()
            self.free_failed.clear()
            self.outright.clear()
            self.outright_of.clear()

    def failed_outright(self, budget: str) -> None:
        """A failure outright of ``budget`` was recorded in ``outright``: drop what read that
        budget's failures (``outright_of``; each entry reads only its own budget's)."""
        for use in OUTRIGHT_USES:
            self.outright_of.pop((use, budget), None)

    def reserved(self) -> None:
        """A reservation was made: drop what read the reservations (the reasons). The reason
        tables, room profiles and failed searches read GPUs, work and loads only; a reservation
        only takes room away, so a failure stands."""
        self.reason.clear()
