"""The rest of an allocated dispatch proved idle (passes without reasons).

In a backlog most workloads a full pass hands to the dispatch come after its last decision
(slice of docs/benchmarks/speed.md: 410,458 of 636,016): each still fails free placement, its
victim search and its reservation search, one by one, to decide nothing. :class:`Tail` proves,
between two workloads, that no workload the dispatch has not reached yet can decide anything,
so the pass ends its allocated dispatch there (the unallocated pass still runs).

What it reads of the rest: per budget with a queue left, the least M of each shape (model,
GPUs, CPUs, memory) over its whole queue (``SkipIndex.least_all``, kept with the budget's
index; the workloads already passed only add requests, so this bounds the rest), less the
shapes whose every workload fails outright as one the pass handled did (``memo.outright``, the
skipped runs' memo, at the shape's GPUs and least M: it can decide nothing); it answers
False (not proved) where a queue is not its budget's kept list. The proof is three necessary
conditions, each read as a bound on the rules, never restating them:

- a start or a preemption: :func:`scheduler.policy.screen.idle` over the state as the pass has
  changed it, the rest's shapes as its requests (the screen ignores reservations, which only
  forbid, and reads rule 2 at each budget's smallest commitment, which allows the most);
  a nomination that does not wait (its nominee may start) answers False there;
- a reservation (while fewer than ``max_reservations`` are held): for each (budget, model,
  CPUs, memory, gang) of the rest, with the budgets rule 2 allows at its smallest commitment
  (a larger one allows no more), a reservation search of the pass that failed with no less
  room (``PassState.failed_at``), else no host not reserved that :func:`reserve.ruled_out`
  keeps for its fewest GPUs, or, for a gang, fewer whole hosts not reserved whose allocated
  work is all of allowed budgets than its fewest hosts;
- nothing else decides in a pass without reasons (a group member that waits only records a
  reason, or drops a nomination, which the screen's nominations test answers False for).

Within the dispatch room only shrinks and reservations only grow between two decisions, so
a proof stands to the end of the dispatch. ``ps.check`` (``IncrementalScheduler(check=True)``)
runs the rest anyway and fails if it decides anything (:meth:`Tail.verify`).

One queue's rest (``pol32``): the same proof over that queue alone (:meth:`Tail._leaf_idle`),
asked where the whole rest's fails and when the dispatch enters a queue, holds until the next
decision; while nothing is decided nothing the dispatch order reads changes, so the queue is
walked to its end before any other, and the dispatch passes it at once (:meth:`Tail.passes`;
under ``ps.check`` it is walked and must decide nothing).
"""

from __future__ import annotations

from collections.abc import Callable

import scheduler.policy.contract as contract
from scheduler.policy.dispatch import Dispatcher
from scheduler.policy.gang_victims import gang_hosts_of
from scheduler.policy.queues import BudgetPending
from scheduler.policy.reserve import allowed_work, bound_hosts, ruled_out
from scheduler.policy.screen import idle
from scheduler.policy.screen_nominees import KeptWaits
from scheduler.policy.screen_summary import NONE, KeptSummary, Requests
from scheduler.policy.skip_index import SkipIndex
from scheduler.policy.skips import SkipRuns
from scheduler.policy.state import HostView
from scheduler.policy.types import Workload

RestKey = tuple[str, str, int | None, int | None, bool]
"""(budget, model, CPUs, memory, gang)."""

Rest = dict[RestKey, list[int]]
""":data:`RestKey` -> [fewest GPUs, smallest commitment] of the rest."""

Shapes = list[tuple[RestKey, int, int]]
"""A queue's shapes as (:data:`RestKey`, GPUs, least M)."""

Outright = dict[tuple[str, str, bool, int | None, int | None], list[tuple[int, int]]]
"""``memo.outright``: (budget, model, gang, CPUs, memory) -> (GPUs, M) of failures outright."""

_UNREAD: Shapes = []


class Tail:
    """One allocated dispatch's proofs: each queue's rest read once; the whole rest proved idle
    ends the dispatch, a queue's own rest proved idle is passed at once (:meth:`passes`)."""

    whole_after_decisions = False
    """Ask the whole rest's proof after decisions too (as before pol36): tests, to exercise it."""

    def __init__(
        self,
        ps: SkipRuns,
        disp: Dispatcher,
        progress: object,
        kept: KeptSummary | None = None,
        decided: Callable[[], object] = lambda: None,
    ) -> None:
        self.ps, self.disp, self.kept, self.decided = ps, disp, kept, decided
        self.rests: dict[str, Shapes | None] = {}
        self.mark = progress  # the counts of decisions at the last step
        self.dirty = True  # a decision (or the dispatch's start) since the last proof asked
        self.proved: object = None  # under ps.check: the decisions when the rest was proved idle
        self.first: str | None = None  # the queue whose rest last may have reserved (asked first)
        self.verdicts: dict[str, bool] = {}  # queue -> its own rest proved idle, since the last decision
        self.at: str | None = None  # the queue of the last workload returned
        self.watch: tuple[str, object] | None = None  # under ps.check: a proved queue being walked
        self.decided_once = False  # the dispatch decided something: the whole rest is no more asked
        self.waits = KeptWaits()  # the screen's nominations test, while self.mark stands

    def step(self, progress: object, leaf: str) -> bool:
        """After each workload of ``leaf`` the dispatch handled, with the pass's counts of
        decisions: True when the dispatch may end here. A proof is asked at the first workload
        that decides nothing after one that did, or at the dispatch's first (before it, nothing
        changed that it reads but the rest, which only shrinks); where the whole rest is not
        proved idle, ``leaf``'s own rest may be (:meth:`passes`). The whole rest's proof is asked
        only before the dispatch's first decision (pol36): after one it seldom holds (329 of 3,030
        at day 90 of the whole trace) and reads every queue's rest, where the queues' own proofs
        pass each queue; not asking a proof changes no decision. Under ``ps.check`` the dispatch
        goes on and :meth:`verify` checks."""
        if progress != self.mark:
            if self.watch is not None:
                raise AssertionError(f"{self.watch[0]}'s rest proved idle at {self.ps.now} decided {progress}")
            self.mark, self.dirty, self.verdicts, self.decided_once = progress, True, {}, True
            return False
        if not self.dirty or self.proved is not None:
            return False
        self.dirty = False
        if (self.decided_once and not self.whole_after_decisions) or not self.rest_idle():
            self.verdicts[leaf] = self._leaf_idle(leaf)
            return False
        if not self.ps.check:
            return True
        self.proved = self.decided()
        return False

    def verify(self) -> None:
        """Under ``ps.check``: the dispatch decided nothing after its rest was proved idle."""
        self._left(None)
        if self.proved is not None and self.proved != (now := self.decided()):
            raise AssertionError(f"the dispatch's rest proved idle at {self.ps.now} decided {now} != {self.proved}")

    def passes(self, leaf: str) -> bool:
        """The dispatch returned a workload of ``leaf``: True when the rest of ``leaf``'s queue is
        proved idle since the last decision (:meth:`_leaf_idle`: asked by :meth:`step`, or when the
        dispatch enters the queue), so the dispatch may pass all of it at once (while nothing is
        decided nothing it reads changes, and the queue is walked to its end before any other).
        Under ``ps.check`` it is walked anyway and must decide nothing."""
        got = self.verdicts.get(leaf)
        if got is None:
            got = leaf != self.at and self._leaf_idle(leaf)
            if leaf != self.at:
                self.verdicts[leaf] = got
        self.at = leaf
        if not got:
            self._left(leaf)
            return False
        if not self.ps.check:
            return True
        if self.watch is None or self.watch[0] != leaf:
            self._left(leaf)
            self.watch = (leaf, self.decided())
        return False

    def _left(self, leaf: str | None) -> None:
        """Under ``ps.check``: the queue watched (proved idle) is left for ``leaf``; it decided nothing."""
        if self.watch is not None and self.watch[0] != leaf:
            if self.watch[1] != (now := self.decided()):
                raise AssertionError(f"{self.watch[0]}'s rest proved idle at {self.ps.now} decided {now}")
            self.watch = None

    def rest_idle(self) -> bool:
        """True only when no workload the dispatch has not returned yet can start, preempt,
        reserve or change a nomination in this pass (module docstring); reasons must be off."""
        ps, disp = self.ps, self.disp
        leaves = [leaf for leaf, q in disp.queues.items() if disp.pos[leaf] < len(q)]
        if self.first in leaves:
            leaves.remove(self.first)
            leaves.insert(0, self.first)
        rest: Rest = {}
        for leaf in leaves:
            mine = self._rest(leaf)
            if mine is None:
                return False
            if _may_reserve(ps, mine):
                self.first = leaf
                return False
            rest.update(mine)
        return self._screen(rest)

    def _leaf_idle(self, leaf: str) -> bool:
        """True only when no workload of ``leaf``'s queue the dispatch has not returned yet can
        start, preempt, reserve or change a nomination: :meth:`rest_idle` over that queue alone."""
        mine = self._rest(leaf)
        return mine is not None and not _may_reserve(self.ps, mine) and self._screen(mine)

    def _screen(self, rest: Rest) -> bool:
        """:func:`screen.idle` over the pass's state with ``rest`` as its requests (``ok``: :class:`KeptWaits`)."""
        ps = self.ps
        req, ok = requests(ps, rest), self.waits.of(ps.standing, ps.pending, ps.tree, self.mark, ps.check)
        return idle(
            ps.standing, (), ps.tree, lambda: ps.load, ps.pending, self.kept, lambda: req, None, self._allowed_in, ok
        )

    def _allowed_in(self, p: str, c: int, budgets: set[str]) -> frozenset[str]:
        """The screen's rule 2 (``screen.AllowedIn``) from the pass's kept thresholds
        (``PassState.allowed_at``, over every budget holding allocated work, a superset of
        ``budgets``); under ``ps.check`` compared with :func:`contract.allowed_budgets`."""
        ps = self.ps
        out = ps.allowed_at(p, c) & budgets
        if ps.check and out != (plain := contract.allowed_budgets(ps.tree, ps.load, p, c, budgets)):
            raise AssertionError(f"rule 2 of {p} at {c} from the pass's thresholds: {out} != {plain}")
        return out

    def _rest(self, leaf: str) -> Rest | None:
        """:data:`Rest` of ``leaf``'s whole queue (the part the dispatch has passed asks no
        more: a bound) but its shapes that fail outright (:func:`_failed_outright`); None where
        the queue is not its budget's kept list (no index). Kept while ``leaf``'s failures
        outright stand (``Memo.outright_of``: it reads only those, and its queue's shapes, which
        do not change in a pass), and read from the rest kept with the queue's index between
        passes (:func:`queue_rest`); callers only read it. Under ``ps.check`` compared with
        :meth:`_rest_fresh` at every read."""
        kept = self.ps.memo.outright_of
        got = kept.get(("rest", leaf), _UNREAD)
        if got is _UNREAD:
            got = kept[("rest", leaf)] = self._rest_kept(leaf)
        if self.ps.check and got != (fresh := self._rest_fresh(leaf)):
            raise AssertionError(f"kept rest of {leaf} at {self.ps.now}: {got} != {fresh}")
        return got  # type: ignore[no-any-return]

    def _rest_kept(self, leaf: str) -> Rest | None:
        """:meth:`_rest` read by :func:`queue_rest` from ``leaf``'s kept index."""
        bp = self._kept_list(leaf)
        if bp is None or bp.runs is None:
            return None
        return queue_rest(bp.runs, leaf, self.ps.state.largest, self.ps.memo.outright)

    def _rest_fresh(self, leaf: str) -> Rest | None:
        """:meth:`_rest` computed from the queue's shapes read in this pass (its oracle)."""
        shapes = self._shapes(leaf)
        return None if shapes is None else rest_of(shapes, self.ps.memo.outright)

    def _kept_list(self, leaf: str) -> BudgetPending | None:
        """``leaf``'s kept pending lists, where its queue in this dispatch is their allocated list."""
        grouped = self.ps.grouped
        bp = grouped.get(leaf) if grouped is not None else None
        return bp if bp is not None and self.disp.queues[leaf] is bp.allocated else None

    def _shapes(self, leaf: str) -> Shapes | None:
        """``leaf``'s whole queue per shape, its least M (``SkipIndex.least_all``), read once."""
        got = self.rests.get(leaf, _UNREAD)
        if got is not _UNREAD:
            return got
        bp = self._kept_list(leaf)
        out = None if bp is None or bp.runs is None else shapes_of(bp.runs, leaf, self.ps.state.largest)
        self.rests[leaf] = out
        return out


def shapes_of(runs: SkipIndex, leaf: str, largest: dict[str, int]) -> Shapes:
    """``leaf``'s whole queue (its index ``runs``) per shape with its least M (``SkipIndex.least_all``)."""
    return [
        ((leaf, model, cpus, memory, gpus > largest.get(model, 0)), gpus, m)
        for (model, gpus, cpus, memory), m in runs.least_all().items()
    ]


def rest_of(shapes: Shapes, outright: Outright) -> Rest:
    """Per :data:`RestKey` of ``shapes``, the fewest GPUs and the smallest commitment, leaving out
    the shapes that fail outright (:func:`_failed_outright`)."""
    out: Rest = {}
    for key, gpus, m in shapes:
        if outright and _failed_outright(outright, key, gpus, m):
            continue
        c = contract.commitment_of(gpus, m)
        slot = out.get(key)
        if slot is None:
            out[key] = [gpus, c]
        else:
            slot[0] = min(slot[0], gpus)
            slot[1] = min(slot[1], c)
    return out


def queue_rest(runs: SkipIndex, leaf: str, largest: dict[str, int], outright: Outright) -> Rest:
    """:func:`rest_of` ``leaf``'s whole queue (its index ``runs``): where no failure outright of
    ``leaf`` shares a :data:`RestKey` with the queue, nothing is left out, and the rest is the
    queue's own, kept on the index between passes (``SkipIndex.derived``, dropped at every
    arrival and departure; its key holds ``leaf`` and ``largest``, which decides gangs); else
    computed from the kept shapes. Its oracle: ``Tail._rest_fresh`` (``check``) and
    :func:`queue_rest_walk` (tests/policy/test_tail.py)."""
    kept = runs.derived
    if kept is None or kept[0] != leaf or kept[1] != largest:
        shapes = shapes_of(runs, leaf, largest)
        kept = runs.derived = (leaf, dict(largest), shapes, rest_of(shapes, {}))
    whole: Rest = kept[3]
    if outright and any((p, model, gang, cpus, memory) in outright for p, model, cpus, memory, gang in whole):
        return rest_of(kept[2], outright)
    return whole


def queue_rest_walk(queue: list[Workload], leaf: str, largest: dict[str, int], outright: Outright) -> Rest:
    """:func:`queue_rest` read from the queue's workloads one by one (no index)."""
    least: dict[tuple[RestKey, int], int] = {}
    for w in queue:
        key = ((leaf, w.model, w.cpus, w.memory, w.gpus > largest.get(w.model, 0)), w.gpus)
        least[key] = min(least.get(key, w.min_runtime), w.min_runtime)
    return rest_of([(key, gpus, m) for (key, gpus), m in least.items()], outright)


def _failed_outright(outright: Outright, key: RestKey, gpus: int, m: int) -> bool:
    """Every workload of the shape (``key``, ``gpus``) with M from ``m`` on fails outright as one
    the pass handled did: a failure of its (budget, model, gang, CPUs, memory) with no more GPUs
    and no longer M (``memo.outright``, what ``SkipRuns._skipped`` reads): it starts, preempts and
    reserves nothing. Room only shrinks and loads hold between decisions, so that stands."""
    p, model, cpus, memory, gang = key
    return any(gpus >= f_n and m >= f_m for f_n, f_m in outright.get((p, model, gang, cpus, memory), ()))


def requests(ps: SkipRuns, rest: Rest) -> Requests:
    """The screen's :class:`Requests` of ``rest``."""
    out = Requests({}, {}, {})
    largest = ps.state.largest
    for (budget, model, _, _, gang), (n, c) in rest.items():
        slot = out.want.get((budget, model))
        if slot is None:
            slot = out.want[(budget, model)] = [NONE, NONE, c]
        if gang:
            k = n // largest[model]
            out.gang[model] = min(out.gang.get(model, NONE), k)
            slot[1] = min(slot[1], k)
        else:
            out.single[model] = min(out.single.get(model, NONE), n)
            slot[0] = min(slot[0], n)
        slot[2] = min(slot[2], c)
    return out


def _may_reserve(ps: SkipRuns, rest: Rest) -> bool:
    """Some workload of ``rest`` may get a reservation (module docstring): not when a search
    of the pass already failed for one with no more room (``PassState.failed_at``)."""
    if len(ps.reserving) >= ps.snap.max_reservations:
        return False
    for (p, model, cpus, memory, gang), (n, c) in rest.items():
        allowed = ps.allowed_at(p, c)
        if ps.failed_at("rg" if gang else "r", (model, n, cpus, memory), 0, allowed):
            continue
        if gang:
            if _gang_hosts(ps, model, allowed) >= n // ps.state.largest[model]:
                return True
        elif _single_host(ps, model, n, allowed):
            return True
    return False


def _single_host(ps: SkipRuns, model: str, n: int, allowed: frozenset[str]) -> bool:
    """Some active host not reserved that :func:`reserve.ruled_out` keeps for ``n`` GPUs, read
    from the kept rooms (:func:`reserve.bound_rooms`); under ``ps.check`` compared with the walk."""
    reserved = ps.reserved
    got = any(r >= n and h not in reserved for h, r in bound_rooms(ps, model, allowed).items())
    if ps.check and got != any(
        hv.active and hv.name not in reserved and not ruled_out(ps, n, hv, allowed)
        for hv in bound_hosts(ps, model, n, allowed)
    ):
        raise AssertionError(f"kept bound rooms for {model} at {ps.now} answer {got}, the walk does not")
    return got


def bound_rooms(ps: SkipRuns, model: str, allowed: frozenset[str]) -> dict[str, int]:
    """Per host of ``model``, the room :func:`reserve.ruled_out` bounds (healthy GPUs less allocated
    work, plus the allowed budgets' work: ruled out for ``n`` GPUs exactly when below ``n``;
    -1 for an inactive host). Kept between passes per (model, allowed budgets) in
    ``Standing.bound_rooms`` with the log mark: hosts bumped since are read again."""
    key = (model, allowed)
    st, standing = ps.state, ps.standing
    rooms, since = st.kept_per_host(
        standing.bound_rooms,
        key,
        lambda: {hv.name: _bound_room(ps, hv, allowed) for hv in standing.hosts_by_model.get(model, ())},
    )
    for h in since or ():
        if h in rooms:
            rooms[h] = _bound_room(ps, st.hosts[h], allowed)
    return rooms


def _bound_room(ps: SkipRuns, hv: HostView, allowed: frozenset[str]) -> int:
    if not hv.active:
        return -1
    per = ps.standing.agg.get(hv.name)
    work = allowed_work(per, allowed) if allowed and per else 0
    return len(hv.healthy) - ps.standing.agg_held.get(hv.name, 0) + work


def _gang_hosts(ps: SkipRuns, model: str, allowed: frozenset[str]) -> int:
    """Whole hosts of ``model`` not reserved whose allocated work is all of ``allowed`` budgets:
    at least the hosts ``reserve._earliest_gang`` can find vacated at some instant. Read from the
    whole healthy hosts of the size (``gang_victims.gang_hosts_of``, kept in the standing) and
    kept in the pass's memo until the state changes (the key holds the reservations' count:
    they only grow); under ``ps.check`` compared with :func:`_gang_hosts_walk`."""
    key = (model, allowed, len(ps.reserved))
    got = ps.memo.tail_gang.get(key)
    if got is None:
        size = ps.state.largest.get(model, 0)
        agg, reserved, empty = ps.standing.agg, ps.reserved, _NO_WORK
        got = ps.memo.tail_gang[key] = sum(
            1
            for name in gang_hosts_of(ps.standing, model, size)
            if name not in reserved and agg.get(name, empty).keys() <= allowed
        )
    if ps.check and got != (walked := _gang_hosts_walk(ps, model, allowed)):
        raise AssertionError(f"whole hosts for a gang of {model} at {ps.now}: {got} != {walked}")
    return got


_NO_WORK: dict[str, list[int]] = {}


def _gang_hosts_walk(ps: SkipRuns, model: str, allowed: frozenset[str]) -> int:
    """:func:`_gang_hosts` by walking every host of the model (its oracle)."""
    size = ps.state.largest.get(model, 0)
    agg, reserved = ps.standing.agg, ps.reserved
    return sum(
        1
        for hv in ps.standing.hosts_by_model.get(model, ())
        if hv.active
        and hv.all_healthy
        and hv.size == size
        and hv.name not in reserved
        and all(v in allowed for v in agg.get(hv.name, ()))
    )
