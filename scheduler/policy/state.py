"""Mutable per-pass view of a cluster: who holds which GPU, what is free, best-fit indexes.

Internal to the policy. Free GPUs are healthy GPUs on ``active`` hosts that no
open attempt holds and that are not nominated; they are indexed per GPU model by
free count so best fit (DESIGN.md §3.3) is found without scanning every host.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import scheduler.policy.resources as resources
from scheduler.policy.types import Attempt, GpuHealth, GpuRef, Host, HostState, Workload

K = TypeVar("K")
V = TypeVar("V")
KEPT_LIMIT = 4096
"""The most keys a store of :meth:`ClusterState.kept_per_host` holds before it starts over."""

_LOG_KEPT = 1 << 16
"""Bumps the log of :meth:`ClusterState.bump` holds before it starts over (older marks read all)."""


@dataclass(slots=True)
class HostView:
    """A host as the policy sees it during one pass."""

    host: Host
    name: str
    model: str
    size: int
    fabric: str
    active: bool
    all_healthy: bool
    healthy: frozenset[int]
    free: list[int] = field(default_factory=list)  # sorted free GPU indices (general use)
    attempts: list[str] = field(default_factory=list)  # open attempt ids touching this host
    unalloc: int = 0  # healthy GPUs held by unallocated attempts that are not stopping
    stopping: int = 0  # open attempts on the host that are leaving (stop issued)
    used: list[int] = field(default_factory=lambda: [0, 0])  # CPUs, memory its open attempts request
    over_share: int = 0  # open attempts asking more than their per-GPU share (resources.only_gpus)


@dataclass(slots=True)
class AttemptView:
    """An open attempt plus the per-pass ``stopping`` flag."""

    attempt: Attempt
    stopping: bool
    hosts: tuple[str, ...]
    on_host: dict[str, int] = field(default_factory=dict)  # healthy GPUs held on each host
    protected: bool = False
    res: dict[str, resources.Res] = field(default_factory=dict)  # CPUs, memory requested on each host


class ClusterState:
    """GPU ownership, free lists and best-fit buckets for one pass."""

    def __init__(
        self, hosts: list[Host], attempts: list[Attempt], nominations: dict[str, tuple[GpuRef, ...]], now: int = 0
    ):
        self.now = now
        self.listeners: list[Callable[[str], None]] = []
        self.version: dict[str, int] = {}  # host -> bumped by every change of its GPUs, work or nominations
        # every bump's host in order (bump): readers keep a mark and read what changed since
        self._log: list[str] = []
        self._log_base = 0  # marks before it are no longer in the log (changed_since: None)
        self._last: dict[str, int] = {}  # host -> the position of its last bump (changed_since)
        self.malformed = False
        """Set when two open attempts claimed one GPU or one id: only a fresh build says what a pass sees."""
        self.pass_changed: dict[str, bool] = {}
        """Attempt ids the pass changed since the last sync: True for one it started
        (:meth:`assign`), False for one it marked leaving (:meth:`mark_stopping`); what
        :meth:`Standing.sync <scheduler.policy.standing.Standing.sync>` reads beside the
        producer's changes when it follows them."""
        self.hosts: dict[str, HostView] = {}
        self.owner: dict[GpuRef, str] = {}
        self.nominated: dict[GpuRef, str] = {}
        self.nominees: dict[str, dict[str, int]] = {}  # host -> nominee -> GPUs nominated there
        self.attempts: dict[str, AttemptView] = {}
        for h in sorted(hosts, key=lambda h: h.name):
            healthy = frozenset(i for i, g in h.gpu_health.items() if g != GpuHealth.UNHEALTHY)
            self.hosts[h.name] = HostView(
                host=h,
                name=h.name,
                model=h.model,
                size=h.size,
                fabric=str(h.labels.get("fabric", "")),
                active=h.state == HostState.ACTIVE,
                all_healthy=len(healthy) == h.size,
                healthy=healthy,
            )
        for a in sorted(attempts, key=lambda a: a.id):
            self._add_attempt(a)
        for wid, gpus in nominations.items():
            for g in gpus:
                self.nominate_one(g, wid)
        # model -> free count -> sorted host names (active hosts with >= 1 free GPU)
        self.buckets: dict[str, dict[int, list[str]]] = {}
        self.largest: dict[str, int] = {}  # model -> largest host size (registered hosts)
        self.models: set[str] = set()
        for hv in self.hosts.values():
            self.models.add(hv.model)
            self.largest[hv.model] = max(self.largest.get(hv.model, 0), hv.size)
            if hv.active:
                hv.free = sorted(
                    i for i in hv.healthy if (hv.name, i) not in self.owner and (hv.name, i) not in self.nominated
                )
                self._bucket_add(hv)

    # -- best-fit index -------------------------------------------------------
    def _bucket_add(self, hv: HostView) -> None:
        if hv.active and hv.free:
            insort(self.buckets.setdefault(hv.model, {}).setdefault(len(hv.free), []), hv.name)

    def _bucket_remove(self, hv: HostView) -> None:
        if hv.active and hv.free:
            lst = self.buckets[hv.model][len(hv.free)]
            del lst[bisect_left(lst, hv.name)]

    def best_fit(self, w: Workload, allowed: Callable[[str], bool] | None = None) -> str | None:
        """The host with the fewest free GPUs that still fits ``w`` (its CPUs and memory too,
        :meth:`fits`); ties by host name.

        ``allowed`` filters hosts (reservations); None allows all.
        """
        buckets = self.buckets.get(w.model)
        if not buckets:
            return None
        n = w.gpus
        hosts = self.hosts
        for count in sorted(c for c in buckets if c >= n):
            for name in buckets[count]:
                if (allowed is None or allowed(name)) and self.fits(hosts[name], w, n):
                    return name
        return None

    def whole_free_hosts(self, model: str, size: int) -> list[str]:
        """Active hosts of ``model`` and ``size`` whose every GPU is healthy and free."""
        return list(self.buckets.get(model, {}).get(size, []))

    def bump(self, host: str) -> None:
        """The host changed (its GPUs, work, nominations or protections): a new version, logged."""
        self.version[host] = self.version.get(host, 0) + 1
        log = self._log
        self._last[host] = self._log_base + len(log)
        log.append(host)
        if len(log) > _LOG_KEPT:
            self._log_base += len(log)
            log.clear()

    def mark(self) -> int:
        """A position in the log of bumps: :meth:`changed_since` it names the hosts bumped after."""
        return self._log_base + len(self._log)

    def changed_since(self, mark: int) -> set[str] | None:
        """The hosts bumped since ``mark`` (:meth:`mark`); None when the log no longer reaches
        back that far (the reader reads every host). Versions only grow, so a host not named
        has the version it had at ``mark``. A stretch longer than the hosts ever bumped is read
        from each host's last bump instead (the same set: a host was bumped after ``mark``
        exactly when its last bump was); its oracle is :meth:`changed_since_walk`."""
        i = mark - self._log_base
        if i < 0:
            return None
        if len(self._log) - i > len(self._last):
            return {h for h, at in self._last.items() if at >= mark}
        return set(self._log[i:]) if i < len(self._log) else set()

    def changed_since_walk(self, mark: int) -> set[str] | None:
        """:meth:`changed_since` read from every bump in the log since ``mark`` (its oracle)."""
        i = mark - self._log_base
        return None if i < 0 else set(self._log[i:])

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        if "_last" not in state:  # pickled before the last bumps were kept: the log has them
            self._last = {h: self._log_base + k for k, h in enumerate(self._log)}

    def kept_per_host(
        self,
        store: dict[K, tuple[int, dict[str, V]]],
        key: K,
        build: Callable[[], dict[str, V]],
    ) -> tuple[dict[str, V], set[str] | None]:
        """A per-host answer kept between passes in ``store`` under ``key`` with the log mark of
        its reading: the kept answer and the hosts bumped since (the caller reads those again,
        in place), or, when nothing is kept or the log no longer reaches back, ``build()`` and
        None. ``store`` is bounded: past ``KEPT_LIMIT`` keys it starts over."""
        kept = store.get(key)
        since = None if kept is None else self.changed_since(kept[0])
        if kept is not None and since is not None:
            values = kept[1]
        else:
            values = build()
            if len(store) > KEPT_LIMIT:
                store.clear()  # a bound on what is kept (the keys' allowed sets vary)
        store[key] = (self.mark(), values)
        return values, since

    def _touch(self, host: str) -> None:
        self.bump(host)
        for listener in self.listeners:
            listener(host)

    def take(self, host: str, indices: list[int]) -> None:
        """Remove ``indices`` from the host's free list (they are being assigned).

        Listeners are told after the change: an index told before would read the old free list
        and keep a stale victim set (a nomination smaller than its workload, §3.4 rule 3).
        """
        hv = self.hosts[host]
        self._bucket_remove(hv)
        s = set(indices)
        hv.free = [i for i in hv.free if i not in s]
        self._bucket_add(hv)
        self._touch(host)

    def give_back(self, host: str, indices: list[int]) -> None:
        """Return ``indices`` to the host's free list."""
        hv = self.hosts[host]
        self._bucket_remove(hv)
        hv.free = sorted(set(hv.free) | set(indices))
        self._bucket_add(hv)
        self._touch(host)

    # -- attempts -------------------------------------------------------------
    def _add_attempt(self, a: Attempt, ordered: bool = False) -> AttemptView:
        hosts_of = tuple(sorted({g[0] for g in a.gpus}))
        on_host: dict[str, int] = {}
        for h, i in a.gpus:
            hv = self.hosts.get(h)
            if hv is not None and i in hv.healthy:
                on_host[h] = on_host.get(h, 0) + 1
        av = AttemptView(a, a.stopping, hosts_of, on_host, a.protected_at(self.now))
        self._add_res(av, 1)
        if a.id in self.attempts:
            self.malformed = True
        self.attempts[a.id] = av
        owner = self.owner
        for g in a.gpus:
            if g in owner:
                self.malformed = True
            owner[g] = a.id
        for hn in hosts_of:
            hv = self.hosts.get(hn)
            if hv is not None:
                if ordered:
                    insort(hv.attempts, a.id)
                else:
                    hv.attempts.append(a.id)
                if not a.allocated and not a.stopping:
                    hv.unalloc += on_host.get(hn, 0)
                if a.stopping:
                    hv.stopping += 1
                self._touch(hn)
        return av

    def _add_res(self, av: AttemptView, sign: int) -> None:
        """Count (``sign`` 1) or uncount (-1) the CPUs and memory the attempt requests on its hosts."""
        a = av.attempt
        for hn in av.hosts:
            hv = self.hosts.get(hn)
            if hv is None:
                continue
            h = hv.host
            if h.cpus is None and h.memory is None:
                continue  # no constraint to count against
            held = sum(1 for g in a.gpus if g[0] == hn)
            r = av.res.get(hn)
            if r is None:
                r = av.res[hn] = resources.need(h, held, a.cpus, a.memory)
            hv.used[0] += sign * r[0]
            hv.used[1] += sign * r[1]
            if not resources.within_share(h, held, a.cpus, a.memory):
                hv.over_share += sign

    def fabric(self, host: str) -> str:
        """``host``'s fabric (a :class:`~scheduler.policy.contract.KeyContext`'s reader: a method,
        not a lambda, so that a kept index pickles with any pickler)."""
        return self.hosts[host].fabric

    def only_gpus(self, hv: HostView, w: Workload, gpus: int) -> bool:
        """True when on ``hv`` only GPUs can bind ``w`` holding ``gpus`` GPUs there: no open attempt
        asks more than its share and ``w`` asks no more than its own (resources module)."""
        return hv.over_share == 0 and resources.within_share(hv.host, gpus, w.cpus, w.memory)

    def fits(self, hv: HostView, w: Workload, gpus: int, freed: resources.Res = resources.NONE) -> bool:
        """True when CPUs and memory on ``hv`` suffice for ``w`` holding ``gpus`` GPUs there, with
        ``freed`` given back by victims (:func:`resources.fits`)."""
        h = hv.host
        if h.cpus is None and h.memory is None:
            return True
        used = (hv.used[0] - freed[0], hv.used[1] - freed[1])
        return resources.fits(h, used, resources.need(h, gpus, w.cpus, w.memory))

    def nomination_fits(self, w: Workload, nom: tuple[GpuRef, ...]) -> bool:
        """CPUs and memory on every host of the nomination ``nom`` suffice for ``w`` now (§3.3)."""
        per: dict[str, int] = {}
        for h, _ in nom:
            per[h] = per.get(h, 0) + 1
        return all(self.fits(self.hosts[h], w, n) for h, n in per.items())

    def assign(self, attempt: Attempt) -> None:
        """Record a new (starting) attempt holding its GPUs (already taken from the free lists)."""
        self._add_attempt(attempt, ordered=True)
        self.pass_changed[attempt.id] = True

    # -- between passes (scheduler.policy.standing) ---------------------------
    def insert_attempt(self, a: Attempt) -> AttemptView:
        """Add an open attempt of a new snapshot, keeping each host's attempt list in id order
        (as a fresh build has it). Free lists are the caller's business (:meth:`refresh_free`)."""
        return self._add_attempt(a, ordered=True)

    def remove_attempt(self, aid: str) -> AttemptView:
        """Forget an open attempt: the exact inverse of adding it (and of marking it stopping).
        Free lists are the caller's business (:meth:`refresh_free`). Raises KeyError if unknown."""
        av = self.attempts.pop(aid)
        a = av.attempt
        self._add_res(av, -1)
        for g in a.gpus:
            if self.owner.get(g) == aid:
                del self.owner[g]
        for hn in av.hosts:
            hv = self.hosts.get(hn)
            if hv is not None:
                lst = hv.attempts
                del lst[lst.index(aid)]
                if not a.allocated and not av.stopping:
                    hv.unalloc -= av.on_host.get(hn, 0)
                if av.stopping:
                    hv.stopping -= 1
                self._touch(hn)
        return av

    def refresh_free(self, host: str) -> None:
        """Recompute the host's free list from ownership and nominations (as a fresh build does)."""
        hv = self.hosts[host]
        if not hv.active:
            return
        name = hv.name
        owner = self.owner
        nominated = self.nominated
        free = sorted(i for i in hv.healthy if (name, i) not in owner and (name, i) not in nominated)
        if free != hv.free:
            self._bucket_remove(hv)
            hv.free = free
            self._bucket_add(hv)
            self._touch(host)

    def mark_stopping(self, av: AttemptView) -> None:
        """The attempt is leaving: it no longer counts as unallocated room."""
        self.pass_changed.setdefault(av.attempt.id, False)
        if not av.stopping and not av.attempt.allocated:
            for hn, n in av.on_host.items():
                self.hosts[hn].unalloc -= n
        if not av.stopping:
            for hn in av.hosts:
                if hn in self.hosts:
                    self.hosts[hn].stopping += 1
        av.stopping = True
        for hn in av.hosts:
            if hn in self.hosts:
                self._touch(hn)

    def nominate(self, workload: str, gpus: tuple[GpuRef, ...]) -> None:
        """Nominate ``gpus`` for ``workload``: they leave the general free lists."""
        by_host: dict[str, list[int]] = {}
        for g in gpus:
            self.nominate_one(g, workload)
            by_host.setdefault(g[0], []).append(g[1])
        for hn, idx in by_host.items():
            hv = self.hosts[hn]
            if any(i in hv.free for i in idx):
                self.take(hn, [i for i in idx if i in hv.free])

    def release_nomination(self, workload: str, gpus: tuple[GpuRef, ...]) -> None:
        """Drop ``workload``'s nomination; GPUs that are free return to the free lists."""
        by_host: dict[str, list[int]] = {}
        for g in gpus:
            if self.nominated.get(g) == workload:
                self.unnominate(g)
                hv = self.hosts.get(g[0])
                if hv is not None and hv.active and g[1] in hv.healthy and g not in self.owner:
                    by_host.setdefault(g[0], []).append(g[1])
        for hn, idx in by_host.items():
            self.give_back(hn, idx)

    def nominate_one(self, g: GpuRef, workload: str) -> None:
        """Record one nominated GPU (free lists are the caller's business)."""
        self.nominated[g] = workload
        per = self.nominees.setdefault(g[0], {})
        per[workload] = per.get(workload, 0) + 1
        self.bump(g[0])

    def unnominate(self, g: GpuRef) -> None:
        """Forget the nomination of one GPU (free lists are the caller's business)."""
        wid = self.nominated.pop(g, None)
        if wid is not None:
            self.bump(g[0])
            per = self.nominees[g[0]]
            per[wid] -= 1
            if not per[wid]:
                del per[wid]

    def nominated_for_other(self, host: str, workload: str) -> bool:
        """True when some GPU of ``host`` is nominated for a workload other than ``workload``."""
        return any(wid != workload for wid in self.nominees.get(host, ()))

    def gpu_usable(self, g: GpuRef) -> bool:
        """True for a healthy GPU on an active host."""
        hv = self.hosts.get(g[0])
        return hv is not None and hv.active and g[1] in hv.healthy
