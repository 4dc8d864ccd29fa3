"""Parse and validate scenario files (tests/scenarios/FORMAT.md). No Django.

Every problem raises :class:`ScenarioError` naming the file, the key path and the
problem; nothing here raises anything else on bad input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from agent.protocol import HOST_NAME_RE, HOST_NAME_RULE, MAX_HOST_GPUS
from budgets.rules import budget_name_problem
from fairway_common import strict_yaml
from scheduler.gpu_text import gpu_text_problem, invisible_problem, labels_problem
from scheduler.sizes import SizeError, parse_size
from scheduler.trace import DURATION_RE, duration_seconds

DEFAULT_START = "2026-01-05T00:00:00Z"

# MAX_HOST_GPUS (imported above) is the agent protocol's: the most GPUs a host reports, joins or starts
# with (256). Not its GPU index bound, 0..1023, which this file's 1,024 was (left47; docs/simulation.md).
MAX_TICKS = 1_000_000  # ticks while time passes, over the whole scenario (115 days at 10 s)
MAX_HOST_COUNT = 100_000  # hosts of one ``count:`` entry (the benchmarks use 4,000)


def cluster_size_problem(hosts: tuple[str, int], gpus: tuple[str, int]) -> str | None:
    """Why a command's cluster of ``hosts`` hosts with ``gpus`` GPUs each is refused, or None: past a
    scenario file's bounds (:data:`MAX_HOST_COUNT` hosts, :data:`MAX_HOST_GPUS` GPUs a host) the
    hosts were built until memory ran out (brk47: ``simulate --hosts/--gpus-per-host``; left47:
    ``seed_demo --hosts/--gpus``). Each is ``(flag, value)``; the words name the flag."""
    for (flag, value), most in ((hosts, MAX_HOST_COUNT), (gpus, MAX_HOST_GPUS)):
        if value > most:
            return f"{flag}: at most {most}, not {value}"
    return None


# What the db backend's models store and services accept, so that both backends take the same files
# (FORMAT.md): a value past these passed the memory backend and was a traceback in the db one.
MAX_INT = 2**31 - 1  # any integer (shares, GPUs, CPUs): the models' integer columns on every database
MAX_SIZE = 1 << 50  # memory sizes: scheduler.services.MAX_MEMORY_BYTES
MAX_GPU_HOURS = 1e9  # one usage lump (.inf was an OverflowError in both backends)
MAX_DURATION_S = 3650 * 86400  # any one duration
MAX_CLOCK_S = 100 * 365 * 86400  # how far the steps may move the clock past settings.start
START_RANGE = (1970, 2200)  # settings.start's year

STEP_KINDS = {
    "tick",
    "advance",
    "at",
    "submit",
    "finish",
    "fail",
    "cancel",
    "gpu",
    "host",
    "add_host",
    "remove_host",
    "create_budget",
    "budget",
    "archive_budget",
    "restart",
    "expect",
}
EXPECT_KEYS = {
    "started",
    "preempted",
    "not_started",
    "not_preempted",
    "running",
    "running_exactly",
    "pending",
    "preempting",
    "rejected",
    "placement",
    "reasons",
    "usage",
    "ratio_order",
    "host_states",
    "preemptions",
    "total_preemptions",
    "queue_order",
    "reserved",
    "estimated_start",
}
SETTING_KEYS = {
    "lookback",
    "max_reservations",
    "auto_drain_on_gpu_fault",
    "grace",
    "tick_interval",
    "start",
    "host_lost_after",
}


class ScenarioError(Exception):
    """A malformed scenario: ``str(err)`` is ``FILE: KEY: problem``."""

    def __init__(self, file: str, key: str, problem: str) -> None:
        super().__init__(f"{file}: {key}: {problem}")
        self.file = file
        self.key = key
        self.problem = problem


def parse_duration(value: Any, file: str = "?", key: str = "?", most: int | None = MAX_DURATION_S) -> int:
    """``90s``, ``2h1m``, ``6d12h``, ``2w``, ``0`` (or an integer of seconds) → seconds, at most
    ``most`` (None: unbounded, for the steps that move the clock, which the clock's limits bound)."""
    if isinstance(value, bool):
        raise ScenarioError(file, key, f"{value!r} is not a duration")
    if isinstance(value, int):
        if value == 0:
            return 0
        raise ScenarioError(file, key, f"{value!r} needs a unit (e.g. {value}s, {value}m)")
    if not isinstance(value, str):
        raise ScenarioError(file, key, f"{value!r} is not a duration like 90s, 30m, 2h, 1d")
    text = value.strip()
    if text == "0":
        return 0
    m = DURATION_RE.match(text)
    if not text or not m or not any(m.groups()):
        raise ScenarioError(file, key, f"{value!r} is not a duration like 90s, 30m, 2h, 1d, 2w or 0")
    seconds = duration_seconds(m)
    if most is not None and seconds > most:  # 99999999d overflowed the db backend's datetimes (memory ran)
        raise ScenarioError(file, key, f"{value!r} is longer than {most // 86400} days")
    return seconds


def parse_start(value: Any, file: str) -> int:
    """An ISO-8601 UTC instant → epoch seconds."""
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(dt.timestamp())
    if not isinstance(value, str):
        raise ScenarioError(file, "settings.start", f"{value!r} is not an ISO-8601 UTC time")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ScenarioError(file, "settings.start", f"{value!r} is not an ISO-8601 UTC time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    if not START_RANGE[0] <= dt.year < START_RANGE[1]:  # 9999-12-31 + 1d: the db backend's OverflowError
        raise ScenarioError(file, "settings.start", f"{value!r} is not from {START_RANGE[0]} to {START_RANGE[1] - 1}")
    return int(dt.timestamp())


@dataclass
class Settings:
    lookback: int = 7 * 86400
    max_reservations: int = 8
    auto_drain_on_gpu_fault: bool = True
    grace: int = 0
    tick_interval: int = 10
    start: int = 0
    host_lost_after: int = 300


@dataclass
class HostSpec:
    name: str
    gpus: int = 8
    model: str = "H100"
    cluster: str = "default"
    labels: dict[str, str] = field(default_factory=dict)
    cpus: int | None = None  # None: 8 per GPU (FORMAT.md)
    memory: int | None = None  # bytes; None: 64G per GPU

    def __post_init__(self) -> None:
        if self.cpus is None:
            self.cpus = 8 * self.gpus
        if self.memory is None:
            self.memory = 64 * self.gpus << 30


@dataclass
class BudgetSpec:
    path: str
    shares: int = 1


@dataclass
class UsageSpec:
    budget: str
    gpu_hours: float | None = None
    ago: int = 86400
    gpus: int | None = None
    from_ago: int | None = None
    to_ago: int | None = None


@dataclass
class WorkloadSpec:
    id: str
    budget: str
    gpus: int
    min_runtime: int
    model: str = "H100"
    duration: int | None = None
    submitted_ago: int | None = None
    cpus: int | None = None  # per host; None: the host's per-GPU share (DESIGN.md §3.3)
    memory: int | None = None  # bytes per host; None: the host's per-GPU share
    max_runtime: int | None = None
    # running only
    host: str | None = None
    hosts: list[str] | None = None
    gpu_indices: list[int] | None = None
    elapsed: int = 0


@dataclass
class Step:
    kind: str
    arg: Any
    expect: dict[str, Any] | None
    index: int


@dataclass
class Scenario:
    file: str
    name: str
    description: str
    settings: Settings
    hosts: list[HostSpec]
    budgets: list[BudgetSpec]
    usage: list[UsageSpec]
    running: list[WorkloadSpec]
    pending: list[WorkloadSpec]
    steps: list[Step]


def _mapping(v: Any, file: str, key: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ScenarioError(file, key, f"expected a mapping, got {type(v).__name__}")
    return v


def _list(v: Any, file: str, key: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ScenarioError(file, key, f"expected a list, got {type(v).__name__}")
    return v


def int_problem(v: Any, minimum: int = 0, maximum: int = MAX_INT) -> str | None:
    """Why ``v`` (a value as :func:`fairway_common.strict_yaml.load` reads it) is not a whole number
    in ``[minimum, maximum]`` (None: it is): a scenario file's integers and the simulator's budget
    file's shares (``scheduler.sim.budgets``, its scalars read by ``strict_yaml.scalar``)."""
    if isinstance(v, bool) or not isinstance(v, int):
        return f"{v!r} is not an integer"
    if v < minimum:
        return f"{v} must be >= {minimum}"
    if v > maximum:
        return f"{v} must be <= {maximum}"
    return None


def _int(v: Any, file: str, key: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if problem := int_problem(v, minimum, maximum):
        raise ScenarioError(file, key, problem)
    return int(v)


def _str(v: Any, file: str, key: str) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int)) or str(v) == "" or "\x00" in str(v):
        raise ScenarioError(file, key, f"{v!r} is not a name")
    return str(v)


def _workload_id(v: Any, file: str, key: str) -> str:
    """A workload's id, its name in the db backend: printable text by the rule of a submission's
    name (:func:`scheduler.gpu_text.invisible_problem`)."""
    name = _str(v, file, key)
    if problem := invisible_problem(name):
        raise ScenarioError(file, key, f"a workload id {problem}")
    return name


def _model(v: Any, file: str, key: str) -> str:
    """A GPU model by the rule of a join and a submission (:func:`scheduler.gpu_text.gpu_text_problem`):
    a model the db backend's services refuse was taken by the memory backend."""
    model = _str(v, file, key)
    if problem := gpu_text_problem(model):
        raise ScenarioError(file, key, f"a GPU model {problem}")
    return model


def _budget_path(v: Any, file: str, key: str) -> str:
    """A budget's path: names of 1-100 characters joined by '/', printable text (the rule of the db
    backend's Budget, ``budgets.models.budget_name_problem``)."""
    path = _str(v, file, key)
    for name in path.split("/"):
        if problem := budget_name_problem(name):
            raise ScenarioError(file, key, f"{path[:120]!r}: {problem}")
    return path


def _known(d: dict[str, Any], allowed: set[str], file: str, key: str) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        raise ScenarioError(file, f"{key}.{extra[0]}", f"unknown key (known: {', '.join(sorted(allowed))})")


def _workload(d: Any, file: str, key: str, running: bool) -> WorkloadSpec:
    d = _mapping(d, file, key)
    allowed = {
        "id",
        "budget",
        "gpus",
        "min_runtime",
        "model",
        "duration",
        "submitted_ago",
        "cpus",
        "memory",
        "max_runtime",
    }
    if running:
        allowed |= {"host", "hosts", "gpu_indices", "elapsed"}
    _known(d, allowed, file, key)
    for req in ("id", "budget", "gpus", "min_runtime"):
        if req not in d:
            raise ScenarioError(file, f"{key}.{req}", "is required")
    w = WorkloadSpec(
        id=_workload_id(d["id"], file, f"{key}.id"),
        budget=_str(d["budget"], file, f"{key}.budget"),
        gpus=_int(d["gpus"], file, f"{key}.gpus", 1),
        min_runtime=parse_duration(d["min_runtime"], file, f"{key}.min_runtime"),
        model=_model(d.get("model", "H100"), file, f"{key}.model"),
        duration=parse_duration(d["duration"], file, f"{key}.duration") if "duration" in d else None,
        submitted_ago=parse_duration(d["submitted_ago"], file, f"{key}.submitted_ago")
        if "submitted_ago" in d
        else None,
        cpus=_int(d["cpus"], file, f"{key}.cpus", 1) if "cpus" in d else None,
        memory=_size(d["memory"], file, f"{key}.memory") if "memory" in d else None,
        max_runtime=parse_duration(d["max_runtime"], file, f"{key}.max_runtime") if "max_runtime" in d else None,
    )
    if w.max_runtime is not None and w.max_runtime < max(1, w.min_runtime):
        raise ScenarioError(file, f"{key}.max_runtime", "must be at least min_runtime (DESIGN.md §4) and > 0")
    if running:
        if "host" in d and "hosts" in d:
            raise ScenarioError(file, key, "give host or hosts, not both")
        if "host" not in d and "hosts" not in d:
            raise ScenarioError(file, f"{key}.host", "is required for a running workload")
        if "host" in d:
            w.host = _str(d["host"], file, f"{key}.host")
        else:
            w.hosts = [_str(h, file, f"{key}.hosts") for h in _list(d["hosts"], file, f"{key}.hosts")]
        if "gpu_indices" in d:
            w.gpu_indices = [_int(i, file, f"{key}.gpu_indices") for i in _list(d["gpu_indices"], file, key)]
            if len(w.gpu_indices) != w.gpus:
                raise ScenarioError(file, f"{key}.gpu_indices", f"lists {len(w.gpu_indices)} GPUs, gpus is {w.gpus}")
        w.elapsed = parse_duration(d.get("elapsed", 0), file, f"{key}.elapsed")
    return w


_EXPECT_LISTS = {"running", "running_exactly", "pending", "preempting", "ratio_order", "queue_order"}
_EXPECT_OPTIONAL_LISTS = {"preempted", "not_started", "not_preempted"}  # null means []
_EXPECT_MAPPINGS = {"placement", "reasons", "host_states", "reserved"}


def _check_expect(e: Any, file: str, key: str) -> dict[str, Any]:
    """Validate an ``expect:`` mapping's shape, so a typo fails the load with its key instead of
    a traceback mid-run, or (``usage: {A: .nan}``) an expectation that can never fail."""
    e = _mapping(e, file, key)
    _known(e, EXPECT_KEYS, file, key)
    for name, value in e.items():
        where = f"{key}.{name}"
        if name in _EXPECT_LISTS or (name in _EXPECT_OPTIONAL_LISTS and value is not None):
            if not isinstance(value, list):
                raise ScenarioError(file, where, f"expected a list, got {type(value).__name__}")
            for i, item in enumerate(value):
                _str(item, file, f"{where}[{i}]")
        elif name == "started":
            if not isinstance(value, list | dict):
                raise ScenarioError(file, where, f"expected a list or a mapping, got {type(value).__name__}")
        elif name in _EXPECT_MAPPINGS or (name == "rejected" and value is not None):
            _mapping(value, file, where)
        elif name == "usage":
            for budget, hours in _mapping(value, file, where).items():
                if isinstance(hours, bool) or not isinstance(hours, int | float) or not math.isfinite(hours):
                    raise ScenarioError(file, f"{where}.{budget}", f"{hours!r} is not a number of GPU-hours")
        elif name == "preemptions":
            for wid, n in _mapping(value, file, where).items():
                _int(n, file, f"{where}.{wid}")
        elif name == "total_preemptions":
            _int(value, file, where)
        elif name == "estimated_start":
            for wid, when in _mapping(value, file, where).items():
                if when is not None and when != "none":
                    parse_duration(when, file, f"{where}.{wid}")
    return e


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate one scenario file. Raises ScenarioError on any problem."""
    file = str(path)
    try:
        text = strict_yaml.read_text(path)  # bounded: /dev/zero read until memory ran out (brk51)
    except strict_yaml.TooLong as exc:
        raise ScenarioError(file, "-", f"{exc}: not a scenario file") from None
    except OSError as exc:
        raise ScenarioError(file, "-", f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ScenarioError(file, "-", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        doc = strict_yaml.load(text)
    except strict_yaml.Refused as exc:
        raise ScenarioError(file, f"line {exc.line}", exc.problem) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "-"
        raise ScenarioError(file, where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:  # thousands of nested "[": the composer recurses per level
        raise ScenarioError(file, "-", "not valid YAML: nested too deeply") from None
    doc = _mapping(doc, file, "(top)")
    _known(
        doc,
        {"name", "description", "settings", "hosts", "budgets", "usage", "running", "pending", "steps"},
        file,
        "(top)",
    )
    s = Settings(start=parse_start(DEFAULT_START, file))
    raw = _mapping(doc.get("settings") or {}, file, "settings")
    _known(raw, SETTING_KEYS, file, "settings")
    if "lookback" in raw:
        s.lookback = parse_duration(raw["lookback"], file, "settings.lookback")
        if s.lookback <= 0:
            raise ScenarioError(file, "settings.lookback", "must be longer than 0")
    if "max_reservations" in raw:
        s.max_reservations = _int(raw["max_reservations"], file, "settings.max_reservations")
    if "auto_drain_on_gpu_fault" in raw:
        if not isinstance(raw["auto_drain_on_gpu_fault"], bool):
            raise ScenarioError(file, "settings.auto_drain_on_gpu_fault", "must be true or false")
        s.auto_drain_on_gpu_fault = raw["auto_drain_on_gpu_fault"]
    if "grace" in raw:
        s.grace = parse_duration(raw["grace"], file, "settings.grace")
    if "tick_interval" in raw:
        s.tick_interval = parse_duration(raw["tick_interval"], file, "settings.tick_interval")
        if s.tick_interval <= 0:
            raise ScenarioError(file, "settings.tick_interval", "must be longer than 0")
    if "start" in raw:
        s.start = parse_start(raw["start"], file)
    if "host_lost_after" in raw:
        s.host_lost_after = parse_duration(raw["host_lost_after"], file, "settings.host_lost_after")

    hosts: list[HostSpec] = []
    if "hosts" not in doc:
        raise ScenarioError(file, "hosts", "is required")
    for i, h in enumerate(_list(doc["hosts"], file, "hosts")):
        key = f"hosts[{i}]"
        hosts.extend(_host_specs(h, file, key))
    names = [h.name for h in hosts]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise ScenarioError(file, "hosts", f"host {dup!r} is defined twice")

    budgets: list[BudgetSpec] = []
    for i, b in enumerate(_list(doc.get("budgets"), file, "budgets")):
        key = f"budgets[{i}]"
        b = _mapping(b, file, key)
        _known(b, {"path", "shares"}, file, key)
        if "path" not in b:
            raise ScenarioError(file, f"{key}.path", "is required")
        budgets.append(
            BudgetSpec(_budget_path(b["path"], file, f"{key}.path"), _int(b.get("shares", 1), file, f"{key}.shares", 1))
        )

    usage: list[UsageSpec] = []
    for i, u in enumerate(_list(doc.get("usage"), file, "usage")):
        key = f"usage[{i}]"
        u = _mapping(u, file, key)
        _known(u, {"budget", "gpu_hours", "ago", "gpus", "from_ago", "to_ago"}, file, key)
        if "budget" not in u:
            raise ScenarioError(file, f"{key}.budget", "is required")
        spec = UsageSpec(budget=_str(u["budget"], file, f"{key}.budget"))
        if "gpu_hours" in u:
            gh = u["gpu_hours"]
            if isinstance(gh, bool) or not isinstance(gh, (int, float)) or not 0 <= gh <= MAX_GPU_HOURS:
                raise ScenarioError(file, f"{key}.gpu_hours", f"{gh!r} is not a non-negative number")
            spec.gpu_hours = float(gh)
            spec.ago = parse_duration(u.get("ago", "1d"), file, f"{key}.ago")
        elif "gpus" in u:
            spec.gpus = _int(u["gpus"], file, f"{key}.gpus", 1)
            for k in ("from_ago", "to_ago"):
                if k not in u:
                    raise ScenarioError(file, f"{key}.{k}", "is required with gpus")
            spec.from_ago = parse_duration(u["from_ago"], file, f"{key}.from_ago")
            spec.to_ago = parse_duration(u["to_ago"], file, f"{key}.to_ago")
            if spec.to_ago > spec.from_ago:
                raise ScenarioError(file, f"{key}.to_ago", "must be less than from_ago")
        else:
            raise ScenarioError(file, key, "needs gpu_hours or gpus with from_ago/to_ago")
        usage.append(spec)

    running = [
        _workload(w, file, f"running[{i}]", True) for i, w in enumerate(_list(doc.get("running"), file, "running"))
    ]
    pending = [
        _workload(w, file, f"pending[{i}]", False) for i, w in enumerate(_list(doc.get("pending"), file, "pending"))
    ]
    ids = [w.id for w in running + pending]
    if len(set(ids)) != len(ids):
        dup = next(x for x in ids if ids.count(x) > 1)
        raise ScenarioError(file, "running/pending", f"workload id {dup!r} is used twice")

    steps: list[Step] = []
    clock = 0  # seconds after t0 at the end of each step (only advance and at move it)
    for i, st in enumerate(_list(doc.get("steps"), file, "steps")):
        key = f"steps[{i}]"
        st = _mapping(st, file, key)
        expect = st.get("expect")
        kinds = [k for k in st if k != "expect"]
        if not kinds:
            if expect is None:
                raise ScenarioError(file, key, "an empty step")
            steps.append(Step("expect", None, _check_expect(expect, file, f"{key}.expect"), i))
            continue
        if len(kinds) != 1:
            raise ScenarioError(file, key, f"one action per step, got {', '.join(map(str, kinds))}")
        kind = kinds[0]
        if kind not in STEP_KINDS:
            raise ScenarioError(file, f"{key}.{kind}", f"unknown step (known: {', '.join(sorted(STEP_KINDS))})")
        arg = _step_arg(kind, st[kind], file, f"{key}.{kind}")
        if kind in ("advance", "at"):
            clock = clock + arg if kind == "advance" else max(clock, arg)
            if clock // s.tick_interval > MAX_TICKS:  # a tick every tick_interval: 10^10 days never ended
                raise ScenarioError(
                    file,
                    f"{key}.{kind}",
                    f"the clock would reach {clock} s, more than {MAX_TICKS:,} ticks of "
                    f"{s.tick_interval} s (settings.tick_interval)",
                )
            if clock > MAX_CLOCK_S:  # ticks of 3000d stayed under MAX_TICKS and overflowed the datetimes
                raise ScenarioError(
                    file, f"{key}.{kind}", f"the clock would reach {clock} s, more than {MAX_CLOCK_S // 86400} days"
                )
        steps.append(
            Step(
                kind,
                arg,
                _check_expect(expect, file, f"{key}.expect") if expect is not None else None,
                i,
            )
        )
    # Expectations naming budgets the tree has not: a KeyError in the policy's tree (brk32).
    declared = {"/".join(b.path.split("/")[:i]) for b in budgets for i in range(1, b.path.count("/") + 2)}
    for step in steps:
        for path in (step.expect or {}).get("ratio_order") or []:
            if str(path) not in declared:
                raise ScenarioError(
                    file, f"steps[{step.index}].expect.ratio_order", f"no budget {str(path)!r} declared"
                )
    return Scenario(
        file,
        str(doc.get("name", Path(file).stem)),
        str(doc.get("description", "")),
        s,
        hosts,
        budgets,
        usage,
        running,
        pending,
        steps,
    )


def _host_specs(h: Any, file: str, key: str) -> list[HostSpec]:
    h = _mapping(h, file, key)
    _known(h, {"name", "count", "gpus", "model", "cluster", "labels", "cpus", "memory"}, file, key)
    if "name" not in h:
        raise ScenarioError(file, f"{key}.name", "is required")
    name = _str(h["name"], file, f"{key}.name")
    gpus = _int(h.get("gpus", 8), file, f"{key}.gpus", 1, MAX_HOST_GPUS)
    model = _model(h.get("model", "H100"), file, f"{key}.model")
    cluster = _str(h.get("cluster", "default"), file, f"{key}.cluster")
    labels = _mapping(h.get("labels") or {}, file, f"{key}.labels")
    for k, v in labels.items():  # a list, a mapping or nothing was made text: "['f1', 'f2']", "None" (brk51)
        if v is None or isinstance(v, list | dict):
            raise ScenarioError(file, f"{key}.labels.{k}", f"{v!r} is not a text or a number")
    labels = {str(k): str(v) for k, v in labels.items()}  # YAML's `rack: 1` is the label "1"
    if problem := labels_problem(labels):  # the join's and the admin's rule (services.check_labels)
        raise ScenarioError(file, f"{key}.labels", problem)
    cpus = _int(h["cpus"], file, f"{key}.cpus", 1) if "cpus" in h else None
    memory = _size(h["memory"], file, f"{key}.memory") if "memory" in h else None
    count = _int(h["count"], file, f"{key}.count", 1, MAX_HOST_COUNT) if "count" in h else None
    longest = f"{name}{count}" if count is not None else name
    if not HOST_NAME_RE.fullmatch(name) or not HOST_NAME_RE.fullmatch(longest):
        raise ScenarioError(file, f"{key}.name", f"{longest[:140]!r}: a host name is {HOST_NAME_RULE}")
    if count is not None:
        return [HostSpec(f"{name}{i}", gpus, model, cluster, dict(labels), cpus, memory) for i in range(1, count + 1)]
    return [HostSpec(name, gpus, model, cluster, labels, cpus, memory)]


def _size(v: Any, file: str, key: str) -> int:
    """A memory size such as ``64G`` (scheduler.sizes)."""
    try:
        n = parse_size(v)
    except SizeError as exc:
        raise ScenarioError(file, key, str(exc)) from None
    if not 1 <= n <= MAX_SIZE:
        raise ScenarioError(file, key, "must be from 1 byte to 1P")
    return n


def _step_arg(kind: str, arg: Any, file: str, key: str) -> Any:
    if kind in ("tick", "restart"):
        if arg not in (None, {}):  # `tick: {at: 10m}` ticked now, its argument dropped (brk51)
            raise ScenarioError(file, key, f"takes no argument (write {kind}: {{}})")
        return {}
    if kind in ("advance", "at"):
        return parse_duration(arg, file, key, most=None)  # the clock's limits bound these (the step loop)
    if kind == "submit":
        return [_workload(w, file, f"{key}[{i}]", False) for i, w in enumerate(_list(arg, file, key))]
    if kind in ("finish", "fail", "cancel"):
        return [_str(x, file, key) for x in _list(arg, file, key)]
    if kind == "gpu":
        d = _mapping(arg, file, key)
        _known(d, {"host", "index", "health", "xid"}, file, key)
        for r in ("host", "index", "health"):
            if r not in d:
                raise ScenarioError(file, f"{key}.{r}", "is required")
        if d["health"] not in ("healthy", "degraded", "unhealthy"):
            raise ScenarioError(file, f"{key}.health", f"{d['health']!r} is not healthy, degraded or unhealthy")
        return {
            "host": _str(d["host"], file, key),
            "index": _int(d["index"], file, f"{key}.index"),
            "health": d["health"],
            "xid": _int(d["xid"], file, f"{key}.xid") if "xid" in d else None,
        }
    if kind == "host":
        d = _mapping(arg, file, key)
        _known(d, {"name", "state"}, file, key)
        states = ("active", "cordoned", "draining", "drain_now", "offline")
        if d.get("state") not in states:
            raise ScenarioError(file, f"{key}.state", f"{d.get('state')!r} is not one of {', '.join(states)}")
        return {"name": _str(d.get("name"), file, f"{key}.name"), "state": d["state"]}
    if kind == "add_host":
        return _host_specs(arg, file, key)
    if kind in ("remove_host", "archive_budget"):
        return _str(arg, file, key)
    if kind == "create_budget":
        d = _mapping(arg, file, key)
        _known(d, {"path", "shares"}, file, key)
        return BudgetSpec(
            _budget_path(d.get("path"), file, f"{key}.path"), _int(d.get("shares", 1), file, f"{key}.shares", 1)
        )
    if kind == "budget":
        d = _mapping(arg, file, key)
        _known(d, {"path", "hold"}, file, key)
        if not isinstance(d.get("hold"), bool):
            raise ScenarioError(file, f"{key}.hold", "must be true or false")
        return {"path": _str(d.get("path"), file, f"{key}.path"), "hold": d["hold"]}
    return arg
