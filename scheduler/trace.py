"""Job traces for replay: a strict reader and the rules a replay must choose (pure Python, no Django).

The trace format is the one of ``data/philly/philly_jobs.csv`` (Microsoft Philly trace of Jeon et al.,
USENIX ATC 2019, CC BY 4.0): a CSV with the header columns ``job_id, submit_time_s, vc, num_gpus,
duration_s, duration_pcs_s``; jobs in submission order; times in whole seconds.

A trace holds no minimum runtimes and says nothing about funding, so a replay states two rules
(DESIGN.md §1: ``M > 0`` is allocated, ``M = 0`` unallocated); ``docs/demo.md`` explains the defaults:

- the **minimum-runtime rule** (``MinRuntimeRule``), default ``duration,cap:2h``: an allocated job
  declares ``M = min(run time, 2 h)`` — short jobs are protected for their whole run, long jobs
  for two hours, by when they are expected to have checkpointed;
- the **unallocated rule** (``UnallocatedRule``), default ``vc:unknown,fraction:0.1``: every job of
  the ``unknown`` VC and a deterministic 10 % of the others (chosen by a hash of the job id) run
  unallocated (``M = 0``): free, never charged, preemptible at any time.

``plan_job`` combines them with the replay's time compression (``time_scale`` trace seconds per
real second) into what is actually submitted.
"""

from __future__ import annotations

import csv
import hashlib
import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairway_common import durations as _durations
from fairway_common.numbers import ascii_float

COLUMNS: tuple[str, ...] = ("job_id", "submit_time_s", "vc", "num_gpus", "duration_s", "duration_pcs_s")
DAY_S = 86_400
DEFAULT_MIN_RUNTIME_RULE = "duration,cap:2h"
DEFAULT_UNALLOCATED_RULE = "vc:unknown,fraction:0.1"


class TraceError(ValueError):
    """A trace file (or a rule) that cannot be used. ``str()`` names file, line, column and problem.

    ``line`` is the 1-based physical line of the file (the header is line 1); ``line`` and
    ``column`` are None where the problem is not tied to one.
    """

    def __init__(self, path: str, line: int | None, column: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.problem = problem
        where = path if line is None else f"{path}, line {line}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace. Times in seconds; ``submit_time_s`` counts from the trace's first submission."""

    job_id: int
    submit_time_s: int
    vc: str
    num_gpus: int
    duration_s: int
    duration_pcs_s: int | None
    line: int = 0  # where the job was read (1-based; 0 when built in code)


# --- reading ----------------------------------------------------------------------------------


def read_trace(path: str | Path) -> list[TraceJob]:
    """Read a whole trace file strictly; raises ``TraceError`` (file, line, column, problem) on the first flaw.

    Checked: every column of ``COLUMNS`` is in the header (extra columns are ignored); every row
    has as many fields as the header; ``job_id``, ``submit_time_s``, ``num_gpus``, ``duration_s``
    are whole numbers from 0 to ``MAX_TRACE_NUMBER`` (``num_gpus`` at least 1), ``duration_pcs_s`` is one or empty;
    ``vc`` is not empty; ``job_id`` strictly increases and ``submit_time_s`` never decreases
    (jobs are in submission order). An unreadable file raises ``TraceError`` too.
    """
    name = str(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:  # a byte order mark hid job_id (brk32)
            return parse_trace(_bounded_lines(fh, name), name=name)
    except OSError as exc:
        raise TraceError(name, None, None, f"cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(name, None, None, f"not UTF-8 text ({exc.reason})") from None


MAX_LINE_CHARS = 1 << 20
"""The longest line of a trace file read (a Philly line is about 60 characters): ``/dev/zero``, or
a file with no line break, was read as one line until memory ran out (brk51)."""


def _bounded_lines(fh: Any, name: str) -> Iterator[str]:
    """The lines of ``fh``, each read no further than :data:`MAX_LINE_CHARS`; TraceError past it."""
    most = MAX_LINE_CHARS
    number = 0
    while line := fh.readline(most + 1):
        number += 1
        if len(line) > most:
            raise TraceError(name, number, None, f"a line longer than {most:,} characters: not a trace")
        yield line


def parse_trace(lines: Iterable[str], *, name: str = "<trace>") -> list[TraceJob]:
    """Parse trace text (an iterable of lines, e.g. an open file); see ``read_trace`` for the checks."""
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise TraceError(name, 1, None, "the file is empty (expected a header line)") from None
    except csv.Error as exc:
        raise TraceError(name, 1, None, f"malformed CSV: {exc}") from None
    header = [h.strip() for h in header]
    for column in COLUMNS:
        if column not in header:
            raise TraceError(name, 1, column, f"missing column (the header must name {', '.join(COLUMNS)})")
    index = {column: header.index(column) for column in COLUMNS}

    jobs: list[TraceJob] = []
    previous: TraceJob | None = None
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise TraceError(name, reader.line_num, None, f"malformed CSV: {exc}") from None
        line = reader.line_num
        if not fields or (len(fields) == 1 and not fields[0].strip()):
            continue  # a blank line (e.g. a trailing newline) carries no job
        if len(fields) != len(header):
            raise TraceError(name, line, None, f"expected {len(header)} fields, found {len(fields)}")

        vc = fields[index["vc"]].strip()
        if not vc:
            raise TraceError(name, line, "vc", "empty value (use 'unknown' for a job without a VC)")
        odd = next((c for c in vc if not c.isprintable()), None)
        if odd is not None:  # a VC names a budget in every report: no line break, escape or invisible character
            raise TraceError(name, line, "vc", f"holds the control or invisible character U+{ord(odd):04X}")
        pcs_raw = fields[index["duration_pcs_s"]].strip()
        job = TraceJob(
            job_id=_whole_number(name, line, "job_id", fields[index["job_id"]], 0),
            submit_time_s=_whole_number(name, line, "submit_time_s", fields[index["submit_time_s"]], 0),
            vc=vc,
            num_gpus=_whole_number(name, line, "num_gpus", fields[index["num_gpus"]], 1),
            duration_s=_whole_number(name, line, "duration_s", fields[index["duration_s"]], 0),
            duration_pcs_s=_whole_number(name, line, "duration_pcs_s", pcs_raw, 0) if pcs_raw else None,
            line=line,
        )
        if previous is not None:
            if job.job_id <= previous.job_id:
                raise TraceError(
                    name, line, "job_id", f"{job.job_id} does not follow {previous.job_id} (ids must increase)"
                )
            if job.submit_time_s < previous.submit_time_s:
                raise TraceError(
                    name,
                    line,
                    "submit_time_s",
                    f"{job.submit_time_s} is earlier than the previous job's {previous.submit_time_s} "
                    "(jobs must be in submission order)",
                )
        jobs.append(job)
        previous = job
    return jobs


MAX_TRACE_NUMBER = 2**31 - 1
"""The largest id, time, GPU count or duration a trace may hold (seconds: 68 years): what every
integer column the trace reaches stores (``Workload.duration_hint_s``) and what a date can add."""


def _whole_number(name: str, line: int, column: str, raw: str, minimum: int) -> int:
    raw = raw.strip()
    if raw == "":
        raise TraceError(name, line, column, "empty value (expected a whole number)")
    if not raw.isascii() or "_" in raw:  # int() reads "1_0" as 10 and any script's digits (brk35)
        raise TraceError(name, line, column, f"{raw[:40]!r} is not a number (ASCII digits)")
    try:
        value = int(raw)
    except ValueError:
        try:
            as_float = float(raw)
        except ValueError:
            raise TraceError(name, line, column, f"{raw!r} is not a number") from None
        if not math.isfinite(as_float) or as_float != int(as_float):
            raise TraceError(name, line, column, f"{raw!r} is not a whole number") from None
        value = int(as_float)
    if value < 0:
        raise TraceError(name, line, column, f"{value} is negative")
    if value < minimum:
        raise TraceError(name, line, column, f"{value} is below the minimum of {minimum}")
    if value > MAX_TRACE_NUMBER:  # a duration of 10**23 s was a traceback when written
        raise TraceError(name, line, column, f"{raw[:40]} is above the maximum of {MAX_TRACE_NUMBER}")
    return value


def select_jobs(
    jobs: Sequence[TraceJob],
    *,
    start_job_id: int | None = None,
    start_day: float | None = None,
    limit: int | None = None,
) -> list[TraceJob]:
    """Consecutive jobs in trace order from a start: the job ``start_job_id`` (which must exist), or the
    first job submitted at or after day ``start_day`` (``submit_time_s >= start_day × 86,400``), or the
    first job of the trace; at most ``limit`` jobs. Raises ``ValueError`` on an absent start.
    """
    if start_job_id is not None and start_day is not None:
        raise ValueError("give either a start job id or a start day, not both")
    begin = 0
    if start_job_id is not None:
        found = [i for i, job in enumerate(jobs) if job.job_id == start_job_id]
        if not found:
            raise ValueError(f"job {start_job_id} is not in the trace")
        begin = found[0]
    elif start_day is not None:
        threshold = start_day * DAY_S
        begin = next((i for i, job in enumerate(jobs) if job.submit_time_s >= threshold), len(jobs))
        if begin == len(jobs):
            raise ValueError(f"no job is submitted on or after day {start_day:g}")
    end = len(jobs) if limit is None else min(len(jobs), begin + limit)
    return list(jobs[begin:end])


# --- durations ---------------------------------------------------------------------------------

# The one grammar of durations (``DURATION_RE``, ``parse_duration``) lives in
# ``fairway_common.durations``, which the CLI ships too (left51: it checks a duration back itself).
DURATION_RE = _durations.DURATION_RE
MAX_DURATION_DIGITS = _durations.MAX_DURATION_DIGITS
DURATION_FORMS = _durations.DURATION_FORMS
duration_seconds = _durations.duration_seconds
parse_duration = _durations.parse_duration


def format_duration(seconds: float) -> str:
    """A short human form of a duration in seconds: ``45s``, ``34m``, ``2h``, ``1h30m``, ``3d4h``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        m, r = divmod(s, 60)
        return f"{m}m" if r == 0 else f"{m}m{r}s"
    if s < DAY_S:
        h, r = divmod(s, 3600)
        return f"{h}h" if r < 60 else f"{h}h{r // 60}m"
    d, r = divmod(s, DAY_S)
    return f"{d}d" if r < 3600 else f"{d}d{r // 3600}h"


# --- the minimum-runtime rule ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MinRuntimeRule:
    """The minimum runtime ``M`` (seconds) an **allocated** trace job declares, from its run time ``d``.

    Grammar (comma-separated, one base term then optional bounds):

    - ``duration`` — ``M = d``: protected for its whole run;
    - ``fraction:F`` — ``M = F × d`` (0 < F ≤ 1);
    - ``fixed:D`` — ``M = D`` whatever the run time;
    - ``floor:D`` — at least ``min(D, d)``: a job shorter than ``D`` is protected for all of it;
    - ``cap:D`` — at most ``D``.

    Default ``duration,cap:2h``: ``M = min(d, 2 h)``. ``M`` is rounded up to whole seconds and is
    always at least 1 s, so an allocated job stays allocated even when ``d`` is 0.
    """

    kind: str  # "duration" | "fraction" | "fixed"
    fraction: float = 1.0
    fixed_s: int = 0
    floor_s: int = 0
    cap_s: int | None = None
    spec: str = DEFAULT_MIN_RUNTIME_RULE

    @classmethod
    def parse(cls, spec: str) -> MinRuntimeRule:
        """Parse the grammar above; raises ``ValueError`` naming the bad term."""
        kind: str | None = None
        fraction, fixed_s, floor_s, cap_s = 1.0, 0, 0, None
        for term in (t.strip() for t in spec.split(",")):
            key, _, value = term.partition(":")
            key = key.strip().lower()
            value = value.strip()
            if key == "duration" and not value:
                kind = _only_once(kind, "duration", spec)
            elif key == "fraction":
                kind = _only_once(kind, "fraction", spec)
                try:
                    fraction = ascii_float(value)  # ASCII digits, as every reader (left47)
                except ValueError:
                    raise ValueError(f"min-runtime rule {spec!r}: fraction {value!r} is not a number") from None
                if not 0 < fraction <= 1:
                    raise ValueError(f"min-runtime rule {spec!r}: fraction must be in (0, 1]")
            elif key == "fixed":
                kind = _only_once(kind, "fixed", spec)
                fixed_s = _rule_duration(spec, value)
                if fixed_s < 1:
                    raise ValueError(f"min-runtime rule {spec!r}: fixed must be at least 1s")
            elif key == "floor":
                floor_s = _rule_duration(spec, value)
            elif key == "cap":
                cap_s = _rule_duration(spec, value)
                if cap_s < 1:
                    raise ValueError(f"min-runtime rule {spec!r}: cap must be at least 1s")
            else:
                raise ValueError(
                    f"min-runtime rule {spec!r}: unknown term {term!r} "
                    "(use duration | fraction:F | fixed:D, then optional floor:D, cap:D)"
                )
        if kind is None:
            raise ValueError(f"min-runtime rule {spec!r}: needs one of duration, fraction:F, fixed:D")
        if cap_s is not None and floor_s > cap_s:
            raise ValueError(f"min-runtime rule {spec!r}: floor is above cap")
        return cls(kind=kind, fraction=fraction, fixed_s=fixed_s, floor_s=floor_s, cap_s=cap_s, spec=spec)

    def min_runtime_s(self, duration_s: float) -> float:
        """``M`` in seconds (not rounded) for a job that runs ``duration_s`` seconds."""
        if self.kind == "fixed":
            m = float(self.fixed_s)
        elif self.kind == "fraction":
            m = self.fraction * duration_s
        else:
            m = float(duration_s)
        m = max(m, float(min(self.floor_s, duration_s)))
        if self.cap_s is not None:
            m = min(m, float(self.cap_s))
        return m

    def describe(self) -> str:
        """The rule in words, for summaries and docs."""
        if self.kind == "fixed":
            text = f"M = {format_duration(self.fixed_s)}"
        elif self.kind == "fraction":
            text = f"M = {self.fraction:g} × run time"
        else:
            text = "M = run time"
        if self.floor_s:
            text += f", at least min(run time, {format_duration(self.floor_s)})"
        if self.cap_s is not None:
            text += f", at most {format_duration(self.cap_s)}"
        return text


def _only_once(kind: str | None, new: str, spec: str) -> str:
    if kind is not None:
        raise ValueError(f"min-runtime rule {spec!r}: give only one of duration, fraction:F, fixed:D")
    return new


def _rule_duration(spec: str, value: str) -> int:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"rule {spec!r}: {exc}") from None


# --- the unallocated rule ----------------------------------------------------------------------


def job_hash_fraction(job_id: int, salt: str = "fairway") -> float:
    """A fixed pseudo-random number in [0, 1) for a job id: the first 8 bytes of sha256("<salt>:<id>").

    Independent of Python's hash seed, platform and the order of the trace, so a job runs
    unallocated in every replay or in none. Another ``salt`` gives an independent number, for a
    second choice that must not follow the first (``scheduler.history.choose_jobs``'s sample).
    """
    digest = hashlib.sha256(f"{salt}:{job_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True, slots=True)
class UnallocatedRule:
    """Which trace jobs run unallocated (``M = 0``).

    Grammar (comma-separated): ``vc:NAME`` (repeatable: every job of that VC), ``fraction:F``
    (additionally the jobs with ``job_hash_fraction(job_id) < F``, 0 ≤ F ≤ 1), ``none`` (every job
    allocated) or ``all`` (every job unallocated). Default ``vc:unknown,fraction:0.1``.
    """

    vcs: frozenset[str] = frozenset()
    fraction: float = 0.0
    spec: str = DEFAULT_UNALLOCATED_RULE

    @classmethod
    def parse(cls, spec: str) -> UnallocatedRule:
        """Parse the grammar above; raises ``ValueError`` naming the bad term."""
        low = spec.strip().lower()
        if low == "none":
            return cls(spec=spec)
        if low == "all":
            return cls(fraction=1.0, spec=spec)
        vcs: set[str] = set()
        fraction = 0.0
        for term in (t.strip() for t in spec.split(",")):
            key, _, value = term.partition(":")
            key = key.strip().lower()
            value = value.strip()
            if key == "vc" and value:
                vcs.add(value)
            elif key == "fraction":
                try:
                    fraction = ascii_float(value)  # ASCII digits, as every reader (left47)
                except ValueError:
                    raise ValueError(f"unallocated rule {spec!r}: fraction {value!r} is not a number") from None
                if not 0 <= fraction <= 1:
                    raise ValueError(f"unallocated rule {spec!r}: fraction must be in [0, 1]")
            else:
                raise ValueError(
                    f"unallocated rule {spec!r}: unknown term {term!r} (use vc:NAME, fraction:F, none or all)"
                )
        return cls(vcs=frozenset(vcs), fraction=fraction, spec=spec)

    def is_unallocated(self, job: TraceJob) -> bool:
        """True when ``job`` runs unallocated under this rule."""
        return job.vc in self.vcs or job_hash_fraction(job.job_id) < self.fraction

    def describe(self) -> str:
        """The rule in words."""
        parts = [f"every job of VC {vc}" for vc in sorted(self.vcs)]
        if self.fraction >= 1:
            return "every job"
        if self.fraction > 0:
            parts.append(f"{self.fraction:.0%} of {'the others' if parts else 'jobs'} (by a hash of the job id)")
        return " and ".join(parts) if parts else "none"


# --- planning a replay -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedJob:
    """What a replay submits for one trace job, in real (compressed) time.

    ``offset_s``: real seconds after the replay's start at which it is submitted; ``run_s``: real
    seconds the stand-in program runs; ``min_runtime_s``: the declared minimum runtime in whole real
    seconds (0 = unallocated); ``trace_run_s`` / ``trace_min_runtime_s``: the same in trace seconds.
    """

    job: TraceJob
    offset_s: float
    run_s: float
    min_runtime_s: int
    trace_run_s: int
    trace_min_runtime_s: float

    @property
    def allocated(self) -> bool:
        return self.min_runtime_s > 0


MIN_REAL_RUN_S = 1.0


def plan_job(
    job: TraceJob,
    *,
    t0_s: int,
    time_scale: float,
    max_duration_s: int | None,
    min_runtime_rule: MinRuntimeRule,
    unallocated_rule: UnallocatedRule,
    protection_allowance_s: int = 0,
) -> PlannedJob:
    """Compress one trace job into a replay submission.

    The replayed run time is ``min(duration_s, max_duration_s)`` trace seconds; real time is trace
    time ÷ ``time_scale``, the run at least ``MIN_REAL_RUN_S`` (1 s). The minimum-runtime rule is
    applied to the replayed run time (protection never outlasts the replayed job), then compressed
    and rounded up to whole seconds, at least 1 s for an allocated job, plus
    ``protection_allowance_s`` real seconds for an allocated job: room for the machinery around a
    run (process start, exit report, whole-second timestamps), which is nothing in trace time but
    not nothing at a high time scale, so a job its rule protects for its whole run stays protected
    until it has exited.
    """
    if protection_allowance_s < 0:
        raise ValueError("protection_allowance_s must be >= 0")
    if time_scale <= 0:
        raise ValueError("time_scale must be positive")
    trace_run = job.duration_s if max_duration_s is None else min(job.duration_s, max_duration_s)
    run_s = max(MIN_REAL_RUN_S, trace_run / time_scale)
    if unallocated_rule.is_unallocated(job):
        trace_m = 0.0
        m = 0
    else:
        trace_m = min_runtime_rule.min_runtime_s(trace_run)
        m = max(1, math.ceil(trace_m / time_scale - 1e-9)) + protection_allowance_s
    return PlannedJob(
        job=job,
        offset_s=(job.submit_time_s - t0_s) / time_scale,
        run_s=run_s,
        min_runtime_s=m,
        trace_run_s=trace_run,
        trace_min_runtime_s=trace_m,
    )


def plan_replay(
    jobs: Sequence[TraceJob],
    *,
    time_scale: float,
    max_duration_s: int | None,
    min_runtime_rule: MinRuntimeRule,
    unallocated_rule: UnallocatedRule,
    protection_allowance_s: int = 0,
) -> list[PlannedJob]:
    """``plan_job`` for each job, with the first job's submission as time zero."""
    if not jobs:
        return []
    t0 = jobs[0].submit_time_s
    return [
        plan_job(
            job,
            t0_s=t0,
            time_scale=time_scale,
            max_duration_s=max_duration_s,
            min_runtime_rule=min_runtime_rule,
            unallocated_rule=unallocated_rule,
            protection_allowance_s=protection_allowance_s,
        )
        for job in jobs
    ]


# --- describing a stretch ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StretchFacts:
    """Facts about consecutive jobs: the numbers recorded in docs/demo.md."""

    first_job_id: int
    last_job_id: int
    jobs: int
    start_day: float
    span_s: int
    median_duration_s: float
    max_gpus: int
    gpu_hours: float
    multi_day_jobs: tuple[TraceJob, ...]


def stretch_facts(jobs: Sequence[TraceJob]) -> StretchFacts:
    """Span (first to last submission), median run time, largest GPU count, GPU-hours and the jobs
    longer than a day, of a non-empty run of jobs."""
    if not jobs:
        raise ValueError("no jobs")
    return StretchFacts(
        first_job_id=jobs[0].job_id,
        last_job_id=jobs[-1].job_id,
        jobs=len(jobs),
        start_day=jobs[0].submit_time_s / DAY_S,
        span_s=jobs[-1].submit_time_s - jobs[0].submit_time_s,
        median_duration_s=statistics.median(j.duration_s for j in jobs),
        max_gpus=max(j.num_gpus for j in jobs),
        gpu_hours=sum(j.num_gpus * j.duration_s for j in jobs) / 3600,
        multi_day_jobs=tuple(j for j in jobs if j.duration_s > DAY_S),
    )
