"""Budget caps (DESIGN.md §3.7): whether a cap is reached at an instant, stated once.

A cap counts the allocated usage of its budget's subtree over its rolling period ``(t − period,
t]`` by the rules of the windowed usage (§3.1: closed intervals pro-rata, lumps when charged
inside the period, open allocated attempts for the part already run, up to an offline host's last
heartbeat), on every cluster; unallocated and unfunded time never counts. It is reached when that
usage is at least its limit (:meth:`Cap.reached`). The tick's snapshot (``scheduler/snapshot.py``)
marks ``Budget.capped`` with :func:`capped_at` at ``now``; the forward simulation of estimates
follows the same rule through time (``scheduler/sim/caps.py``, whose kept books are compared with
:func:`capped_at` in tests/sim/test_caps_sim.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from scheduler.policy.types import Attempt, Budget, Cap, UsageRecord
from scheduler.policy.usage import windowed_usage

STILL_RUNNING = 2**62
"""The ``end`` of a cap record for an attempt still running on another cluster: usage counts up to
the instant asked, so in the forward simulation it keeps charging (no running work ends on its own)."""


def cap_members(caps: Sequence[Cap], budgets: Iterable[Budget]) -> dict[str, tuple[int, ...]]:
    """Budget key → the indices (in ``caps``) of the caps whose subtree holds it: its own cap and
    its ancestors'. Budgets under no cap are left out. A cycle in the tree ends the walk (the
    policy reports it)."""
    parent = {b.key: b.parent for b in budgets}
    at: dict[str, list[int]] = {}
    for i, cap in enumerate(caps):
        at.setdefault(cap.budget, []).append(i)
    out: dict[str, tuple[int, ...]] = {}
    for key in parent:
        found: list[int] = []
        node: str | None = key
        seen: set[str] = set()
        while node is not None and node not in seen:
            seen.add(node)
            found.extend(at.get(node, ()))
            node = parent.get(node)
        if found:
            out[key] = tuple(found)
    return out


def cap_usage(
    caps: Sequence[Cap],
    members: Mapping[str, tuple[int, ...]],
    records: Iterable[UsageRecord],
    attempts: Iterable[Attempt],
    t: int,
) -> list[int]:
    """Each cap's usage at ``t`` in GPU-seconds (in ``caps``' order): the windowed usage over its
    period (:func:`~scheduler.policy.usage.windowed_usage`) of the ``records`` and open
    ``attempts`` of the budgets of its subtree (``members``: :func:`cap_members`)."""
    records = [r for r in records if r.budget in members]  # the rest is under no cap
    attempts = [a for a in attempts if a.budget in members]
    out = []
    for i, cap in enumerate(caps):
        own = windowed_usage(records, attempts, t, cap.period)
        out.append(sum(v for b, v in own.items() if i in members.get(b, ())))
    return out


def cap_state(
    caps: Sequence[Cap],
    members: Mapping[str, tuple[int, ...]],
    records: Iterable[UsageRecord],
    attempts: Iterable[Attempt],
    t: int,
    counted: Sequence[int] = (),
) -> tuple[list[int], frozenset[str]]:
    """:func:`cap_usage` at ``t`` and the budgets whose cap it reaches (:meth:`Cap.reached`):
    :func:`capped_at` with the usage the budgets page shows ("412 used"). ``counted``: each
    cap's usage of records summed elsewhere (the database: ``snapshot.cap_totals``), added."""
    used = cap_usage(caps, members, records, attempts, t)
    if counted:
        used = [u + c for u, c in zip(used, counted, strict=True)]
    return used, frozenset(cap.budget for cap, u in zip(caps, used, strict=True) if cap.reached(u))


def capped_at(
    caps: Sequence[Cap],
    members: Mapping[str, tuple[int, ...]],
    records: Iterable[UsageRecord],
    attempts: Iterable[Attempt],
    t: int,
) -> frozenset[str]:
    """The budgets whose cap is reached at ``t`` (DESIGN.md §3.7): the usage :func:`cap_usage`
    counts is at least the cap's limit (:meth:`Cap.reached`). The rule, once: the tick's snapshot
    asks it at ``now`` (:func:`cap_state`), the forward simulation at every instant (by its kept
    books, compared with this in tests)."""
    return cap_state(caps, members, records, attempts, t)[1]


def with_capped(budgets: Sequence[Budget], caps: Sequence[Cap], capped: frozenset[str]) -> tuple[Budget, ...]:
    """``budgets`` with ``capped`` set, for each budget that has a cap, to whether it is in
    ``capped``; every other budget is the same object (a budget marked capped without a cap stays
    so)."""
    keys = {cap.budget for cap in caps}
    out = []
    for b in budgets:
        want = b.key in capped
        if b.key in keys and b.capped != want:
            b = replace(b, capped=want)
        out.append(b)
    return tuple(out)
