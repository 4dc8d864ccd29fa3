"""How often unallocated work is preempted, and what each preemption bought (churn44).

    python bench/unallocated_churn.py demo  [--grace 1] [--history-days 7] [--show 20] [--exempt S] [--backoff S]
    python bench/unallocated_churn.py philly [--start-day 41] [--days 3] [--hosts 64] [--grace 30] [--exempt S]

``demo`` runs ``make demo``'s input through the policy on the scenario engine (no server, no
agents): the 500 Philly jobs from 34805 at time scale 300 with a 1 h cap and the demo's rules
(``scheduler.trace.plan_replay``: M = min(run, 2 h) compressed + 1 s, 10 % unallocated, CPUs 6 and
memory 48G per GPU, wall-time limit run + 20 s), its array ``demo-sweep[0-5]%2`` (six 1-GPU
unallocated members of 40 s, at most two at once), four hosts of 8 H100, a tick every second,
the week before simulated and charged as ``import_history philly`` does. Every stopped attempt
restarts from its beginning (the stand-in keeps no checkpoint). ``--grace`` is the time from a
stop to the release: the stand-in exits at once on SIGTERM, so about the next tick, not the
demo's 5 s grace period.

``philly`` runs a slice of the trace simulator (docs/simulation.md; its defaults, grace 30 s).

Every preemption of an unallocated attempt is classified by what its preemptor did with the
GPUs: started on (some of) the victim's GPUs, started elsewhere (its nomination dropped, DESIGN.md
§3.4), or never started in the run; how long after the release it started; who took each of
the victim's GPUs first after the stop (the preemptor, other allocated work, unallocated work:
the ping-pong); how long the victim had run. The policy is wrapped and watched, its decisions
unchanged; only ``--exempt`` (Slurm's ``PreemptExemptTime`` for unallocated work, emulated around
the policy: :func:`policy_for`) and ``--backoff`` (a restart back-off, in the demo's engine) try the
proposals of docs/policy.md, "Churn of unallocated work".
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.policy import (  # noqa: E402
    Budget,
    Decisions,
    GpuHealth,
    Host,
    IncrementalScheduler,
    Snapshot,
    StopReason,
    UsageRecord,
)
from scheduler.policy.types import GpuRef  # noqa: E402
from scheduler.sim.engine import Engine, SimAttempt, SimWorkload  # noqa: E402
from scheduler.trace import TraceJob  # noqa: E402

GIB = 1 << 30


@dataclass
class Victim:
    """One preemption of an unallocated attempt."""

    t: int
    pass_no: int
    workload: str
    attempt: str
    gpus: tuple[GpuRef, ...]
    ran: int
    preemptor: str
    nominated: tuple[GpuRef, ...]
    released: int | None = None
    started: tuple[int, int, tuple[GpuRef, ...]] | None = None  # (time, pass, GPUs) of the preemptor's start
    dropped: int | None = None  # first instant its nomination was gone with the preemptor not started
    taken: dict[GpuRef, tuple[int, str, bool]] = field(default_factory=dict)  # GPU → (time, workload, allocated)
    leaving: frozenset[GpuRef] = frozenset()  # at the stop: GPUs of attempts already stopping, nominated for nobody
    free: frozenset[GpuRef] = frozenset()  # at the stop: GPUs free (usable, held and nominated by nobody)
    leaving_victims: frozenset[GpuRef] = frozenset()  # of ``leaving``: GPUs of earlier unallocated victims

    def outcome(self) -> str:
        if self.started is None:
            return "never started"
        if set(self.started[2]) & set(self.gpus):
            return "started on the victim's GPUs"
        return "started elsewhere"

    def first_taker(self) -> str:
        """Who took the victim's GPUs first after the stop."""
        if not self.taken:
            return "nobody"
        t, wid, allocated = min(self.taken.values())
        if wid == self.preemptor:
            return "the preemptor"
        if allocated:
            return "other allocated work"
        return "the victim itself again" if wid == self.workload else "other unallocated work"


class Watch:
    """Wraps a policy callable; records every preemption of an unallocated attempt and its sequel."""

    def __init__(self, policy: Callable[[Snapshot], Decisions], grace: int) -> None:
        self.policy = policy
        self.grace = grace
        self.passes = 0
        self.victims: list[Victim] = []
        self._by_preemptor: dict[str, list[Victim]] = {}
        self._by_gpu: dict[GpuRef, list[Victim]] = {}
        self.allocated_preemptions = 0
        self.unalloc_starts = 0
        self._unalloc_open: dict[str, tuple[int, int]] = {}  # workload → (start, GPUs) of its open unallocated attempt
        self._unalloc_closed = 0

    def unalloc_gpu_s(self, e: Engine) -> int:
        """GPU-seconds unallocated attempts held, up to the engine's end."""
        return self._unalloc_closed + sum(n * (e.now - t) for t, n in self._unalloc_open.values())

    def __call__(self, snap: Snapshot) -> Decisions:
        dec = self.policy(snap)
        self.passes += 1
        now = snap.now
        attempts = {a.id: a for a in snap.attempts}
        nominated = {g for gs in snap.nominations.values() for g in gs}
        leaving = frozenset(g for a in snap.attempts if a.stopping for g in a.gpus if g not in nominated)
        held = {g for a in snap.attempts for g in a.gpus}
        free = frozenset(
            (h.name, i)
            for h in snap.hosts
            if h.state == "active"
            for i, health in h.gpu_health.items()
            if health != GpuHealth.UNHEALTHY and (h.name, i) not in held and (h.name, i) not in nominated
        )
        victim_gpus = {g for v in self.victims if (v.released or v.t) > now for g in v.gpus}
        open_now = {a.workload for a in snap.attempts if not a.allocated}
        for wid in [w for w in self._unalloc_open if w not in open_now]:
            t, n = self._unalloc_open.pop(wid)
            self._unalloc_closed += n * (now - t)  # released by the previous instant at the latest
        for s in dec.stops:
            a = attempts.get(s.attempt)
            if s.reason != StopReason.PREEMPTED or a is None:
                continue
            if a.allocated:
                self.allocated_preemptions += 1
                continue
            ran = 0 if a.started_at is None else now - a.started_at
            v = Victim(
                now,
                self.passes,
                a.workload,
                a.id,
                a.gpus,
                ran,
                s.for_workload or "",
                dec.nominations.get(s.for_workload or "", ()),
            )
            v.released = now + self.grace
            v.leaving = leaving
            v.free = free
            v.leaving_victims = leaving & victim_gpus
            self.victims.append(v)
            self._by_preemptor.setdefault(v.preemptor, []).append(v)
            for g in a.gpus:
                self._by_gpu.setdefault(g, []).append(v)
        for st in dec.starts:
            if not st.allocated:
                self.unalloc_starts += 1
                self._unalloc_open[st.workload] = (now, len(st.gpus))
            for v in self._by_preemptor.pop(st.workload, []):
                v.started = (now, self.passes, st.gpus)
            for g in st.gpus:
                for v in self._by_gpu.pop(g, []):
                    v.taken[g] = (now, st.workload, st.allocated)
        for wid, vs in self._by_preemptor.items():
            if wid not in dec.nominations:
                for v in vs:
                    if v.dropped is None:
                        v.dropped = now
        return dec


def policy_for(exempt: int) -> Callable[[Snapshot], Decisions]:
    """Fairway's policy, or (``exempt`` > 0) a proposal emulated around it without changing it:
    Slurm's ``PreemptExemptTime`` for unallocated work. An unallocated attempt younger than ``exempt``
    seconds is shown to the policy as protected work of a budget of its own under the root (allocated,
    M = ``exempt`` from its start: never a victim before then, room later for reservations). The
    extra root child scales every program's entitlement alike, so no ranking changes; the attempt is
    not charged (the engine charges its own record, which stays unallocated). Passes are fresh
    ``schedule()`` calls with reasons (the screen's and tail's shortcuts assume real attempts)."""
    if not exempt:
        return IncrementalScheduler()
    from scheduler.policy import schedule

    def policy(snap: Snapshot) -> Decisions:
        root = next(b.key for b in snap.budgets if b.parent is None)
        young = [
            a.id
            for a in snap.attempts
            if not a.allocated and not a.stopping and (a.started_at is None or snap.now - a.started_at < exempt)
        ]
        if young:
            ids = set(young)
            attempts = [
                replace(a, allocated=True, budget=EXEMPT, min_runtime=exempt) if a.id in ids else a
                for a in snap.attempts
            ]
            snap = replace(snap, attempts=attempts, budgets=[*snap.budgets, Budget(EXEMPT, EXEMPT, root)])
        dec = schedule(replace(snap, with_reasons=True))
        dec.pending.clear()
        return dec

    return policy


EXEMPT = "~exempt"


# --------------------------------------------------------------------------------------- demo
class DemoEngine(Engine):
    """The scenario engine with array groups (``%N``) and restarts from the beginning."""

    def __init__(self, *, full_run: dict[str, int], groups: dict[str, tuple[str, int]], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.full_run = full_run
        self.groups = groups  # workload → (group, cap)
        self.backed_off: dict[str, tuple[int, int]] = {}  # workload → (preemptions, last release)

    backoff = 0
    """Restart back-off (a proposal, docs/policy.md): a preempted unallocated workload is not shown to the
    policy for ``backoff`` × 2^(k−1) seconds after its k-th preemption's release (0: today's rule)."""

    def snapshot(self) -> Snapshot:
        snap = super().snapshot()
        if self.backoff:
            held = {
                wid for wid, (k, at) in self.backed_off.items() if self.now < at + min(self.backoff << (k - 1), 600)
            }
            snap = replace(snap, pending=[w for w in snap.pending if w.id not in held])
        if not self.groups:
            return snap
        holding: Counter[str] = Counter()
        caps: dict[str, int] = {}
        for wid, (g, cap) in self.groups.items():
            caps[g] = cap
            if self.workloads[wid].state in ("running", "preempting"):
                holding[g] += 1
        pending = [replace(w, group=self.groups[w.id][0]) if w.id in self.groups else w for w in snap.pending]
        return replace(snap, pending=pending, group_limits={g: (c, holding[g]) for g, c in caps.items()})

    def _release(self, a: SimAttempt, end_reason: str, at: int) -> None:
        super()._release(a, end_reason, at)
        w = self.workloads.get(a.workload)
        if w is not None and w.state == "pending" and not a.allocated:
            self.backed_off[w.id] = (self.backed_off.get(w.id, (0, 0))[0] + 1, at)
        if w is not None and w.state == "pending":
            w.remaining = self.full_run[w.id]  # the stand-in restarts from its beginning


def _django() -> None:
    """``seed_demo``'s tree and ``scheduler.history`` import the models (what is read here is pure)."""
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()


def demo_budgets() -> list[Budget]:
    """``seed_demo``'s tree, shares 1 everywhere."""
    from scheduler.history import PHILLY_PREFIX
    from scheduler.management.commands.seed_demo import PROGRAMS
    from scheduler.management.commands.seed_demo import ROOT as ORG

    out = [Budget(ORG, ORG, None)]
    for program, vcs in PROGRAMS.items():
        out.append(Budget(program, program, ORG))
        out.extend(Budget(f"{PHILLY_PREFIX}{vc}", f"{PHILLY_PREFIX}{vc}", program) for vc in vcs)
    return out


def demo_hosts() -> list[Host]:
    return [
        Host(f"philly-{i:03d}", "H100", dict.fromkeys(range(8), GpuHealth.HEALTHY), cpus=64, memory=512 * GIB)
        for i in range(1, 5)
    ]


def history_usage(
    jobs: Sequence[TraceJob], before_job: int, start_s: int, budgets: list[Budget], hosts: list[Host], days: float
) -> list[UsageRecord]:
    """The allocated GPU-time of ``import_history philly`` (the week before the replay, its defaults:
    load 1.2, runs capped at 8 h; the demo's 5 s grace), charged."""
    from scheduler.history import PHILLY_PREFIX, choose_jobs, simulate_philly
    from scheduler.trace import DEFAULT_MIN_RUNTIME_RULE, DEFAULT_UNALLOCATED_RULE, MinRuntimeRule, UnallocatedRule

    max_duration = 8 * 3600
    chosen, _ = choose_jobs(jobs, before_job, days, capacity_gpus=32, load=1.2, max_duration=max_duration)
    end_trace = next(j.submit_time_s for j in jobs if j.job_id == before_job)
    leaves = {b.name.removeprefix(PHILLY_PREFIX): b.key for b in budgets if b.name.startswith(PHILLY_PREFIX)}
    hist = simulate_philly(
        chosen,
        trace_end_s=end_trace,
        now=start_s,
        snapshot_hosts=hosts,
        budgets=budgets,
        budget_key_of={vc: k for vc, k in leaves.items() if vc in {j.vc for j in chosen}},
        min_rule=MinRuntimeRule.parse(DEFAULT_MIN_RUNTIME_RULE),
        unalloc_rule=UnallocatedRule.parse(DEFAULT_UNALLOCATED_RULE),
        max_duration=max_duration,
        grace=5,
        window=7 * 86400,
    )
    return [
        UsageRecord(pw.budget_key, pa.started_at, pa.ended_at, gpus=len(pa.gpus))
        for pw in hist.workloads
        for pa in pw.attempts
        if pa.allocated and pa.ended_at > pa.started_at
    ]


def run_demo(args: argparse.Namespace) -> tuple[Watch, Engine, dict[str, str]]:
    from scheduler.trace import (
        DEFAULT_MIN_RUNTIME_RULE,
        DEFAULT_UNALLOCATED_RULE,
        MinRuntimeRule,
        UnallocatedRule,
        parse_duration,
        plan_replay,
        read_trace,
        select_jobs,
    )
    from scripts.demo import DEMO_JOBS, DEMO_MAX_DURATION, DEMO_START_JOB, DEMO_TIME_SCALE, DEMO_WALL_TIME_SLACK

    _django()
    from scheduler.history import PHILLY_PREFIX

    jobs = read_trace(ROOT / "data" / "philly" / "philly_jobs.csv")
    chosen = select_jobs(jobs, start_job_id=DEMO_START_JOB, limit=DEMO_JOBS)
    plan = plan_replay(
        chosen,
        time_scale=DEMO_TIME_SCALE,
        max_duration_s=parse_duration(DEMO_MAX_DURATION),
        min_runtime_rule=MinRuntimeRule.parse(DEFAULT_MIN_RUNTIME_RULE),
        unallocated_rule=UnallocatedRule.parse(DEFAULT_UNALLOCATED_RULE),
        protection_allowance_s=1,
    )
    start = 1_800_000_000
    budgets, hosts = demo_budgets(), demo_hosts()
    full_run: dict[str, int] = {}
    groups: dict[str, tuple[str, int]] = {}
    watch = Watch(policy_for(args.exempt), args.grace)
    e = DemoEngine(full_run=full_run, groups=groups, start=start, tick_interval=1, grace=args.grace, with_reasons=False)
    e.scheduler = watch  # type: ignore[assignment]
    e.backoff = args.backoff
    for b in budgets:
        e.add_budget(b)
    for h in hosts:
        e.add_host(h)
    if args.history_days > 0:
        e.usage.extend(history_usage(jobs, DEMO_START_JOB, start, budgets, hosts, args.history_days))
    kind: dict[str, str] = {}
    # The demo submits its array to the first leaf made (scripts/demo.py, submit_array).
    first_leaf = next(b.key for b in budgets if b.name.startswith(PHILLY_PREFIX))
    # The array first (the demo submits it before the replay starts): 6 × 1 GPU, M = 0, 40 s, %2.
    for i in range(6):
        wid = f"demo-sweep[{i}]"
        full_run[wid] = 40
        groups[wid] = ("sweep", 2)
        e.submit(SimWorkload(wid, first_leaf, 1, "H100", 0, start, e.next_seq(), remaining=40, max_runtime=600))
        kind[wid] = "array"
    e.tick()
    for p in plan:
        gpus = p.job.num_gpus
        if gpus > 8 and gpus % 8:
            continue  # refused at submission (§3.3)
        t = start + math.ceil(p.offset_s)
        if t > e.now:
            e.advance_to(t)
        run = max(1, round(p.run_s))
        wid = f"philly-{p.job.job_id}"
        full_run[wid] = run
        m = p.min_runtime_s
        per_host = min(gpus, 8)
        e.submit(
            SimWorkload(
                wid,
                f"{PHILLY_PREFIX}{p.job.vc}",
                gpus,
                "H100",
                m,
                t,
                e.next_seq(),
                remaining=run,
                max_runtime=max(m, math.ceil(p.run_s)) + DEMO_WALL_TIME_SLACK,
                cpus=6 * per_host,
                memory=48 * GIB * per_host,
            )
        )
        kind[wid] = "allocated" if m > 0 else "unallocated"
        e.tick()
    end = e.now + 3600
    while e.now < end and any(w.state not in ("succeeded", "failed", "canceled") for w in e.workloads.values()):
        e.advance_to(e.now + 10)
    return watch, e, kind


def run_philly(args: argparse.Namespace) -> tuple[Watch, Engine, dict[str, str]]:
    from bench.replay_passes import prepare_slice
    from scheduler.sim.simulate import SimConfig, TraceSim, prepare

    cfg = SimConfig(days=args.days, hosts=args.hosts, grace_s=args.grace)
    inputs = prepare_slice(cfg, args.start_day) if args.start_day else prepare(cfg)
    watch = Watch(policy_for(args.exempt), args.grace)
    sim = TraceSim(inputs, watch)
    sim.run()
    kind = {wid: ("allocated" if w.min_runtime > 0 else "unallocated") for wid, w in sim.workloads.items()}
    return watch, sim, kind


# ------------------------------------------------------------------------------------ report
ON_GPUS = "started on the victim's GPUs"
ELSEWHERE = "started elsewhere"


def pct(n: int, d: int) -> str:
    return f"{n} ({100 * n / d:.0f} %)" if d else "0"


def quantiles(xs: list[int]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    q = statistics.quantiles(xs, n=10) if len(xs) > 1 else [xs[0]] * 9
    return f"median {statistics.median(xs):g}, p10 {q[0]:g}, p90 {q[8]:g}, max {xs[-1]} (n={len(xs)})"


def _taken_at(v: Victim) -> int:
    return min((t for t, _, _ in v.taken.values()), default=v.released or v.t)


def _start(v: Victim) -> tuple[int, int, tuple[GpuRef, ...]]:
    assert v.started is not None
    return v.started


def report_lines(watch: Watch, e: Engine, kind: dict[str, str], exempt: tuple[int, ...]) -> list[str]:
    """The figures of one run (docs/policy.md, "Churn of unallocated work")."""
    vs = watch.victims
    n = len(vs)
    out = [
        f"passes {watch.passes}; unallocated starts {watch.unalloc_starts}; preemptions of unallocated attempts {n}, "
        f"of allocated {watch.allocated_preemptions}"
    ]
    waits = [w.first_start - w.submitted_at for w in e.workloads.values() if w.min_runtime > 0 and w.first_start]
    if waits:
        out.append(
            f"  allocated workloads started {len(waits)}, mean wait to first start {statistics.fmean(waits):.1f} s"
        )
    if not n:
        return out
    out += [f"  {k:32s} {pct(c, n)}" for k, c in Counter(v.outcome() for v in vs).most_common()]
    on = [v for v in vs if v.outcome() == ON_GPUS]
    delays = [_start(v)[0] - (v.released or v.t) for v in on]
    out.append(f"  {ON_GPUS}: seconds after the release: {quantiles(delays)}")
    else_ = [v for v in vs if v.outcome() == ELSEWHERE]
    out.append(f"  {ELSEWHERE}: seconds after the stop: {quantiles([_start(v)[0] - v.t for v in else_])}")
    on_leaving = [v for v in else_ if set(_start(v)[2]) & v.leaving]
    known = [v for v in on_leaving if set(_start(v)[2]) <= v.leaving | v.free]
    chain = [v for v in known if set(_start(v)[2]) & v.leaving_victims]
    out.append(
        f"    on GPUs already leaving for nobody when it preempted: {pct(len(on_leaving), len(else_))}; wholly on "
        f"GPUs then leaving or free: {len(known)}, of them an earlier unallocated victim's: {len(chain)}"
    )
    out.append("  the victim's GPUs were taken first by:")
    out += [f"    {k:30s} {pct(c, n)}" for k, c in Counter(v.first_taker() for v in vs).most_common()]
    wasted = [v for v in vs if v.outcome() != ON_GPUS]
    back = [v for v in wasted if v.first_taker() in ("the victim itself again", "other unallocated work")]
    out.append(
        f"  freed for nothing (preemptor not on them): {pct(len(wasted), n)}; then to unallocated work: {len(back)}"
    )
    out.append(f"  victim's run before the stop (s): {quantiles([v.ran for v in vs])}")
    out.append(f"    of those freed for nothing: {quantiles([v.ran for v in wasted])}")
    out.append("  victims that had run " + ", ".join(f"< {x} s: {pct(sum(v.ran < x for v in vs), n)}" for x in exempt))
    held = sum(len(v.gpus) * max(0, min(v.released or v.t, _taken_at(v)) - v.t) for v in wasted)
    out.append(
        f"  GPU-s the victims had run: {sum(len(v.gpus) * v.ran for v in vs)} "
        f"({sum(len(v.gpus) * v.ran for v in wasted)} freed for nothing); stop to release of those: {held} GPU-s; "
        f"unallocated GPU-s delivered: {watch.unalloc_gpu_s(e)}"
    )
    per = Counter(v.workload for v in vs)
    top = ", ".join(f"{w} ×{c}" for w, c in per.most_common(5))
    out.append(f"  preempted workloads {len(per)}; most preempted: {top}")
    out.append(f"  victims by kind: {dict(Counter(kind.get(v.workload, '?') for v in vs))}")
    return out


def show_lines(vs: list[Victim], t0: int, kind: dict[str, str]) -> list[str]:
    out = ["  victims: t, victim, ran, preemptor (kind), GPUs, outcome, its start, first taker"]
    for v in vs:
        st = "-" if v.started is None else f"{v.started[0] - v.t:+d}s {v.started[2]}"
        out.append(
            f"    {v.t - t0:5d} {v.workload:18s} ran {v.ran:3d}s for {v.preemptor} ({kind.get(v.preemptor, '?')}) "
            f"{v.gpus} -> {v.outcome()}, {st}; {v.first_taker()}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("demo")
    d.add_argument("--grace", type=int, default=1)
    d.add_argument("--history-days", type=float, default=7.0)
    d.add_argument("--show", type=int, default=0)
    d.add_argument("--exempt", type=int, default=0, help="emulate PreemptExemptTime for unallocated work (s)")
    d.add_argument("--backoff", type=int, default=0, help="restart back-off base in seconds (a proposal; 0: none)")
    p = sub.add_parser("philly")
    p.add_argument("--start-day", type=float, default=41.0)
    p.add_argument("--days", type=float, default=3.0)
    p.add_argument("--hosts", type=int, default=64)
    p.add_argument("--grace", type=int, default=30)
    p.add_argument("--show", type=int, default=0)
    p.add_argument("--exempt", type=int, default=0, help="emulate PreemptExemptTime for unallocated work (s)")
    args = parser.parse_args(argv)
    watch, e, kind = run_demo(args) if args.mode == "demo" else run_philly(args)
    print("\n".join(report_lines(watch, e, kind, (1, 5, 10) if args.mode == "demo" else (60, 300, 600))))
    if args.show:
        print("\n".join(show_lines(watch.victims[: args.show], e.t0, kind)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
