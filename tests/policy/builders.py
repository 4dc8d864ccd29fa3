"""Small builders for policy snapshots in tests (times in seconds, t0 = 1,000,000)."""

from __future__ import annotations

from scheduler.policy import Attempt, Budget, GpuHealth, Host, HostState, Snapshot, UsageRecord, Workload

T0 = 1_000_000
H = 3600


def host(name: str, gpus: int = 8, model: str = "H100", state: HostState = HostState.ACTIVE, **labels: str) -> Host:
    return Host(name, model, dict.fromkeys(range(gpus), GpuHealth.HEALTHY), state, labels)


def tree(*paths: str, shares: dict[str, int] | None = None) -> list[Budget]:
    """Budgets keyed by path under a root "org"; parents are created as needed."""
    shares = shares or {}
    out = {"org": Budget("org", "org", None, 1)}
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            if p not in out:
                parent = "/".join(parts[: i - 1]) or "org"
                out[p] = Budget(p, parts[i - 1], parent, shares.get(p, 1))
    return list(out.values())


def pending(
    wid: str, budget: str, gpus: int, m: int = H, seq: int = 0, submitted: int = T0, model: str = "H100"
) -> Workload:
    return Workload(wid, budget, gpus, model, m, submitted, seq)


def running(
    aid: str,
    budget: str,
    gpus: list[tuple[str, int]],
    m: int = H,
    started: int | None = T0 - 2 * H,
    allocated: bool | None = None,
    stopping: bool = False,
) -> Attempt:
    return Attempt(aid, aid, budget, tuple(gpus), m > 0 if allocated is None else allocated, m, started, stopping)


def lump(budget: str, gpu_hours: float, at: int = T0 - 86400) -> UsageRecord:
    return UsageRecord(budget, at, at, None, round(gpu_hours * 3600))


def snap(
    hosts: list[Host],
    budgets: list[Budget],
    attempts: list[Attempt] = (),
    pend: list[Workload] = (),
    usage: list[UsageRecord] = (),
    now: int = T0,
    **kw: object,
) -> Snapshot:
    return Snapshot(
        now=now, hosts=hosts, budgets=budgets, attempts=list(attempts), pending=list(pend), usage=list(usage), **kw
    )  # type: ignore[arg-type]
