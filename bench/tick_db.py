"""Full tick benchmark on PostgreSQL (DESIGN.md §9): snapshot load + policy + apply. Prints, asserts nothing.

    python bench/tick_db.py [--repeat 5] [--quick] [--caps N]

The states are those ``bench/tick.py`` times at the first size: ``bench.synth.make_settled(1250,
25000)``, a state the policy itself produced (1,250 hosts × 8 GPUs, 60 budgets in 3 levels, ~5,000
open attempts, ~20,000 pending workloads), 10 minutes after the last tick (the ordinary tick of a
busy cluster: the target), and 1 hour on without a tick (attempts exited, so the timed tick starts
~2,000 workloads; skipped by ``--quick``). Each is written with
``bulk_create`` into a dedicated database, ``DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/fairway_bench``; created if missing, migrated, and emptied
with ``flush`` — so its name must contain "bench"). Pending workloads carry the reasons the tick
before (at T0) stored, named as a live tick stores them (budgets and workloads by pk, not by the
engine's keys: else every reason compared unequal), so the timed tick writes only the reasons that
changed, as a live tick does.
Closed attempts of the window are attempt rows (the snapshot's closed-attempt query has real
work); the per-budget history lumps are usage entries.

Every timed tick runs inside an outer transaction that is rolled back afterwards, so every run
sees the same state (and the commit itself is not timed). Times: median of ``--repeat`` runs after
one untimed warm-up, split into snapshot load, policy and apply (lock and the cluster check are in
the total), and apply's locks (``_lock_workloads``), starts and pending reasons. The SQL query count
is that of one tick (``CaptureQueriesContext``). ``--caps N`` times
each state again with a cap on N budgets (every few budgets by pk, leaves and inner ones; a cap
no budget reaches, 30-day period, so the decisions are the same) and prints the caps' own part:
``snapshot.cap_records`` (the query) and ``cap_state`` (the totals in Python).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fairway_bench")


def ensure_database(url: str) -> str:
    """Create the PostgreSQL database of ``url`` if it does not exist; return its name."""
    import dj_database_url
    import psycopg

    conf = dj_database_url.parse(url)
    if conf["ENGINE"] != "django.db.backends.postgresql":
        raise SystemExit(f"bench/tick_db.py needs PostgreSQL, DATABASE_URL={url!r}")
    name = conf["NAME"]
    if "bench" not in name:
        raise SystemExit(f"refusing to flush database {name!r}: its name must contain 'bench'")
    kwargs = {
        k: v
        for k, v in {
            "host": conf["HOST"],
            "port": conf["PORT"],
            "user": conf["USER"],
            "password": conf["PASSWORD"],
        }.items()
        if v
    }
    with psycopg.connect(dbname="postgres", autocommit=True, **kwargs) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
            print(f"created database {name}")
    return name


def dt(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


BUDGET_KEYS = ("other_budget_key", "budget_key", "rival_key")
"""Detail fields naming a budget by its policy key: the engine's names, the database's pks."""


def _as_stored(detail: dict[str, Any], budget_pk: dict[str, int]) -> dict[str, Any]:
    """``detail`` as a live tick would have stored it: budgets named by pk (the snapshot's keys),
    so a reason whose facts did not change compares equal and is not rewritten."""
    out = dict(detail)
    for key in BUDGET_KEYS:
        if key in out and str(out[key]) in budget_pk:
            out[key] = str(budget_pk[str(out[key])])
    return out


WORKLOAD_KEYS = ("reserved_for", "blocking")
"""Detail fields naming workloads (one, or a list) by their policy id: the engine's, the rows' pks."""


def _workloads_as_stored(pk_of: dict[str, int]) -> None:
    """Workloads named in stored details (pending or running ones): the engine's id → the row's pk."""
    from django.db.models import Q

    from scheduler.models import Workload

    def stored(value: Any) -> Any:
        if isinstance(value, list):
            return [stored(v) for v in value]
        return str(pk_of[value]) if isinstance(value, str) and value in pk_of else value

    named = Q()
    for key in WORKLOAD_KEYS:
        named |= Q(pending_detail__has_key=key)
    rows = list(Workload.objects.filter(named, state="pending").only("pk", "pending_detail"))
    for w in rows:
        w.pending_detail = {k: stored(v) if k in WORKLOAD_KEYS else v for k, v in w.pending_detail.items()}
    Workload.objects.bulk_update(rows, ["pending_detail"], batch_size=2000)


def populate(engine: Any, previous: dict[str, Any]) -> int:
    """Write the engine's state into the models; return the cluster's pk."""
    from accounts.models import User
    from budgets.models import Budget, UsageEntry
    from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, Workload

    now = dt(engine.now)
    cluster = Cluster.objects.create(name="bench")
    owner = User.objects.create(username="bench")

    budget_pk: dict[str, int] = {}
    pending_keys = list(engine.budgets.values())
    while pending_keys:  # parents first
        later = []
        for b in pending_keys:
            if b.parent is not None and b.parent not in budget_pk:
                later.append(b)
                continue
            budget_pk[b.key] = Budget.objects.create(
                name=b.name,
                parent_id=budget_pk.get(b.parent) if b.parent else None,
                shares=b.shares,
                hold=b.hold,
                archived_at=now if b.archived else None,
            ).pk
        pending_keys = later

    hosts = Host.objects.bulk_create(
        [
            Host(
                cluster=cluster,
                name=h.name,
                state=str(h.state),
                labels=dict(h.labels),
                drain_now=h.drain_now,
                token_hash=f"bench-{h.name}",
                last_heartbeat=now,
            )
            for h in engine.hosts.values()
        ],
        batch_size=2000,
    )
    host_pk = {h.name: h.pk for h in hosts}
    gpus = GPU.objects.bulk_create(
        [
            GPU(host_id=host_pk[h.name], index=i, uuid=f"GPU-{h.name}-{i}", model=h.model, health=str(health))
            for h in engine.hosts.values()
            for i, health in sorted(h.gpu_health.items())
        ],
        batch_size=5000,
    )
    name_of_host = {pk: name for name, pk in host_pk.items()}
    gpu_pk = {(name_of_host[g.host_id], g.index): g.pk for g in gpus}

    states = {
        "pending": Workload.State.PENDING,
        "running": Workload.State.RUNNING,
        "preempting": Workload.State.PREEMPTING,
    }
    live = [w for w in engine.workloads.values() if w.state in states]
    history = [u for u in engine.usage if u.gpus is not None]
    max_seq = max((w.seq for w in engine.workloads.values()), default=0)
    rows = []
    for w in live:
        reason, detail = previous.get(w.id, ("", {})) if w.state == "pending" else ("", {})
        detail = _as_stored(detail, budget_pk)
        rows.append(
            Workload(
                name=w.id,
                owner=owner,
                budget_id=budget_pk[w.budget],
                cluster=cluster,
                gpu_model=w.model,
                gpu_count=w.gpus,
                command=["true"],
                min_runtime_s=w.min_runtime,
                submitted_at=dt(w.submitted_at),
                seq=w.seq,
                state=states[w.state],
                pending_reason=reason,
                pending_detail=detail,
            )
        )
    for n, u in enumerate(history):
        rows.append(
            Workload(
                name=f"done{n}",
                owner=owner,
                budget_id=budget_pk[u.budget],
                cluster=cluster,
                gpu_model="H100",
                gpu_count=u.gpus,
                command=["true"],
                min_runtime_s=1800,
                submitted_at=dt(u.start),
                seq=max_seq + 1 + n,
                state=Workload.State.SUCCEEDED,
                finished_at=dt(u.end),
            )
        )
    created = Workload.objects.bulk_create(rows, batch_size=5000)
    workload_pk = {w.name: w.pk for w in created[: len(live)]}
    _workloads_as_stored(workload_pk)

    attempts: list[Attempt] = []
    plans: list[list[tuple[int, int, bool]]] = []
    for a in engine.attempts.values():
        w = engine.workloads[a.workload]
        ranks: dict[str, int] = {}
        plans.append([(gpu_pk[ref], ranks.setdefault(ref[0], len(ranks)), True) for ref in a.gpus])
        started = dt(a.started_at)
        attempts.append(
            Attempt(
                workload_id=workload_pk[a.workload],
                number=max(1, w.attempts),
                host_id=host_pk[a.gpus[0][0]],
                allocated=a.allocated,
                placed_at=started,
                started_at=started,
                protected_until=started + timedelta(seconds=a.min_runtime) if a.allocated else None,
                stop_requested_at=dt(a.stop_at) if a.stop_at is not None else None,
                stop_reason=a.stop_reason or "",
            )
        )
    all_gpus = [g.pk for g in gpus]
    for n, u in enumerate(history):  # closed attempts: their links are closed, any GPUs will do
        plans.append([(all_gpus[i], 0, False) for i in range(u.gpus)])
        attempts.append(
            Attempt(
                workload_id=created[len(live) + n].pk,
                number=1,
                host_id=hosts[0].pk,
                allocated=True,
                placed_at=dt(u.start),
                started_at=dt(u.start),
                protected_until=dt(u.start + 1800),
                ended_at=dt(u.end),
                end_reason=Attempt.EndReason.SUCCEEDED,
            )
        )
    attempts = Attempt.objects.bulk_create(attempts, batch_size=5000)
    AttemptGPU.objects.bulk_create(
        [
            AttemptGPU(attempt_id=a.pk, gpu_id=g, rank=r, open=o)
            for a, plan in zip(attempts, plans, strict=True)
            for g, r, o in plan
        ],
        batch_size=5000,
    )
    by_workload: dict[int, list[int]] = defaultdict(list)
    for wid, refs in engine.nominations.items():
        for ref in refs:
            by_workload[workload_pk[wid]].append(gpu_pk[tuple(ref)])
    for wpk, gids in by_workload.items():
        GPU.objects.filter(pk__in=gids).update(nominated_for_id=wpk)
    UsageEntry.objects.bulk_create(
        [
            UsageEntry(
                budget_id=budget_pk[u.budget],
                cluster=cluster,
                start=dt(u.start),
                end=dt(u.end),
                gpus=None,
                gpu_seconds=u.gpu_seconds,
                note="bench history",
            )
            for u in engine.usage
            if u.gpus is None
        ]
    )
    return cluster.pk


def set_caps(n: int) -> None:
    """A cap no budget reaches (10^6 GPU-hours per 30 days) on ``n`` budgets spread over the tree:
    every ``len / n``-th by pk, leaves and inner budgets alike."""
    from budgets.models import Budget

    pks = list(Budget.objects.order_by("pk").values_list("pk", flat=True))
    step = max(1, len(pks) // n)
    chosen = pks[::step][:n]
    Budget.objects.filter(pk__in=chosen).update(cap_gpu_hours=1_000_000, cap_period_days=30)


def time_ticks(
    cluster_id: int, now: datetime, repeat: int, forget: bool = False, plain_hardware: bool = False
) -> tuple[dict[str, float], list[dict[str, float]], Any, int, tuple[int, int]]:
    """Run ``repeat + 1`` ticks, each rolled back; return the medians, the runs, one result, its query
    count and (pending workloads whose reason code changed, whose reason or detail changed).
    ``plain_hardware``: each snapshot reads every host and GPU row (``scheduler.snapshot._hardware_plain``,
    as before the hardware was kept between ticks)."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from scheduler import snapshot, tick
    from scheduler.models import Workload

    phases: dict[str, float] = {}
    real = {
        "load": tick.load_snapshot,
        "policy": tick.schedule,
        "apply": tick._apply,
        "caps_sql": snapshot.cap_records,
        "caps_py": snapshot.cap_state,
        "locks": tick._lock_workloads,
        "starts": tick._apply_starts,
        "reasons": tick._apply_pending,
    }
    parts = ("locks", "starts", "reasons")  # apply's parts (the rest: stops, hosts, nominations, events)
    real_name = {"locks": "_lock_workloads", "starts": "_apply_starts", "reasons": "_apply_pending"}

    def timed(key: str):  # noqa: ANN202
        def wrapper(*a: Any, **k: Any) -> Any:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return real[key](*a, **k)
            finally:
                phases[key] = time.perf_counter() - t0
                phases[key + "_cpu"] = time.process_time() - c0

        return wrapper

    def stored() -> dict[int, tuple[str, Any]]:
        rows = Workload.objects.filter(state="pending").values_list("pk", "pending_reason", "pending_detail")
        return {pk: (reason, detail) for pk, reason, detail in rows}

    before = stored()
    changed = (0, 0)
    runs: list[dict[str, float]] = []
    result = None
    queries = 0
    tick.load_snapshot, tick.schedule, tick._apply = timed("load"), timed("policy"), timed("apply")
    snapshot.cap_records, snapshot.cap_state = timed("caps_sql"), timed("caps_py")  # type: ignore[assignment]
    for key in parts:
        setattr(tick, real_name[key], timed(key))
    kept_hardware = snapshot._hardware_kept
    if plain_hardware:
        snapshot._hardware_kept = snapshot._hardware_plain  # type: ignore[assignment]
    try:
        for i in range(repeat + 1):
            phases.clear()
            if forget:  # the snapshot keeps nothing from the tick before (bench: --forget-kept)
                from scheduler.snapshot import forget_kept

                forget_kept()
            with transaction.atomic():
                with CaptureQueriesContext(connection) as ctx:
                    t0, c0 = time.perf_counter(), time.process_time()
                    result = tick.run_tick(cluster_id, now=now)
                    total, total_cpu = time.perf_counter() - t0, time.process_time() - c0
                if i == 0:
                    queries = len(ctx.captured_queries)
                    after = stored()
                    codes = sum(1 for pk, (r, _d) in after.items() if before[pk][0] != r)
                    changed = (codes, sum(1 for pk, rd in after.items() if before[pk] != rd))
                transaction.set_rollback(True)
            if i > 0:  # the first run warms caches and is not counted
                caps = {k: 0.0 for k in ("caps_sql", "caps_sql_cpu", "caps_py", "caps_py_cpu")}
                caps |= {k + cpu: 0.0 for k in parts for cpu in ("", "_cpu")}  # a quiet tick skips some
                runs.append({**caps, **phases, "total": total, "total_cpu": total_cpu})
    finally:
        tick.load_snapshot, tick.schedule, tick._apply = real["load"], real["policy"], real["apply"]
        snapshot.cap_records, snapshot.cap_state = real["caps_sql"], real["caps_py"]  # type: ignore[assignment]
        for key in parts:
            setattr(tick, real_name[key], real[key])
        snapshot._hardware_kept = kept_hardware  # type: ignore[assignment]
    assert result is not None and result.status == "ran", result
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return med, runs, result, queries, changed


def setup() -> str:
    """Create (if missing) and migrate ``DATABASE_URL``'s bench database, set Django up; its name."""
    name = ensure_database(os.environ["DATABASE_URL"])
    import logging

    import django

    django.setup()
    from django.core.management import call_command

    logging.getLogger("scheduler.tick").setLevel(logging.WARNING)  # one "tick ... started" line per run
    call_command("migrate", verbosity=0)
    return name


def reasons_before(hosts: int = 1250, workloads: int = 25000) -> dict[str, Any]:
    """The reasons the tick before stored: the same arrivals, at T0 right after its tick."""
    from bench.synth import make_settled
    from scheduler.policy import schedule

    before = make_settled(hosts, workloads, after=0)
    return {wid: (str(info.reason), dict(info.detail)) for wid, info in schedule(before.snapshot()).pending.items()}


def write_state(
    after: int, previous: dict[str, Any], hosts: int = 1250, workloads: int = 25000
) -> tuple[Any, int, float]:
    """Empty the database (``flush``) and write the settled state ``after`` seconds after the last
    tick (``bench.synth.make_settled``); the engine, the cluster's pk and the seconds the engine took."""
    from django.core.management import call_command
    from django.db import connection

    from bench.synth import make_settled

    call_command("flush", interactive=False, verbosity=0)
    t = time.perf_counter()
    engine = make_settled(hosts, workloads, after=after)
    built = time.perf_counter() - t
    cluster_id = populate(engine, previous)
    with connection.cursor() as cur:
        cur.execute("ANALYZE")
    return engine, cluster_id, built


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="only the state 10 minutes after the last tick")
    ap.add_argument(
        "--forget-kept",
        action="store_true",
        help="time each state twice more: each timed tick's snapshot keeping nothing from the tick before "
        "(scheduler.snapshot.forget_kept)",
    )
    ap.add_argument(
        "--plain-hardware",
        action="store_true",
        help="time each state once more with every host and GPU row read by each snapshot "
        "(scheduler.snapshot._hardware_plain), not the hardware kept between ticks (needs REDIS_URL)",
    )
    ap.add_argument(
        "--caps",
        type=int,
        default=0,
        metavar="N",
        help="time each state once more with a cap (never reached) on N budgets, and print the caps' part",
    )
    args = ap.parse_args()

    name = setup()
    from django.db import connection

    from scheduler.models import Attempt

    print(
        f"database {name}, PostgreSQL {connection.pg_version // 10000}; machine: {os.cpu_count()} cores "
        f"({len(os.sched_getaffinity(0))} usable), Python {sys.version.split()[0]}; median of {args.repeat} ticks, "
        "each in a transaction rolled back afterwards (same state every run; commit not timed)"
    )
    previous = reasons_before()
    states = [("10 min after the last tick", 600), ("1 h without a tick", 3600)]
    for label, after in states[:1] if args.quick else states:
        t = time.perf_counter()
        engine, cluster_id, built = write_state(after, previous)
        written = time.perf_counter() - t - built
        snap = engine.snapshot()
        print()
        print(
            f"{label}: {len(snap.hosts):,} hosts, {sum(h.size for h in snap.hosts):,} GPUs, "
            f"{len(snap.budgets)} budgets, {len(snap.attempts):,} open attempts, {len(snap.pending):,} pending, "
            f"{Attempt.objects.filter(ended_at__isnull=False).count():,} closed attempts in the window "
            f"(engine {built:.1f} s, written {written:.1f} s)"
        )
        variants = (
            [(False, False, 0)] + [(True, False, 0)] * args.forget_kept + [(False, True, 0)] * args.plain_hardware
        )
        variants += [(False, False, args.caps)] * bool(args.caps)
        for forget, plain, ncaps in variants:
            if ncaps:
                set_caps(ncaps)
            med, runs, result, queries, (codes, changed) = time_ticks(
                cluster_id, dt(engine.now), args.repeat, forget, plain
            )
            print(
                "  the snapshot builds every pending workload again:"
                if forget
                else "  the snapshot reads every host and GPU row:"
                if plain
                else f"  after a tick before, with caps on {ncaps} budgets:"
                if ncaps
                else "  after a tick before:"
            )
            print(
                f"  one tick: {len(result.starts)} starts, {len(result.stops)} stops, {len(result.reservations)} "
                f"reserved hosts; stored reasons rewritten: {changed:,} ({codes:,} with a new code); "
                f"{queries} SQL queries"
            )
            for n, r in enumerate(runs, 1):
                print(
                    f"  run {n}: load {r['load']:.3f}  policy {r['policy']:.3f}  apply {r['apply']:.3f} "
                    f"(locks {r['locks']:.3f}, starts {r['starts']:.3f}, reasons {r['reasons']:.3f})  "
                    f"total {r['total']:.3f}  (CPU of this process: load {r['load_cpu']:.3f}  "
                    f"total {r['total_cpu']:.3f})"
                )
            verdict = "met" if med["total"] <= 2.0 else "MISSED"
            print(
                f"  median: load {med['load']:.3f} s, policy {med['policy']:.3f} s, apply {med['apply']:.3f} s, "
                f"total {med['total']:.3f} s (target 2.0 s: {verdict}); apply's locks {med['locks']:.3f} s, starts "
                f"{med['starts']:.3f} s, reasons {med['reasons']:.3f} s (CPU {med['reasons_cpu']:.3f}); "
                "this process's CPU: "
                f"load {med['load_cpu']:.3f} s, policy {med['policy_cpu']:.3f} s, apply {med['apply_cpu']:.3f} s, "
                f"total {med['total_cpu']:.3f} s"
            )
            print(
                f"  the caps' part: cap_records {med['caps_sql']:.3f} s (CPU {med['caps_sql_cpu']:.3f}), "
                f"cap_state {med['caps_py']:.3f} s (CPU {med['caps_py_cpu']:.3f}): "
                f"{100 * (med['caps_sql'] + med['caps_py']) / med['total']:.1f} % of the tick's wall time, "
                f"{100 * (med['caps_sql_cpu'] + med['caps_py_cpu']) / med['total_cpu']:.1f} % of its CPU"
            )


if __name__ == "__main__":
    main()
