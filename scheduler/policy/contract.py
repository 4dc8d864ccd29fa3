"""The scheduling contract (DESIGN.md §3.4, §3.5), stated once.

Every search, reservation, pending reason and the idle screen read this module:

- **Victim classes** (:func:`victim_class`): how an open attempt counts as room for a pending
  workload ``P``. ``NOW`` (rule 1 and 2 allow it now), ``LATER`` (rule 2 allows it, still
  protected), ``FORBIDDEN`` (rule 2 forbids it), ``NEVER`` (its own budget's allocated work, any
  work for unallocated ``P`` (rule 4), or work already leaving).
- **Rule 2** (:func:`rule2`, :func:`allowed_budgets`): which budgets' allocated work ``P`` may take.
- **The victim key** (:data:`CRITERIA`, :func:`victim_key`): the victim-choice order of §3.4 as
  one tuple of numbered criteria, smaller first. Shortcuts that lean on its order say so in one
  boolean (:func:`counts_lead`) and switch off when the order is changed.
- **The room profile of a host** (:class:`HostRoom`, :func:`host_room`): what each class of victim
  there could free for ``P``, and from when. What is kept between passes is an index of it
  (scheduler/policy/room_index.py: the pass's per-host, per-budget counts ``Standing.agg`` read by
  ``indexed_counts``, the reservations' ``RoomBase``), and the property test checks the index
  against :func:`host_room` on every pass.

Shapes: GPU counts are integers, instants integer seconds.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

from scheduler.policy.state import AttemptView, ClusterState, HostView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Workload

# ----------------------------------------------------------------- victim classes
NOW = 0
"""Room now: unallocated work (for allocated ``P``), or unprotected work rule 2 allows."""
LATER = 1
"""Room at the end of its protection: rule 2 allows it, rule 1 not yet."""
FORBIDDEN = 2
"""Never room while rule 2 forbids it (another budget, the less served side)."""
NEVER = 3
"""Never room for ``P``: its own budget's allocated work, anything for unallocated ``P``, leaving work."""


def rule2(tree: BudgetTree, load: Mapping[str, int], budget: str, commitment: int, victim_budget: str) -> bool:
    """§3.4 rule 2: may a workload of ``budget`` committing ``commitment`` GPU-seconds (``gpus × M``)
    take allocated work of ``victim_budget``? ``r(A)`` with the commitment strictly below ``r(B)``
    (:meth:`BudgetTree.rule2`); ``load`` is ``U + C`` per budget in GPU-seconds. Never for its
    own budget."""
    return victim_budget in tree.budgets and tree.rule2(load, budget, commitment, victim_budget)


def allowed_budgets(
    tree: BudgetTree, load: Mapping[str, int], budget: str, commitment: int, budgets: Iterable[str]
) -> frozenset[str]:
    """The budgets among ``budgets`` whose allocated work rule 2 lets a workload of ``budget``
    committing ``commitment`` take (rule 4 aside: :func:`budget_class` never lets unallocated
    work take any)."""
    return frozenset(v for v in budgets if v != budget and rule2(tree, load, budget, commitment, v))


def rule2_thresholds(
    tree: BudgetTree, load: Mapping[str, int], budget: str, budgets: Iterable[str]
) -> tuple[list[int | float], list[str]]:
    """:func:`allowed_budgets` for every commitment at once: rule 2 is
    ``(load_A + c)·s_B < load_B·s_A``, i.e. ``c < T`` with ``T = ceil((load_B·s_A − load_A·s_B) / s_B)``
    for integer commitments ``c`` (``s_B > 0``; with ``s_B = 0`` it does not depend on ``c``).
    Returns the thresholds ascending and their budgets: the budgets allowed a commitment ``c``
    are those after ``bisect_right(thresholds, c)`` (:func:`allowed_from_thresholds`)."""
    pairs: list[tuple[int | float, str]] = []
    splits = tree.split_shares(budget)  # no entry: v is budget, contains it, or is unknown
    for v in budgets:
        got = splits.get(v)
        if got is None:
            continue
        a, b, sa, sb = got
        d = load[b] * sa - load[a] * sb
        if sb > 0:
            t: int | float = -((-d) // sb)
        else:
            t = math.inf if d > 0 else -math.inf
        pairs.append((t, v))
    pairs.sort()
    return [t for t, _ in pairs], [v for _, v in pairs]


def allowed_from_thresholds(thresholds: list[int | float], names: list[str], c: int) -> frozenset[str]:
    """The budgets rule 2 allows a commitment ``c`` (:func:`rule2_thresholds`)."""
    return frozenset(names[bisect.bisect_right(thresholds, c) :])


def allowed_reader(
    tree: BudgetTree, load: Mapping[str, int], budgets: Iterable[str]
) -> Callable[[str, int], frozenset[str]]:
    """``(budget, commitment) ->`` :func:`allowed_budgets` of ``budgets`` over fixed ``load``: each
    budget's :func:`rule2_thresholds` computed once, then read by bisection for every commitment
    (the screen asks several of one budget). ``test_rule2_thresholds_answer_as_rule2_for_every_commitment``
    compares the two."""
    names = tuple(budgets)
    kept: dict[str, tuple[list[int | float], list[str]]] = {}

    def allowed(budget: str, c: int) -> frozenset[str]:
        got = kept.get(budget)
        if got is None:
            got = kept[budget] = rule2_thresholds(tree, load, budget, names)
        return allowed_from_thresholds(got[0], got[1], c)

    return allowed


def commitment(w: Workload) -> int:
    """``w``'s commitment once admitted or nominated: ``gpus × M`` GPU-seconds (§3.2, §3.4)."""
    return commitment_of(w.gpus, w.min_runtime)


def commitment_of(gpus: int, min_runtime: int) -> int:
    """:func:`commitment` of a workload of ``gpus`` GPUs and M ``min_runtime``."""
    return gpus * min_runtime


def protection_end(protected_until: int | None, min_runtime: int, now: int) -> int:
    """When an allocated attempt's protection ends, at the earliest: its end once it has started,
    else ``now + M`` (a starting attempt is protected until confirmed, and M counts from then, §3.4)."""
    return protected_until if protected_until is not None else now + min_runtime


def budget_class(w: Workload, budget: str, allowed: Container[str], known: Container[str]) -> int:
    """Class of ``budget``'s unprotected allocated work for ``w``: NOW, FORBIDDEN or NEVER.

    ``allowed`` is :func:`allowed_budgets` of ``w``; ``known`` the budgets of the tree."""
    if not w.allocated or budget == w.budget or budget not in known:
        return NEVER
    return NOW if budget in allowed else FORBIDDEN


def victim_class(av: AttemptView, w: Workload, allowed: Container[str], known: Container[str]) -> int:
    """How the open attempt ``av`` counts as room for ``w`` (§3.4 rules 1, 2 and 4)."""
    if av.stopping:
        return NEVER
    a = av.attempt
    if not a.allocated:
        return NOW if w.allocated else NEVER
    c = budget_class(w, a.budget, allowed, known)
    if c == NOW and av.protected:
        return LATER
    return c


# ------------------------------------------------------------------ the victim key
@dataclass(frozen=True, slots=True)
class KeyContext:
    """What the victim key needs beyond the victims: ``side(v)`` is ``-r(B)`` for a victim of
    budget ``v`` (B the side of the lowest common ancestor holding ``v``; negated so that the most
    over-served side sorts first), ``fabric(host)`` the host's fabric label, ``now`` the pass's
    instant (when a starting attempt, not yet confirmed, counts as started)."""

    side: Callable[[str], Fraction]
    fabric: Callable[[str], str]
    now: int


Criterion = Callable[[KeyContext, Sequence[AttemptView], Sequence[str]], object]


def allocated_gpus(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> int:
    """1. Fewest allocated GPUs preempted."""
    return sum(v.attempt.gpu_count for v in victims if v.attempt.allocated)


def gpus(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> int:
    """2. Fewest GPUs preempted (a gang victim's GPUs all count)."""
    return sum(v.attempt.gpu_count for v in victims)


def victim_count(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> int:
    """3. Fewest victims."""
    return len(victims)


def sides(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> tuple[tuple[int, Fraction], ...]:
    """4. Victims of the most over-served side first: their ``r(B)`` sorted highest first, as a vector.

    Unallocated work has no side: it counts as the most over-served (docs/policy.md)."""
    out = [side_entry(ctx, v) for v in victims]
    out.sort()
    return tuple(out)


def side_entry(ctx: KeyContext, v: AttemptView) -> tuple[int, Fraction]:
    """One victim's entry in :func:`sides`."""
    return allocated_side(ctx, v.attempt.budget) if v.attempt.allocated else UNALLOCATED_SIDE


def allocated_side(ctx: KeyContext, budget: str) -> tuple[int, Fraction]:
    """The :func:`side_entry` of allocated work of ``budget``."""
    return (1, ctx.side(budget))


UNALLOCATED_SIDE = (0, Fraction(0))
"""The :func:`side_entry` of unallocated work: below every allocated victim's."""


def start_times(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> tuple[int, ...]:
    """5. Most recently started first: start times sorted latest first, as a vector. A starting
    attempt (``started_at`` None, not yet confirmed) started now: the most recent of all."""
    return tuple(sorted(start_entry(ctx, v) for v in victims))


def start_entry(ctx: KeyContext, v: AttemptView) -> int:
    """One victim's entry in :func:`start_times`: its start, negated."""
    s = v.attempt.started_at
    return -(ctx.now if s is None else s)


def fabrics(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> int:
    """6. Fewest fabrics (a gang's hosts; §3.3: after the victim order, before host names)."""
    return len({ctx.fabric(h) for h in hosts}) if len(hosts) > 1 else 1


def host_names(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> tuple[str, ...]:
    """7. Host names, ascending in plain string order."""
    return tuple(sorted(hosts))


def workload_ids(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> tuple[str, ...]:
    """8. The victims' workload ids, ascending in plain string order."""
    return tuple(sorted(v.attempt.workload for v in victims))


CRITERIA: tuple[Criterion, ...] = (
    allocated_gpus,
    gpus,
    victim_count,
    sides,
    start_times,
    fabrics,
    host_names,
    workload_ids,
)
"""The victim-choice order of DESIGN.md §3.4, in its order and numbering: compared
lexicographically, smaller first. The same input always gives the same victims."""

COUNTS: tuple[Criterion, ...] = (allocated_gpus, gpus, victim_count)


def victim_key(ctx: KeyContext, victims: Sequence[AttemptView], hosts: Sequence[str]) -> tuple[object, ...]:
    """The §3.4 key of a victim set on ``hosts`` (smaller is better): :data:`CRITERIA` in order."""
    return tuple(c(ctx, victims, hosts) for c in CRITERIA)


class SetBound(NamedTuple):
    """What holds for every victim set on the one host ``host`` (a single-host search): at least
    ``allocated`` allocated GPUs and ``gpus`` GPUs, one victim or more, each victim's
    :func:`side_entry` at least ``side`` and its :func:`start_entry` at least ``start`` (None:
    not known; a search may give ``side`` as any pair ordered as the entries are)."""

    host: str
    allocated: int
    gpus: int
    side: tuple[int, Fraction | int] | None = None
    start: int | None = None


BOUNDS: dict[Criterion, Callable[[SetBound], object]] = {
    allocated_gpus: lambda b: b.allocated,
    gpus: lambda b: b.gpus,
    victim_count: lambda b: 1,
    sides: lambda b: None if b.side is None else (b.side,),
    start_times: lambda b: None if b.start is None else (b.start,),
    fabrics: lambda b: 1,
    host_names: lambda b: (b.host,),
    workload_ids: lambda b: (),
}
"""Each criterion's least value over the victim sets a :class:`SetBound` describes (None: not
known). A sorted vector is at least the 1-tuple of a lower bound of its entries."""


def key_bound(b: SetBound) -> tuple[object, ...]:
    """A lower bound of :func:`victim_key` over every victim set ``b`` describes: the criteria's
    least values (:data:`BOUNDS`) in :data:`CRITERIA`'s order, up to the first one not known.
    Each criterion of a set is at least its bound, so the set's key is at least this tuple
    (lexicographically; a prefix is below every tuple it begins): a host whose bound is above
    the best key found holds no better set."""
    out: list[object] = []
    for c in CRITERIA:
        f = BOUNDS.get(c)
        v = None if f is None else f(b)
        if v is None:
            break
        out.append(v)
    return tuple(out)


def counts_lead() -> bool:
    """True while criteria 1–3 are, in this order, allocated GPUs, GPUs and victims.

    The searches' shortcuts rest on it and are used only while it holds:
    - a set with no allocated victim beats every set with one (criterion 1), and among such
      sets the key does not depend on the preemptor (unallocated work has no side), so one
      index of the best unallocated-only set per host serves every preemptor (reclaim.py); a
      search that finds none there need only scan hosts holding an allocated victim it may take;
    - the three counts are sums over the victims, so a set's ``(allocated GPUs, GPUs)`` is at
      least a host's lower bound (GPUs still missing after free and unallocated GPUs; after free
      GPUs) and a superset is never better on them: the scan stops at the first host whose bound
      is worse than the best set, and skips sets whose counts are.
    Otherwise every host is enumerated in full (same key, slower).
    """
    return CRITERIA[:3] == COUNTS


# -------------------------------------------------------------- the room profile
@dataclass(slots=True)
class HostRoom:
    """What one host could free for one pending workload, by victim class, and from when (GPUs).

    Only healthy GPUs count. ``leaving``: GPUs of attempts already stopping that no one is
    nominated for, by release instant (§3.5); ``now``: class NOW; ``later``: class LATER as
    ``(end of protection, GPUs, confirmed)`` (a starting attempt, not confirmed: ``M`` from now);
    ``forbidden``: class FORBIDDEN, ``witness``
    its smallest budget key; ``never``: class NEVER, leaving work apart; ``nominated``: some GPU of
    the host is nominated (for a workload with a nomination elsewhere: another one).
    """

    free: int
    now: int = 0
    leaving: list[tuple[int, int]] = field(default_factory=list)
    later: list[tuple[int, int, bool]] = field(default_factory=list)
    forbidden: int = 0
    witness: str | None = None
    never: int = 0
    stopping: bool = False
    nominated: bool = False
    freed: list[tuple[int, int, int]] = field(default_factory=list)
    """``(instant, CPUs, memory)`` each attempt that is room gives back (leaving ones at their
    release, NOW now, LATER at its protection's end), on hosts that count them (§3.3)."""

    def resources_by(self, now: int, enough: Callable[[tuple[int, int]], bool]) -> int | None:
        """When what the attempts that are room give back makes ``enough`` true (CPUs and memory
        beside the GPUs; ``now`` if already), or None for never."""
        got = [0, 0]
        if enough((0, 0)):
            return now
        for t, c, m in sorted(self.freed):
            got[0] += c
            got[1] += m
            if enough((got[0], got[1])):
                return max(now, t)
        return None

    def over_time(self, now: int) -> tuple[int, list[tuple[int, int]], int]:
        """``(GPUs room now, [(instant, more GPUs)] in order, most ever)`` for a reservation:
        free GPUs, leaving work at its release, NOW work now, LATER work at its protection's end."""
        events = [(now, self.now)] if self.now else []
        events.extend(self.leaving)
        events.extend((t, g) for t, g, _ in self.later)
        events.sort()
        have = self.free
        return have, events, have + sum(g for _, g in events)

    def vacated_at(self, now: int) -> int | None:
        """When the whole host is room (a gang's reservation), or None: never while rule 2 forbids
        some of its work, its own budget's work is there, or some GPU is nominated."""
        if self.nominated or self.forbidden or self.never:
            return None
        return max([now, *(t for t, _ in self.leaving), *(t for t, _, _ in self.later)])

    def room_by(self, need: int, now: int, starting_now: bool = False) -> int:
        """When free, NOW and LATER work reach ``need`` GPUs (seconds; ``now`` if never).

        ``starting_now``: count starting attempts' GPUs now, as the ``protected_work`` reason
        has always shown them (a reservation assumes ``M`` from now)."""
        have = self.free + self.now
        if have >= need:
            return now
        for t, g in sorted((t if confirmed or not starting_now else now, g) for t, g, confirmed in self.later):
            have += g
            if have >= need:
                return t
        return now


def host_room(
    state: ClusterState, hv: HostView, w: Workload, allowed: Container[str], known: Container[str], now: int
) -> HostRoom:
    """The room profile of ``hv`` for ``w`` (rule 2 allowing ``allowed``), from its attempts."""
    name = hv.name
    nominated = state.nominated
    room = HostRoom(len(hv.free), stopping=bool(hv.stopping), nominated=bool(state.nominees.get(name)))
    for aid in hv.attempts:
        av = state.attempts[aid]
        a = av.attempt
        got = av.on_host.get(name, 0)
        res = av.res.get(name)
        if av.stopping:
            gone = sum(1 for g in a.gpus if g[0] == name and g[1] in hv.healthy and g not in nominated)
            at = now if a.release_at is None else max(now, a.release_at)
            if gone:
                room.leaving.append((at, gone))
            if res is not None:
                room.freed.append((at, *res))
            continue
        c = victim_class(av, w, allowed, known)
        if c == NOW:
            room.now += got
            if res is not None:
                room.freed.append((now, *res))
        elif c == LATER:
            pu = a.protected_until
            room.later.append((protection_end(pu, a.min_runtime, now), got, pu is not None))
            if res is not None:
                room.freed.append((room.later[-1][0], *res))
        elif c == FORBIDDEN:
            room.forbidden += got
            smaller = got and (room.witness is None or a.budget < room.witness)
            room.witness = a.budget if smaller else room.witness
        else:
            room.never += got
    return room
