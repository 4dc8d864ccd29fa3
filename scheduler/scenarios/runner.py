"""Play a scenario on a backend and check its expectations (tests/scenarios/FORMAT.md).

A backend exposes the same small surface whether it is the in-memory engine
(:class:`MemoryBackend`) or the database with the real tick
(``scheduler.scenarios.db_backend.DbBackend``): both must give the same results.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from budgets.rules import archive_problem, parent_problem, submission_problem
from scheduler.policy import Budget, GpuHealth, Host, HostState, OnCap, UsageRecord
from scheduler.policy.admission import infeasible_request
from scheduler.policy.queues import submission_verdict
from scheduler.policy.views import budget_usage, dispatch_order, ratio_order
from scheduler.scenarios.spec import (
    HostSpec,
    Scenario,
    ScenarioError,
    Step,
    WorkloadSpec,
    load_scenario,
    parse_duration,
)
from scheduler.sim.engine import Engine, SimWorkload, StepLog
from scheduler.sim.estimate import estimate_starts

ROOT = "(root)"
_UNFINISHED = frozenset({"pending", "running", "preempting"})


class Backend(Protocol):
    """What the runner needs from a backend. Ids are scenario workload ids; hosts by name."""

    def setup(self, sc: Scenario) -> None: ...
    def begin_step(self) -> None: ...
    def step_log(self) -> StepLog: ...
    def now(self) -> int: ...
    def tick(self) -> None: ...
    def advance_to(self, t: int) -> None: ...
    def submit(self, specs: list[WorkloadSpec]) -> dict[str, str]: ...
    def finish(self, ids: list[str], code: int) -> None: ...
    def cancel(self, ids: list[str]) -> None: ...
    def gpu(self, host: str, index: int, health: str, xid: int | None) -> None: ...
    def host(self, name: str, state: str) -> None: ...
    def add_host(self, spec: HostSpec) -> None: ...
    def remove_host(self, name: str) -> None: ...
    def create_budget(self, path: str, shares: int) -> None: ...
    def hold_budget(self, path: str, hold: bool) -> None: ...
    def archive_budget(self, path: str) -> None: ...
    def restart(self) -> None: ...
    # state
    def states(self) -> dict[str, str]: ...
    def placement(self, wid: str) -> list[tuple[str, int]]: ...
    def reasons(self) -> dict[str, str]: ...
    def usage_gpu_hours(self, path: str) -> float: ...
    def ratio_order(self, paths: list[str]) -> list[str]: ...
    def host_states(self) -> dict[str, str]: ...
    def preemptions(self, wid: str) -> int: ...
    def total_preemptions(self) -> int: ...
    def queue_order(self) -> list[str]: ...
    def reserved(self) -> dict[str, str]: ...
    def estimated_starts(self) -> dict[str, int]: ...
    def describe_last(self) -> list[str]: ...


def check_gpu_index(host: str, index: int, gpus: int) -> None:
    """A ``gpu`` step's index is one of its host's ``gpus`` (0..gpus-1); ValueError naming both
    otherwise (brk51: the memory backend added the GPU, and drained the host on a fatal XID, where
    the database backend ignored it, as a heartbeat's unknown index)."""
    if not 0 <= index < gpus:
        raise ValueError(f"host {host} has no GPU {index} (its GPUs are 0-{gpus - 1})")


def budget_key(path: str) -> str:
    return path


def parent_of(path: str) -> str:
    return path.rsplit("/", 1)[0] if "/" in path else ROOT


def expand_budgets(specs: list[tuple[str, int]]) -> list[tuple[str, str, int]]:
    """``(path, shares)`` in file order → ``(path, parent, shares)`` with missing parents (shares 1) first."""
    out: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for path, shares in specs:
        parts = path.split("/")
        for i in range(1, len(parts)):
            anc = "/".join(parts[:i])
            if anc not in seen:
                seen.add(anc)
                out.append((anc, parent_of(anc), 1))
        if path in seen:
            out = [(p, par, shares if p == path else s) for p, par, s in out]
        else:
            seen.add(path)
            out.append((path, parent_of(path), shares))
    return out


def place_running(
    spec: WorkloadSpec, hosts: dict[str, Host], taken: set[tuple[str, int]]
) -> tuple[tuple[str, int], ...]:
    """GPUs of a running workload of the scenario: given indices, else the lowest free ones."""
    names = [spec.host] if spec.host else list(spec.hosts or [])
    gpus: list[tuple[str, int]] = []
    if spec.host and spec.gpu_indices is not None:
        gpus = [(spec.host, i) for i in spec.gpu_indices]
    else:
        per = spec.gpus // len(names) if names else 0
        for name in names:
            if name not in hosts:
                raise ValueError(f"running workload {spec.id}: unknown host {name!r}")
            free = [i for i in sorted(hosts[name].gpu_health) if (name, i) not in taken]
            if len(free) < per:
                raise ValueError(f"running workload {spec.id}: host {name} has only {len(free)} free GPUs")
            gpus.extend((name, i) for i in free[:per])
    for g in gpus:
        if g[0] not in hosts or g[1] not in hosts[g[0]].gpu_health:
            raise ValueError(f"running workload {spec.id}: no GPU {g[1]} on host {g[0]!r}")
        if g in taken:
            raise ValueError(f"running workload {spec.id}: GPU {g[0]}:{g[1]} is already taken")
        taken.add(g)
    return tuple(gpus)


def host_from_spec(h: HostSpec) -> Host:
    return Host(
        h.name,
        h.model,
        dict.fromkeys(range(h.gpus), GpuHealth.HEALTHY),
        HostState.ACTIVE,
        dict(h.labels),
        cpus=h.cpus,
        memory=h.memory,
    )


class MemoryBackend:
    """The policy core on the discrete-event engine, everything in memory."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.sc: Scenario | None = None
        # The reasons a submission says at once (scheduler.policy.queues.submission_verdict, as
        # do_submit_workload stores them), until the next pass decides (``_said_at``: its Decisions)
        self._said: dict[str, str] = {}
        self._said_at: object = None

    @property
    def e(self) -> Engine:
        assert self.engine is not None  # noqa: S101 - setup() runs first
        return self.engine

    def setup(self, sc: Scenario) -> None:
        s = sc.settings
        self.sc = sc
        e = self.engine = Engine(
            start=s.start,
            window=s.lookback,
            tick_interval=s.tick_interval,
            grace=s.grace,
            max_reservations=s.max_reservations,
            auto_drain_on_gpu_fault=s.auto_drain_on_gpu_fault,
            host_lost_after=s.host_lost_after,
        )
        e.add_budget(Budget(ROOT, "(root)", None, 1))
        for path, parent, shares in expand_budgets([(b.path, b.shares) for b in sc.budgets]):
            e.add_budget(Budget(path, path.rsplit("/", 1)[-1], parent, shares))
        for h in sc.hosts:
            e.add_host(host_from_spec(h))
        for u in sc.usage:
            self._check_budget(u.budget, "usage")
            if u.gpu_hours is not None:
                at = s.start - u.ago
                e.usage.append(UsageRecord(u.budget, at, at, gpus=None, gpu_seconds=round(u.gpu_hours * 3600)))
            else:
                assert u.from_ago is not None and u.to_ago is not None  # noqa: S101 - validated by the loader
                e.usage.append(UsageRecord(u.budget, s.start - u.from_ago, s.start - u.to_ago, gpus=u.gpus))
        taken: set[tuple[str, int]] = set()
        for spec in sc.running:
            self._check_budget(spec.budget, spec.id)
            gpus = place_running(spec, e.hosts, taken)
            submitted = s.start - (spec.submitted_ago if spec.submitted_ago is not None else spec.elapsed)
            w = SimWorkload(
                spec.id,
                spec.budget,
                spec.gpus,
                spec.model,
                spec.min_runtime,
                submitted,
                e.next_seq(),
                remaining=spec.duration,
                cpus=spec.cpus,
                memory=spec.memory,
                max_runtime=spec.max_runtime,
            )
            e.add_running(w, gpus, s.start - spec.elapsed)
        for spec in sc.pending:
            self._check_budget(spec.budget, spec.id)
            w = SimWorkload(
                spec.id,
                spec.budget,
                spec.gpus,
                spec.model,
                spec.min_runtime,
                s.start - (spec.submitted_ago or 0),
                e.next_seq(),
                remaining=spec.duration,
                cpus=spec.cpus,
                memory=spec.memory,
                max_runtime=spec.max_runtime,
            )
            e.submit(w)

    def _check_budget(self, path: str, what: str) -> None:
        if path not in self.e.budgets:
            raise ValueError(f"{what}: unknown budget {path!r}")

    def begin_step(self) -> None:
        self.e.log = StepLog()

    def step_log(self) -> StepLog:
        return self.e.log

    def now(self) -> int:
        return self.e.now

    def tick(self) -> None:
        self.e.tick()

    def advance_to(self, t: int) -> None:
        self.e.advance_to(t)

    def submit(self, specs: list[WorkloadSpec]) -> dict[str, str]:
        e = self.e
        rejected: dict[str, str] = {}
        for spec in specs:
            if spec.budget not in e.budgets:
                rejected[spec.id] = "unknown_budget"
                continue
            live_children = any(b.parent == spec.budget and not b.archived for b in e.budgets.values())
            under = [p for p, b in e.budgets.items() if b.parent == spec.budget and b.archived]
            busy = sum(
                1
                for w in e.workloads.values()
                if w.state in _UNFINISHED and any(w.budget == p or w.budget.startswith(p + "/") for p in under)
            )
            refused = submission_problem(
                spec.budget,
                has_children=live_children,
                archived=e.budgets[spec.budget].archived,
                archived_children_work=busy,
            )
            if refused is not None:  # the rule do_submit_workload applies (budgets.rules)
                rejected[spec.id] = refused[0]
                continue
            bad = infeasible_request(
                [(h.model, h.size, h.cpus, h.memory) for h in e.hosts.values()],
                spec.model,
                spec.gpus,
                cpus=spec.cpus,
                memory=spec.memory,
            )
            if bad is not None:
                rejected[spec.id] = bad[0]
                continue
            if spec.id in e.workloads:
                raise ValueError(f"submit: workload id {spec.id!r} already exists")
            e.submit(
                SimWorkload(
                    spec.id,
                    spec.budget,
                    spec.gpus,
                    spec.model,
                    spec.min_runtime,
                    e.now - (spec.submitted_ago or 0),
                    e.next_seq(),
                    remaining=spec.duration,
                    cpus=spec.cpus,
                    memory=spec.memory,
                    max_runtime=spec.max_runtime,
                )
            )
            self._say_at_submission(spec)
        return rejected

    def _say_at_submission(self, spec: WorkloadSpec) -> None:
        """A budget on hold is said at once, as the database's submission stores it (tryout47b)."""
        chain: list[tuple[str, bool, float | None, OnCap]] = []
        path: str | None = spec.budget
        while path is not None:
            budget = self.e.budgets[path]
            chain.append((path, budget.hold, None, budget.on_cap))  # the scenarios' budgets have no caps
            path = budget.parent
        verdict = submission_verdict(chain, allocated=spec.min_runtime > 0)
        said = verdict.pending() if verdict is not None else None
        if said is None:
            return
        if self._said_at is not self.e.last:
            self._said, self._said_at = {}, self.e.last
        self._said[spec.id] = said[0]

    def _said_now(self) -> dict[str, str]:
        """:meth:`_say_at_submission`'s reasons no pass has replaced yet, of workloads still pending."""
        if self._said_at is not self.e.last:
            return {}
        return {k: r for k, r in self._said.items() if self.e.workloads[k].state == "pending"}

    def finish(self, ids: list[str], code: int) -> None:
        for wid in ids:
            a = self.e.attempt_of(wid)
            if a is None:
                raise ValueError(f"workload {wid!r} has no running attempt to {'finish' if code == 0 else 'fail'}")
            self.e.exit_attempt(a, code)

    def cancel(self, ids: list[str]) -> None:
        for wid in ids:
            self.e.cancel(wid)

    def gpu(self, host: str, index: int, health: str, xid: int | None) -> None:
        check_gpu_index(host, index, len(self.e.hosts[host].gpu_health))
        self.e.set_gpu_health(host, index, GpuHealth(health), xid)

    def host(self, name: str, state: str) -> None:
        self.e.set_host_state(name, state)

    def add_host(self, spec: HostSpec) -> None:
        self.e.add_host(host_from_spec(spec))

    def remove_host(self, name: str) -> None:
        self.e.remove_host(name)

    def create_budget(self, path: str, shares: int) -> None:
        for p, parent, s in expand_budgets([(path, shares)]):
            if p not in self.e.budgets:
                busy = sum(1 for w in self.e.workloads.values() if w.budget == parent and w.state in _UNFINISHED)
                # the rule do_create_budget applies (budgets.rules), as the db backend answers
                refused = parent_problem(parent, archived=self.e.budgets[parent].archived, unfinished=busy)
                if refused is not None:
                    raise ValueError(refused[2])
                self.e.add_budget(Budget(p, p.rsplit("/", 1)[-1], parent, s))

    def hold_budget(self, path: str, hold: bool) -> None:
        self.e.budgets[path] = replace(self.e.budgets[path], hold=hold)

    def archive_budget(self, path: str) -> None:
        # the rule do_archive_budget applies (budgets.rules), as the db backend answers
        if (refused := archive_problem(path, root=path == ROOT)) is not None:
            raise ValueError(refused[2])
        self.e.budgets[path] = replace(self.e.budgets[path], archived=True)

    def restart(self) -> None:
        # The engine keeps only durable state; rebuild the derived decision view.
        self.e.last = type(self.e.last)()

    def states(self) -> dict[str, str]:
        return {w.id: w.state for w in self.e.workloads.values()}

    def placement(self, wid: str) -> list[tuple[str, int]]:
        a = self.e.attempt_of(wid)
        return list(a.gpus) if a else []

    def reasons(self) -> dict[str, str]:
        return {**self._said_now(), **{k: str(v.reason) for k, v in self.e.last.pending.items()}}

    def usage_gpu_hours(self, path: str) -> float:
        return budget_usage(self.e.snapshot()).get(path, 0) / 3600

    def ratio_order(self, paths: list[str]) -> list[str]:
        return ratio_order(self.e.snapshot(), paths)

    def host_states(self) -> dict[str, str]:
        return {n: str(h.state) for n, h in self.e.hosts.items()}

    def preemptions(self, wid: str) -> int:
        return self.e.workloads[wid].preemptions

    def total_preemptions(self) -> int:
        return self.e.total_preemptions

    def queue_order(self) -> list[str]:
        return dispatch_order(self.e.snapshot())

    def reserved(self) -> dict[str, str]:
        return dict(self.e.last.reservations)

    def estimated_starts(self) -> dict[str, int]:
        """Pending workload id → estimated start − now (seconds), from one forward simulation."""
        snap = self.e.snapshot()
        running = {a.workload: self.e.workloads[a.workload].as_pending() for a in self.e.attempts.values()}
        limits = {wid: w.max_runtime for wid, w in self.e.workloads.items() if w.max_runtime is not None}
        found = estimate_starts(snap, grace=self.e.grace, running=running, limits=limits, requeued=self.e.requeued())
        return {wid: t - snap.now for wid, t in found.items()}

    def describe_last(self) -> list[str]:
        said = {k: f"{r} {{}}" for k, r in self._said_now().items() if k not in self.e.last.pending}
        decided = {k: f"{v.reason} {v.detail}" for k, v in self.e.last.pending.items()}
        return [f"{k}: {line}" for k, line in sorted({**said, **decided}.items())]


@dataclass
class Failure:
    step: int
    key: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return f"step {self.step}: {self.key}: expected {self.expected!r}, got {self.actual!r}"


@dataclass
class Result:
    file: str
    name: str
    failures: list[Failure] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures


def _hosts_of(gpus: list[tuple[str, int]] | tuple[tuple[str, int], ...]) -> list[str]:
    return sorted({h for h, _ in gpus})


def _match_place(expected: Any, gpus: list[tuple[str, int]] | tuple[tuple[str, int], ...]) -> bool:
    if isinstance(expected, str):
        return _hosts_of(gpus) == [expected]
    if isinstance(expected, list):
        return _hosts_of(gpus) == sorted(str(h) for h in expected)
    if isinstance(expected, dict):
        host = expected.get("host")
        idx = expected.get("gpu_indices")
        ok = _hosts_of(gpus) == [host]
        if idx is not None:
            ok = ok and sorted(i for _, i in gpus) == sorted(idx)
        return ok
    return False


def _fmt_place(gpus: list[tuple[str, int]] | tuple[tuple[str, int], ...]) -> str:
    by: dict[str, list[int]] = {}
    for h, i in gpus:
        by.setdefault(h, []).append(i)
    return " ".join(f"{h}[{','.join(map(str, sorted(v)))}]" for h, v in sorted(by.items()))


def check(be: Backend, step: Step, rejected: dict[str, str], fails: list[Failure]) -> None:
    """Compare one step's expectations with the backend's log and state."""
    exp = step.expect or {}
    log = be.step_log()
    states = be.states()

    def fail(key: str, expected: Any, actual: Any) -> None:
        fails.append(Failure(step.index, key, expected, actual))

    if "started" in exp:
        e = exp["started"]
        if isinstance(e, list):
            if sorted(map(str, e)) != sorted(log.started):
                fail("started", sorted(map(str, e)), sorted(log.started))
        else:
            if sorted(map(str, e)) != sorted(log.started):
                fail("started", sorted(map(str, e)), sorted(log.started))
            for wid, where in e.items():
                got = log.started.get(str(wid))
                if got is not None and not _match_place(where, got):
                    fail(f"started.{wid}", where, _fmt_place(got))
    if "preempted" in exp:
        want = sorted(map(str, exp["preempted"] or []))
        got = sorted(set(log.preempted))
        if want != got:
            fail("preempted", want, got)
    for wid in exp.get("not_started") or []:
        if str(wid) in log.started:
            fail("not_started", wid, "started")
    for wid in exp.get("not_preempted") or []:
        if str(wid) in log.preempted:
            fail("not_preempted", wid, "preempted")
    running = sorted(k for k, v in states.items() if v == "running")
    if "running" in exp:
        missing = [str(w) for w in exp["running"] if states.get(str(w)) != "running"]
        if missing:
            fail("running", sorted(map(str, exp["running"])), running)
    if "running_exactly" in exp and sorted(map(str, exp["running_exactly"])) != running:
        fail("running_exactly", sorted(map(str, exp["running_exactly"])), running)
    if "pending" in exp:
        bad = {str(w): states.get(str(w)) for w in exp["pending"] if states.get(str(w)) != "pending"}
        if bad:
            fail("pending", sorted(map(str, exp["pending"])), bad)
    if "preempting" in exp:
        bad = {str(w): states.get(str(w)) for w in exp["preempting"] if states.get(str(w)) != "preempting"}
        if bad:
            fail("preempting", sorted(map(str, exp["preempting"])), bad)
    if "rejected" in exp:
        for wid, reason in (exp["rejected"] or {}).items():
            got = rejected.get(str(wid))
            if got is None or (reason != "any" and got != reason):
                fail(f"rejected.{wid}", reason, got or "accepted")
    if "placement" in exp:
        for wid, where in exp["placement"].items():
            got = be.placement(str(wid))
            if not got or not _match_place(where, got):
                fail(f"placement.{wid}", where, _fmt_place(got) if got else states.get(str(wid)))
    if "reasons" in exp:
        reasons = be.reasons()
        for wid, code in exp["reasons"].items():
            got = reasons.get(str(wid)) if states.get(str(wid)) == "pending" else states.get(str(wid))
            if got != code:
                fail(f"reasons.{wid}", code, got)
    if "usage" in exp:
        for path, hours in exp["usage"].items():
            got = be.usage_gpu_hours(str(path))
            if abs(got - float(hours)) > 0.01:
                fail(f"usage.{path}", hours, round(got, 4))
    if "ratio_order" in exp:
        want = [str(p) for p in exp["ratio_order"]]
        got = be.ratio_order(want)
        if got != want:
            fail("ratio_order", want, got)
    if "host_states" in exp:
        hs = be.host_states()
        for h, st in exp["host_states"].items():
            if hs.get(str(h)) != st:
                fail(f"host_states.{h}", st, hs.get(str(h)))
    if "preemptions" in exp:
        for wid, n in exp["preemptions"].items():
            if str(wid) not in states:  # never submitted, or refused: a KeyError in the backend (brk32)
                fail(f"preemptions.{wid}", n, "no such workload")
                continue
            got = be.preemptions(str(wid))
            if got != n:
                fail(f"preemptions.{wid}", n, got)
    if "total_preemptions" in exp and be.total_preemptions() != exp["total_preemptions"]:
        fail("total_preemptions", exp["total_preemptions"], be.total_preemptions())
    if "queue_order" in exp:
        want = [str(w) for w in exp["queue_order"]]
        order = [w for w in be.queue_order() if w in set(want)]
        if order != want:
            fail("queue_order", want, order)
    if "reserved" in exp:
        res = be.reserved()
        for h, wid in exp["reserved"].items():
            if res.get(str(h)) != str(wid):
                fail(f"reserved.{h}", wid, res.get(str(h)))
    if "estimated_start" in exp:
        est = be.estimated_starts()
        for wid, when in exp["estimated_start"].items():
            want = None if when is None or when == "none" else parse_duration(when)
            got = est.get(str(wid))
            if got != want:
                fail(f"estimated_start.{wid}", when, "none" if got is None else f"{got}s")


def run_scenario(
    path: str, backend: Backend, *, verbose: bool = False, emit: Callable[[str], None] | None = None
) -> Result:
    """Load and play one scenario file. Raises ScenarioError for a malformed file."""
    sc = load_scenario(path)
    res = Result(sc.file, sc.name)
    out = emit or res.lines.append
    try:
        backend.setup(sc)
    except ValueError as exc:
        raise ScenarioError(sc.file, "setup", str(exc)) from None
    t0 = sc.settings.start
    for step in sc.steps:
        backend.begin_step()
        rejected: dict[str, str] = {}
        key = f"steps[{step.index}].{step.kind}"
        try:
            if step.kind == "tick":
                backend.tick()
            elif step.kind == "advance":
                backend.advance_to(backend.now() + step.arg)
            elif step.kind == "at":
                target = t0 + step.arg
                if target < backend.now():
                    raise ScenarioError(sc.file, key, "goes back in time")
                backend.advance_to(target)
            elif step.kind == "submit":
                rejected = backend.submit(step.arg)
            elif step.kind in ("finish", "fail"):
                backend.finish(step.arg, 0 if step.kind == "finish" else 1)
            elif step.kind == "cancel":
                backend.cancel(step.arg)
            elif step.kind == "gpu":
                backend.gpu(step.arg["host"], step.arg["index"], step.arg["health"], step.arg["xid"])
            elif step.kind == "host":
                backend.host(step.arg["name"], step.arg["state"])
            elif step.kind == "add_host":
                for h in step.arg:
                    backend.add_host(h)
            elif step.kind == "remove_host":
                backend.remove_host(step.arg)
            elif step.kind == "create_budget":
                backend.create_budget(step.arg.path, step.arg.shares)
            elif step.kind == "budget":
                backend.hold_budget(step.arg["path"], step.arg["hold"])
            elif step.kind == "archive_budget":
                backend.archive_budget(step.arg)
            elif step.kind == "restart":
                backend.restart()
        except (KeyError, ValueError) as exc:
            raise ScenarioError(sc.file, key, f"cannot apply: {exc}") from None
        log = backend.step_log()
        minutes = (backend.now() - t0) / 60
        head = f"[t0+{minutes:g}m] {step.kind}"
        if log.started or log.preempted or verbose:
            started = ", ".join(f"{w}→{_fmt_place(g)}" for w, g in sorted(log.started.items()))
            out(f"{head}: started [{started}] preempted {sorted(set(log.preempted))}")
        else:
            out(head)
        if rejected:
            out(f"  rejected {rejected}")
        if verbose:
            for line in backend.describe_last():
                out(f"  pending {line}")
            if backend.reserved():
                out(f"  reserved {backend.reserved()}")
        if step.expect:
            before = len(res.failures)
            check(backend, step, rejected, res.failures)
            for f in res.failures[before:]:
                out(f"  FAIL {f}")
    return res
