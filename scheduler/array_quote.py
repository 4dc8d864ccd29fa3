"""A quote for an array submission (DESIGN.md §3.8, docs/estimates.md "Quotes", arrays).

The quote's lines price one member as if it were submitted alone; a user submitting an array
wants, for their own minimum runtime, when its members would start (the first and the last) and
what the protected part of the whole array would charge. This runs the same forward simulation
as an estimated start (:func:`scheduler.sim.estimate.forward`) with the array's members added as
the snapshot would read them once submitted: one group, its ``%N`` cap in ``group_limits``, one
submission instant and consecutive sequence numbers. Nothing is written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from scheduler.policy.types import Snapshot
from scheduler.policy.types import Workload as PolicyWorkload

ARRAY_QUOTE_BUDGET_S = 0.5
"""CPU seconds the array's simulation may take (one more simulation than a plain quote's, with
up to ``%N`` members in it): members not started by then get no start (``searched_until``)."""

QUOTE_GROUP = "quote-array"
"""The group of the hypothetical members (never a real group's key: those are digits)."""


@dataclass(frozen=True)
class ArrayQuote:
    """The array's answer at the user's own minimum runtime ``min_runtime_s``.

    ``first_start``: the estimated start of its first member; ``last_start``: of its last, None
    unless every member starts within the search (``searched_until``: one window, or less when the
    CPU budget ran out). With a ``%N`` cap below the array's size the simulation holds only
    ``limit`` members (:func:`member_ids`): the others are not searched (a submitted member gets
    its estimate when a sibling's wall-time limit frees a slot, docs/estimates.md);
    ``started``/``started_by`` say how many members start and by when.
    ``charge_gpu_hours``: what the protected parts of all its members
    would charge, each priced as a quote line is (:func:`scheduler.sim.estimate.protected_charge`):
    ``gpus × M``, 0 for a member the simulation starts unfunded at its budget's downgrade cap
    (``unfunded`` of them, DESIGN.md §3.7); a member not searched or not started is priced funded."""

    members: int
    limit: int | None
    min_runtime_s: int
    first_start: datetime | None
    last_start: datetime | None
    started: int
    started_by: datetime | None
    charge_gpu_hours: float
    searched_until: datetime
    starts_now: bool = False
    unfunded: int = 0


def member_ids(members: int, limit: int | None) -> list[str]:
    """The ids of the members the simulation adds: only as many as the cap lets run at once (the
    others are not searched: ``last_start`` is None), so a huge array costs no more than its cap."""
    from scheduler.sim.estimate import QUOTE_ID

    return [f"{QUOTE_ID}.{i}" for i in range(min(members, limit or members))]


def array_quote(
    snap: Snapshot,
    member: PolicyWorkload,
    members: int,
    limit: int | None,
    *,
    grace: int,
    running: Mapping[str, object] | None = None,
    limits: Mapping[str, int] | None = None,
    max_runtime_s: int | None = None,
    budget_s: float = ARRAY_QUOTE_BUDGET_S,
    waits: bool = False,
    requeued: Iterable[str] = (),
) -> ArrayQuote:
    """Quote ``members`` members like ``member`` (the quote's hypothetical workload with the user's
    own ``M``), at most ``limit`` running at once, on ``snap``; ``waits``: its ``after`` work has
    not ended, so no member has a start and each is priced funded (as a quote line then is:
    :func:`scheduler.sim.estimate.quote`'s ``waits``), and no simulation runs (``searched_until``: the
    window's end). ``running``, ``limits`` and ``requeued`` as for the lines (the forward
    simulation's). Pure: reads only its arguments."""
    from scheduler.sim.estimate import forward_found, protected_charge

    ids = member_ids(members, limit)
    seq = max((w.seq for w in snap.pending), default=0) + 1
    added = [
        replace(member, id=wid, submitted_at=snap.now, seq=seq + i, group=QUOTE_GROUP) for i, wid in enumerate(ids)
    ]
    groups = dict(snap.group_limits)
    if limit:
        groups[QUOTE_GROUP] = (limit, 0)
    with_members = replace(snap, pending=[*snap.pending, *added], group_limits=groups)
    own_limits = dict(limits or {})
    if max_runtime_s is not None:
        own_limits.update(dict.fromkeys(ids, max_runtime_s))
    if waits:  # no member has a start: no simulation (cli46b: one ran, its starts thrown away), none unfunded
        found: dict[str, int] = {}
        reached, unfunded = snap.now + snap.window, frozenset[str]()
    else:
        found, reached, unfunded = forward_found(
            with_members,
            grace=grace,
            budget_s=budget_s,
            only=ids,
            running=running,  # type: ignore[arg-type]
            limits=own_limits,
            requeued=requeued,
        )
    starts = sorted(found[wid] for wid in ids if wid in found)
    charged = sum(protected_charge(m, m.id in unfunded) for m in added)
    charged += (members - len(added)) * protected_charge(member, False)  # not searched: priced funded

    def instant(t: int) -> datetime:
        return datetime.fromtimestamp(t, tz=UTC)

    return ArrayQuote(
        members=members,
        limit=limit,
        min_runtime_s=member.min_runtime,
        first_start=instant(starts[0]) if starts else None,
        last_start=instant(starts[-1]) if len(starts) == members else None,
        started=len(starts),
        started_by=instant(starts[-1]) if starts else None,
        charge_gpu_hours=charged / 3600,
        searched_until=instant(reached),
        starts_now=bool(starts) and starts[0] <= snap.now,
        unfunded=len(unfunded & set(ids)),
    )


def array_note(q: ArrayQuote, waits: bool) -> str:
    """The array's answer in words, printed under the lines on every surface (``waits``: its
    ``after`` work has not ended, so no member has a start)."""
    from fairway_cli.numbers import duration_text, gpu_time_text, instant_text

    capped = f", at most {q.limit} running at once (%{q.limit})" if q.limit else ""
    own = duration_text(q.min_runtime_s) if q.min_runtime_s else "0 (unallocated)"
    charge = gpu_time_text(q.charge_gpu_hours * 3600)  # as every charge reads (try63)
    # the members the simulation starts unfunded at a downgrade cap charge 0, as such a line does
    unfunded = (
        f" ({q.unfunded} of its members {'starts' if q.unfunded == 1 else 'start'} unfunded at its budget's cap: "
        "nothing charged for them)"
        if q.unfunded
        else ""
    )
    head = (
        f"An array of {q.members} members{capped}: each line prices one member as if it were submitted alone. "
        f"The whole array, at your minimum runtime {own}, would charge {charge} for its "
        f"protected parts{unfunded}"
    )
    if waits:
        return f"{head}; no member has a start until its after work has ended."

    def by(t: datetime | None) -> str:
        return "now" if q.starts_now and t == q.first_start else f"by {instant_text(t)}"

    if q.first_start is None:
        return f"{head}; no start is found for any member before {instant_text(q.searched_until)}."
    first = f"{head}; its first member starts {by(q.first_start)}"
    if q.last_start is not None:
        return f"{first}." if q.members == 1 else f"{first}, its last {by(q.last_start)}."
    if q.limit and q.limit < q.members and q.started == q.limit:
        return (
            f"{first}, {q.started} members {by(q.started_by)}; the other {q.members - q.started} wait for a "
            f"slot of the %{q.limit} cap, which frees only when a member ends (in the estimate, at its "
            "wall-time limit): their starts are not searched."
        )
    # "none before" in the lines' words: the search found no start for them (one member started
    # read "1 of its members start now" after "its first member starts now", try40)
    unfound = f"no start is found for the other {q.members - q.started} before {instant_text(q.searched_until)}."
    if q.started == 1:
        return f"{first}; {unfound}"
    return f"{first}; {q.started} of its members start {by(q.started_by)}; {unfound}"
