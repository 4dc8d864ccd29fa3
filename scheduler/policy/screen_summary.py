"""What the idle screen (``screen.py``) reads, kept between passes: the host walk
(:class:`Summary`, one :data:`Part` per active host; :class:`KeptSummary` by host version) and the
pending shapes (:class:`Requests`: the smallest requests per model and the preemption wants per
(budget, model); :class:`KeptRequests` while the shapes, the tree and the hosts are the same)."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import scheduler.policy.contract as contract
from scheduler.policy.standing import Standing
from scheduler.policy.state import HostView
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import HostState, OnCap, Workload

NONE = 1 << 30  # "no such request" for the smallest size of a budget's pending work

Want = dict[tuple[str, str], list[int]]
"""(budget, model) -> [smallest single-host request, smallest gang in hosts, smallest commitment]."""


def fold(slot: list[int], k: int, c: int) -> None:
    """One allocated workload into its :data:`Want` entry: ``k`` hosts for a gang (0: its GPUs
    on one host, already in ``slot[0]`` by the caller's choice), commitment ``c``."""
    if k < 0:
        slot[0] = min(slot[0], -k)
    else:
        slot[1] = min(slot[1], k)
    slot[2] = min(slot[2], c)


ANY = -(1 << 62)
"""A least M that no scheduled drain refuses (unallocated or downgraded work may start on a host
whatever its drain: ``PassState.drain_allows``); ``now + ANY`` is below every drain's instant."""

DrainRow = tuple[int, str, int, int, bool, bool]
"""One active host with a drain scheduled, in a :class:`DrainTable`: its drain's instant, name,
free GPUs, free + unallocated GPUs, whole and free, whole and vacatable now."""


@dataclass(slots=True)
class DrainTable:
    """The active hosts of one model with a drain scheduled, latest drain first (then by name), as
    prefix figures: entry ``i`` covers the first ``i`` hosts (the most free GPUs on one of them,
    whole free ones, the most free + unallocated GPUs, whole vacatable ones). The hosts an
    allocated workload of minimum runtime M may start on now are those whose drain is at
    ``now + M`` or later (``PassState.drain_allows``): a prefix, found by bisection (est61)."""

    keys: list[int] = field(default_factory=list)  # -instant, ascending
    most_free: list[int] = field(default_factory=lambda: [0])
    whole_free: list[int] = field(default_factory=lambda: [0])
    most_base: list[int] = field(default_factory=lambda: [0])
    vacatable_base: list[int] = field(default_factory=lambda: [0])

    @classmethod
    def of(cls, rows: Iterable[DrainRow]) -> DrainTable:
        out = cls()
        for at, _, f, room, whole_free, vacatable in sorted(rows, key=lambda r: (-r[0], r[1])):
            out.keys.append(-at)
            out.most_free.append(max(out.most_free[-1], f))
            out.whole_free.append(out.whole_free[-1] + whole_free)
            out.most_base.append(max(out.most_base[-1], room))
            out.vacatable_base.append(out.vacatable_base[-1] + vacatable)
        return out

    def upto(self, lo: int) -> int:
        """How many hosts' drains are at ``lo`` or later (the prefix index)."""
        return bisect_right(self.keys, -lo)


@dataclass(slots=True)
class Summary:
    """Per model, over the active hosts without a scheduled drain: the most free GPUs on one host,
    whole free hosts, the most free + unallocated GPUs on one host, whole hosts holding only those;
    the active hosts with one per model in ``drained`` (:class:`DrainTable`, read through
    :meth:`open`); hosts never vacated whole now (all active hosts)."""

    most_free: dict[str, int] = field(default_factory=dict)
    whole_free: dict[str, int] = field(default_factory=dict)
    most_base: dict[str, int] = field(default_factory=dict)
    vacatable_base: dict[str, int] = field(default_factory=dict)
    blocked: set[str] = field(default_factory=set)  # hosts with leaving or protected work
    drained: dict[str, DrainTable] = field(default_factory=dict)

    def open(self, model: str, lo: int) -> tuple[int, int, int, int]:
        """The summary's four figures of ``model`` (most free, whole free, most base, vacatable)
        over the hosts work may start on now with no drain at or after ``lo`` refusing it: every
        host without a scheduled drain and those whose drain is at ``lo`` or later (``lo`` =
        ``now + M`` for allocated work of minimum runtime M, ``now + ANY`` for any work)."""
        free, whole, base, vac = (
            self.most_free.get(model, 0),
            self.whole_free.get(model, 0),
            self.most_base.get(model, 0),
            self.vacatable_base.get(model, 0),
        )
        t = self.drained.get(model)
        if t is None:
            return free, whole, base, vac
        i = t.upto(lo)
        return max(free, t.most_free[i]), whole + t.whole_free[i], max(base, t.most_base[i]), vac + t.vacatable_base[i]


Part = tuple[str, int, int, bool, bool, bool, int | None]
"""What one active host adds to a :class:`Summary`: model, free GPUs, free + unallocated GPUs,
whole and free, whole and vacatable now, blocked (leaving or protected work), its scheduled
drain's instant (None: none)."""


def host_part(standing: Standing, hv: HostView) -> Part | None:
    """One host's entry of the summary (None: not active)."""
    if not hv.active:
        return None
    per = standing.agg.get(hv.name)
    blocked = bool(hv.stopping) or (per is not None and any(c[1] for c in per.values()))
    f = len(hv.free)
    room = f + hv.unalloc  # free GPUs and unallocated work: room now for any allocated workload
    whole = hv.all_healthy and hv.size == standing.state.largest[hv.model]
    drain = standing.drains.get(hv.name) if standing.drains else None
    return hv.model, f, room, whole and f == hv.size, whole and room == hv.size and not blocked, blocked, drain


def summary_of(standing: Standing) -> Summary:
    out = Summary()
    drained: dict[str, list[DrainRow]] = {}
    for hv in standing.state.hosts.values():
        part = host_part(standing, hv)
        if part is None:
            continue
        m, f, room, whole_free, vacatable, blocked, drain = part
        if blocked:
            out.blocked.add(hv.name)
        if drain is not None:
            drained.setdefault(m, []).append((drain, hv.name, f, room, whole_free, vacatable))
            continue
        if f > out.most_free.get(m, 0):
            out.most_free[m] = f
        if room > out.most_base.get(m, 0):
            out.most_base[m] = room
        if whole_free:
            out.whole_free[m] = out.whole_free.get(m, 0) + 1
        if vacatable:
            out.vacatable_base[m] = out.vacatable_base.get(m, 0) + 1
    out.drained = {m: DrainTable.of(rows) for m, rows in drained.items()}
    return out


_UNSEEN: tuple[int, None] = (-1, None)


class KeptSummary:
    """:func:`summary_of` kept between the passes of one kept standing: each host's :func:`host_part`
    by host version, folded into counts per model (how many hosts have each number of free GPUs,
    of free + unallocated GPUs; whole free and vacatable hosts; blocked hosts). A standing built
    afresh (another :class:`ClusterState`) starts it over. ``IncrementalScheduler(check=True)``
    compares it with :func:`summary_of` at every pass."""

    def __init__(self) -> None:
        self._state: object = None
        self._reset()

    def _reset(self) -> None:
        self._mark = 0  # ClusterState.mark() when last read
        self._summary: Summary | None = None  # the summary of that reading
        self._seen: dict[str, tuple[int, Part | None]] = {}
        self._free: dict[str, Counter[int]] = {}
        self._room: dict[str, Counter[int]] = {}
        self._whole: Counter[str] = Counter()
        self._vacatable: Counter[str] = Counter()
        self._blocked: set[str] = set()
        self._drained: dict[str, dict[str, DrainRow]] = {}  # model -> host -> its row
        self._tables: dict[str, DrainTable] = {}
        self._stale: set[str] = set()  # models whose drained rows moved since their table

    def of(self, standing: Standing) -> Summary:
        st = standing.state
        if self._state is not st:
            self._reset()  # a new standing: every host anew
            self._state = st
        seen, hosts = self._seen, st.hosts
        since = st.changed_since(self._mark) if seen else None
        changed: Iterable[str]
        if since is not None:
            changed = since  # the hosts bumped since the last reading (the log)
        elif not seen:
            changed = hosts
        else:  # a host never bumped (absent from ``version``) is as it was built
            changed = [name for name, v in st.version.items() if seen.get(name, _UNSEEN)[0] != v]
        self._mark = st.mark()
        if since is not None and not since and self._summary is not None:
            return self._summary  # no host moved since the last reading (readers only read it)
        for name in changed:
            hv = hosts.get(name)
            if hv is None:
                continue  # a nominated GPU of a host not in the snapshot: no part of the summary
            old = seen.get(name)
            if old is not None and old[1] is not None:
                self._count(name, old[1], -1)
            part = host_part(standing, hv)
            seen[name] = (st.version.get(name, 0), part)
            if part is not None:
                self._count(name, part, 1)
        for m in self._stale:
            rows = self._drained.get(m)
            if rows:
                self._tables[m] = DrainTable.of(rows.values())
            else:
                self._tables.pop(m, None)
        self._stale.clear()
        self._summary = Summary(
            most_free={m: k for m, c in self._free.items() if (k := max((k for k, n in c.items() if n), default=0))},
            whole_free={m: n for m, n in self._whole.items() if n},
            most_base={m: k for m, c in self._room.items() if (k := max((k for k, n in c.items() if n), default=0))},
            vacatable_base={m: n for m, n in self._vacatable.items() if n},
            blocked=set(self._blocked),
            drained=dict(self._tables),
        )
        return self._summary

    def _count(self, name: str, part: Part, sign: int) -> None:
        m, f, room, whole_free, vacatable, blocked, drain = part
        if blocked:
            if sign > 0:
                self._blocked.add(name)
            else:
                self._blocked.discard(name)
        if drain is not None:  # in its model's drain table, rebuilt once read again
            rows = self._drained.setdefault(m, {})
            if sign > 0:
                rows[name] = (drain, name, f, room, whole_free, vacatable)
            else:
                rows.pop(name, None)
            self._stale.add(m)
            return
        self._free.setdefault(m, Counter())[f] += sign
        self._room.setdefault(m, Counter())[room] += sign
        self._whole[m] += sign * whole_free
        self._vacatable[m] += sign * vacatable


@dataclass(slots=True)
class Requests:
    """What the screen reads of the pending shapes: :data:`Want` per (budget, model) of allocated
    work that may preempt, and per model the smallest single-host request and the smallest gang
    (in hosts) of any workload that may start (unallocated and downgraded work included)."""

    want: Want
    single: dict[str, int]
    gang: dict[str, int]
    least_m: dict[str, int] = field(default_factory=dict)
    """Per model, the least M of the work in ``single`` and ``gang`` as a scheduled drain reads it
    (:data:`ANY` when some of it is unallocated or downgraded: no drain refuses that)."""
    want_m: dict[tuple[str, str], int] = field(default_factory=dict)
    """Per :data:`Want` key, the least M of the work read into it."""
    slots: dict[tuple[str, str], list[tuple[Workload, int, int]]] = field(default_factory=dict, compare=False)
    """Per :data:`Want` key, the shapes read into it: (workload, ``-gpus`` for one host or the
    gang's hosts, commitment); :func:`want_without_nominees` folds them again without some."""

    def fit(self, summary: Summary, now: int) -> bool:
        """Some pending workload fits the free GPUs now (one host, or whole free hosts), on hosts
        no scheduled drain refuses it (the least M of its model: :meth:`Summary.open`)."""
        least = self.least_m
        for m, n in self.single.items():
            if summary.open(m, now + least.get(m, ANY))[0] >= n:
                return True
        return any(summary.open(m, now + least.get(m, ANY))[1] >= k for m, k in self.gang.items())


def requests_of(standing: Standing, pending: Iterable[Workload], tree: BudgetTree) -> Requests:
    """:class:`Requests` of ``pending``: a pure function of their shapes, the tree and the hosts."""
    largest = standing.state.largest
    out = Requests({}, {}, {})
    want, single, gang, slots, least_m, want_m = out.want, out.single, out.gang, out.slots, out.least_m, out.want_m
    for w in pending:
        if w.budget not in tree.budgets or tree.held(w.budget):
            continue
        if standing.unschedulable(w.model, w.gpus, w.cpus, w.memory):
            continue  # the pass only gives it a reason
        big = largest[w.model]
        capper = tree.capped_by(w.budget) if w.allocated else None
        if capper is not None and capper.on_cap == OnCap.HOLD:
            continue
        if w.gpus <= big:
            single[w.model] = min(single.get(w.model, NONE), w.gpus)
            k = 0
        else:
            k = w.gpus // big
            gang[w.model] = min(gang.get(w.model, NONE), k)
        if not w.allocated or capper is not None:
            least_m[w.model] = ANY  # no scheduled drain refuses it
            continue  # unallocated (or downgraded) work never preempts (rule 4)
        m = w.min_runtime
        least_m[w.model] = min(least_m.get(w.model, m), m)
        c = contract.commitment(w)
        size = k if k else -w.gpus
        key = (w.budget, w.model)
        fold(want.setdefault(key, [NONE, NONE, c]), size, c)
        want_m[key] = min(want_m.get(key, m), m)
        slots.setdefault(key, []).append((w, size, c))
    return out


class KeptRequests:
    """:func:`requests_of` kept while the pending shapes (a key the caller gives:
    ``PendingIndex.least_version``, bumped at every change of the least M per coarse shape), the
    tree and the standing's hosts are the same."""

    def __init__(self) -> None:
        self._key: tuple[object, object, object] | None = None
        self._value: Requests | None = None

    def of(self, key: object, standing: Standing, pending: Iterable[Workload], tree: BudgetTree) -> Requests:
        last = self._key
        if (
            self._value is None
            or last is None
            or last[1] is not tree
            or last[2] is not standing.state
            or last[0] != key
        ):
            self._value = requests_of(standing, pending, tree)
            self._key = (key, tree, standing.state)
        return self._value


def drain_acts(standing: Standing) -> bool:
    """A draining host the pass changes (``Pass._faults_and_drains`` and the drained hosts of
    ``Pass.run``): one with a non-leaving attempt it stops (a drain now, or work unprotected now),
    or with no attempt at all (it turns drained). A draining host whose every attempt is protected
    or leaving is, for the rest of the pass, a host that is not active, as a cordoned one (perf59:
    the estimates' passes after a scheduled drain stay screened). Reads the draining hosts alone
    (``Standing.draining_hosts``, est61: the walk over every host was 11 % of the forward
    simulation with half the hosts given a drain)."""
    st, now = standing.state, standing.now
    names = standing.draining_hosts
    views = st.hosts.values() if names is None else (st.hosts[n] for n in names)
    for hv in views:
        if hv.host.state != HostState.DRAINING:
            continue
        if not hv.attempts:
            return True
        drain_now = hv.host.drain_now
        for aid in hv.attempts:
            av = st.attempts[aid]
            if not av.stopping and (drain_now or not av.attempt.protected_at(now)):
                return True
    return False


def fault_due(standing: Standing) -> bool:
    """A non-leaving attempt on an unhealthy GPU: a fault stop is due."""
    st = standing.state
    for name in standing.sick:
        hv = st.hosts[name]
        for aid in hv.attempts:
            av = st.attempts[aid]
            if not av.stopping and any(h == name and i not in hv.healthy for h, i in av.attempt.gpus):
                return True
    return False
