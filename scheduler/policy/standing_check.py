"""The check of a kept :class:`~scheduler.policy.standing.Standing`: its differences from a fresh
build of the same snapshot that a pass could see (``IncrementalScheduler(check=True)``, the
policy tests): ownership, nominations, hosts' lists, best-fit buckets, attempts, and the
aggregates of allocated work."""

from __future__ import annotations

from scheduler.policy.standing import Standing
from scheduler.policy.state import ClusterState


def standing_differences(kept: Standing, fresh: Standing) -> list[str]:
    """Differences of ``kept`` from ``fresh`` that a pass could see (empty when none)."""
    out = state_differences(kept.state, fresh.state)
    if kept.noms != fresh.noms:
        out.append("noms")
    if (kept.draining, sorted(kept.sick), kept.drains) != (fresh.draining, sorted(fresh.sick), fresh.drains):
        out.append("draining or sick hosts")  # read by the screen and by Pass._faults_and_drains
    if kept.total_gpus != fresh.total_gpus:
        out.append(f"total GPUs {kept.total_gpus} != {fresh.total_gpus}")
    return out + aggregate_differences(kept, fresh)


def state_differences(a: ClusterState, b: ClusterState) -> list[str]:
    """GPU ownership, nominations, each host's lists, the best-fit buckets and the attempts."""
    out = []
    if a.owner != b.owner:
        out.append("owner")
    if a.nominated != b.nominated:
        out.append("nominated")
    if _nominees(a) != _nominees(b):
        out.append("nominees")
    for name, hv in a.hosts.items():
        ov = b.hosts[name]
        for f in ("free", "attempts", "unalloc", "stopping", "active", "healthy"):
            if getattr(hv, f) != getattr(ov, f):
                out.append(f"host {name}.{f}: {getattr(hv, f)!r} != {getattr(ov, f)!r}")
    if _buckets(a) != _buckets(b):
        out.append(f"buckets {_buckets(a)} != {_buckets(b)}")
    if set(a.attempts) != set(b.attempts):
        out.append("attempt ids")
        return out
    for aid, mine in a.attempts.items():
        theirs = b.attempts[aid]
        if (mine.attempt, mine.stopping, mine.hosts, mine.on_host, mine.protected) != (
            theirs.attempt,
            theirs.stopping,
            theirs.hosts,
            theirs.on_host,
            theirs.protected,
        ):
            out.append(f"attempt {aid}")
    return out


def _nominees(st: ClusterState) -> dict[str, dict[str, int]]:
    return {h: {w: n for w, n in d.items() if n} for h, d in st.nominees.items() if d}


def _buckets(st: ClusterState) -> dict[str, dict[int, list[str]]]:
    out = {m: {c: lst for c, lst in d.items() if lst} for m, d in st.buckets.items()}
    return {m: d for m, d in out.items() if d}


def _nonzero(agg: dict[str, dict[str, list[int]]]) -> dict[str, dict[str, list[int]]]:
    out = {h: {v: c for v, c in d.items() if c[0] or c[1]} for h, d in agg.items()}
    return {h: d for h, d in out.items() if d}


def aggregate_differences(kept: Standing, fresh: Standing) -> list[str]:
    """The aggregates of allocated work (``agg``, ``agg_held``, ``victim_hosts``,
    ``budget_hosts``, ``slack``; ``agg_budgets`` may only have grown)."""
    out = []
    if _nonzero(kept.agg) != _nonzero(fresh.agg):
        out.append("agg")
    if {h: n for h, n in kept.agg_held.items() if n} != {h: n for h, n in fresh.agg_held.items() if n}:
        out.append("agg_held")
    if {v: d for v, d in kept.victim_hosts.items() if d} != {v: d for v, d in fresh.victim_hosts.items() if d}:
        out.append("victim_hosts")
    if {v: d for v, d in kept.budget_hosts.items() if d} != {v: d for v, d in fresh.budget_hosts.items() if d}:
        out.append("budget_hosts")
    if kept.slack != fresh.slack:
        out.append("slack")
    if not fresh.agg_budgets <= kept.agg_budgets:
        out.append("agg_budgets")
    return out
