"""Index of the best sets of unallocated victims, per (GPU model, GPUs needed).

A set without allocated victims beats every set with one (§3.4, first criterion), and among
such sets the victim key (:func:`contract.victim_key`) does not depend on the preemptor:
unallocated work has no fair-share side (docs/policy.md). One heap per (model, n) therefore
serves every preemptor with default CPU and memory requests (a host's share of ``n`` GPUs);
hosts whose state changes push a fresh entry when the heap is next read (versioned, stale
entries are skipped), keeping a reclaim search at O(log hosts) instead of a scan of the cluster. Used
only while :func:`contract.counts_lead` holds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from fractions import Fraction

import scheduler.policy.contract as contract
from scheduler.policy.contract import KeyContext
from scheduler.policy.resources import NONE
from scheduler.policy.state import AttemptView, ClusterState, HostView
from scheduler.policy.types import Workload

_DEFAULT = Workload("", "", 0, "", 0, 0, 0)
"""A workload with default requests (only its CPU and memory requests are read)."""

Entry = tuple[tuple[object, ...], int, str]
"""(victim key, host version, host)."""


def _no_side(budget: str) -> Fraction:  # pragma: no cover - unallocated victims have no side
    raise AssertionError(f"an allocated victim of {budget} in the reclaim index")


class ReclaimIndex:
    """Best unallocated-only victim set per host, for every size asked so far."""

    def __init__(self, state: ClusterState, hosts_by_model: dict[str, list[HostView]]) -> None:
        self.state = state
        self.hosts_by_model = hosts_by_model
        self.heaps: dict[tuple[str, int], list[Entry]] = {}
        self.version: dict[str, int] = {}
        self.victims: dict[tuple[str, int, int], list[AttemptView]] = {}
        self.dirty: dict[tuple[str, int], set[str]] = {}  # per heap: hosts changed since it was last read
        self.ctx = KeyContext(_no_side, state.fabric, state.now)
        state.listeners.append(self.touch)

    def touch(self, host: str) -> None:
        """The host's free GPUs or attempts changed: its entries are stale; each heap pushes a
        fresh one when next read (:meth:`best`)."""
        self.version[host] = self.version.get(host, 0) + 1
        model = self.state.hosts[host].model
        for key, dirty in self.dirty.items():
            if key[0] == model:
                dirty.add(host)

    def _entry(self, hv: HostView, n: int) -> Entry | None:
        if not hv.active:
            return None
        free = len(hv.free)
        st = self.state
        # Sets are sufficient for default requests: the host's share of n GPUs (resources.py).
        gpus_only = hv.over_share == 0
        if (free >= n and (gpus_only or st.fits(hv, _DEFAULT, n))) or free + hv.unalloc < n:
            return None
        cands = []
        for aid in hv.attempts:
            av = st.attempts[aid]
            if av.stopping or av.attempt.allocated:
                continue
            got = av.on_host.get(hv.name, 0)
            if got > 0:
                cands.append((av, got))
        best: tuple[object, ...] | None = None
        best_set: list[AttemptView] = []
        k = len(cands)
        for mask in range(1, 1 << k):
            chosen = [cands[i] for i in range(k) if mask >> i & 1]
            got = free + sum(g for _, g in chosen)
            if gpus_only:
                if got < n or any(got - g >= n for _, g in chosen):
                    continue  # not sufficient, or not inclusion-minimal
            elif not self._enough(hv, n, free, chosen) or any(
                self._enough(hv, n, free, [x for x in chosen if x is not c]) for c in chosen
            ):
                continue
            # Criteria 2 and 3 lead among sets without allocated victims (contract.counts_lead).
            total = sum(c.attempt.gpu_count for c, _ in chosen)
            if best is not None and (total, len(chosen)) > best[1:3]:
                continue
            victims = [c for c, _ in chosen]
            key = contract.victim_key(self.ctx, victims, [hv.name])
            if best is None or key < best:
                best, best_set = key, victims
        if best is None:
            return None
        version = self.version.get(hv.name, 0)
        self.victims[(hv.name, n, version)] = best_set
        return (best, version, hv.name)

    def _enough(self, hv: HostView, n: int, free: int, chosen: list[tuple[AttemptView, int]]) -> bool:
        """With ``chosen`` gone, GPUs, CPUs and memory suffice for default requests of ``n`` GPUs."""
        got = free + sum(g for _, g in chosen)
        freed = (
            sum(c.res.get(hv.name, NONE)[0] for c, _ in chosen),
            sum(c.res.get(hv.name, NONE)[1] for c, _ in chosen),
        )
        return got >= n and self.state.fits(hv, _DEFAULT, n, freed)

    def best(self, model: str, n: int, allowed: Callable[[str], bool]) -> tuple[list[AttemptView], HostView] | None:
        """The best unallocated-only victim set for ``n`` GPUs of ``model`` on an allowed host, or None."""
        key = (model, n)
        heap = self.heaps.get(key)
        if heap is None:
            # A host without unallocated work (``HostView.unalloc``: the GPUs of its unallocated
            # attempts not leaving, compared by standing_check.standing_differences) has no entry: no candidates.
            hosts = self.hosts_by_model.get(model, ())
            heap = [e for hv in hosts if hv.unalloc and (e := self._entry(hv, n)) is not None]
            heapq.heapify(heap)
            self.heaps[key] = heap
            self.dirty[key] = set()
        else:
            dirty = self.dirty[key]
            for host in sorted(dirty):
                entry = self._entry(self.state.hosts[host], n)
                if entry is not None:
                    heapq.heappush(heap, entry)
            dirty.clear()
        skipped: list[Entry] = []
        found = None
        while heap:
            entry = heap[0]
            host, version = entry[2], entry[1]
            if version != self.version.get(host, 0):
                heapq.heappop(heap)
                continue
            if not allowed(host):
                skipped.append(heapq.heappop(heap))
                continue
            found = (self.victims[(host, n, version)], self.state.hosts[host])
            break
        for entry in skipped:
            heapq.heappush(heap, entry)
        return found
