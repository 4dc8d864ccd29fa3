"""Placement on free GPUs (DESIGN.md §3.3): best fit on one host, whole hosts for a gang.

Reads the pass's state; the pass (core.py) starts what these functions find.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from scheduler.policy.pass_state import PassState
from scheduler.policy.state import ClusterState
from scheduler.policy.types import GpuRef, Workload


def any_fits_free(st: ClusterState, workloads: Iterable[Workload]) -> bool:
    """True when free GPUs (reservations ignored) could hold some workload of ``workloads`` now,
    from the most free GPUs on one host and the whole free hosts of each model."""
    most: dict[str, int] = {}
    whole: dict[str, int] = {}
    for model, buckets in st.buckets.items():
        most[model] = max((c for c, hosts in buckets.items() if hosts), default=0)
        whole[model] = len(buckets.get(st.largest[model], ()))
    if not any(most.values()):
        return False  # no free GPU at all (a backlog's usual pass): nothing to read of the workloads
    for w in workloads:
        m = most.get(w.model, 0)
        if m == 0:
            continue
        size = st.largest[w.model]
        if w.gpus <= size:
            if w.gpus <= m:
                return True
        elif whole[w.model] >= w.gpus // size:
            return True
    return False


def free_placement(ps: PassState, w: Workload, honour_reservations: bool = True) -> tuple[GpuRef, ...] | None:
    """The GPUs ``w`` would start on now (lowest free indices of the best-fit host, or whole
    free hosts for a gang), or None."""
    st = ps.state

    def allowed(h: str) -> bool:
        return ps.host_allowed(w, h) if honour_reservations else True

    gang = ps.is_gang(w)
    # An allocated workload holding no reservation fails, until room can grow, where one with no
    # more GPUs and no longer M failed: starts and nominations only take free GPUs, reservations
    # only bar more hosts (a longer M is barred from every host a shorter one is).
    memo = honour_reservations and w.allocated and w.id not in ps.reserving
    if memo:
        fails = ps.memo.free_failed.get(_shape(w, gang))
        if fails and any(w.gpus >= n and w.min_runtime >= m for n, m in fails):
            return None
    if not gang:
        host = st.best_fit(w, allowed)
        if host is None:
            if memo:
                _free_failure(ps, w, gang)
            return None
        return tuple((host, i) for i in st.hosts[host].free[: w.gpus])
    size = st.largest[w.model]
    k = w.gpus // size
    hosts = [h for h in st.whole_free_hosts(w.model, size) if allowed(h) and st.fits(st.hosts[h], w, size)]
    if len(hosts) < k:
        if memo:
            _free_failure(ps, w, gang)
        return None
    chosen = pick_hosts_by_fabric(st, hosts, k)
    return tuple((h, i) for h in chosen for i in sorted(st.hosts[h].healthy))


def _shape(w: Workload, gang: bool) -> tuple[str, bool, int | None, int | None]:
    """What a free placement's failure stands for beside GPUs and M: model, gang, requests
    (default requests grow with the GPUs, explicit ones stand only for themselves)."""
    return (w.model, gang, w.cpus, w.memory)


def _free_failure(ps: PassState, w: Workload, gang: bool) -> None:
    fails = ps.memo.free_failed.setdefault(_shape(w, gang), [])
    fails[:] = [(n, m) for n, m in fails if not (w.gpus <= n and w.min_runtime <= m)]
    fails.append((w.gpus, w.min_runtime))


def pick_hosts_by_fabric(st: ClusterState, hosts: list[str], k: int) -> list[str]:
    """k hosts spanning the fewest fabrics, then the smallest host names (§3.3)."""
    groups: dict[str, list[str]] = {}
    for h in sorted(hosts):
        groups.setdefault(st.hosts[h].fabric, []).append(h)
    singles = [sorted(g)[:k] for g in groups.values() if len(g) >= k]
    if singles:
        return min(singles)
    names = sorted(groups)
    if len(names) <= 12:
        best = _fewest_fabrics(groups, names, k)
        if best is not None:
            return best
    # Many fabrics: largest groups first (greedy).
    order = sorted(names, key=lambda g: (-len(groups[g]), g))
    pool: list[str] = []
    for g in order:
        pool.extend(groups[g])
        if len(pool) >= k:
            break
    return sorted(pool)[:k]


def _fewest_fabrics(groups: dict[str, list[str]], names: list[str], k: int) -> list[str] | None:
    best: tuple[int, list[str]] | None = None
    for f in range(2, len(names) + 1):
        for combo in combinations(names, f):
            pool = sorted(h for g in combo for h in groups[g])
            if len(pool) >= k:
                cand = (f, pool[:k])
                if best is None or cand < best:
                    best = cand
        if best is not None:
            return best[1]
    return None
