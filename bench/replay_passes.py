"""Replay harness for the policy's decisions (issue 12): capture the passes of a Philly simulation,
replay them through ``schedule()`` / ``IncrementalScheduler`` and compare decision digests.

    python bench/replay_passes.py                      # = digest: run the default slice, check the
                                                       #   committed digest, print OK or DIFFERENT
    python bench/replay_passes.py --record             # re-record bench/replay_passes.digest.json
    python bench/replay_passes.py capture [--capture var/replay/philly.pkl.gz] [--record]
    python bench/replay_passes.py compare [--capture var/replay/philly.pkl.gz] [--check fresh|incremental|both]
                                          [--with-reasons] [--show N] [--limit N]
    FAIRWAY_ROOT=<other checkout> python bench/replay_passes.py compare   # replay through its policy

Slice options (digest and capture): --days 44 --start 0 --hosts 64 --gpus-per-host 8 --depth 8
--grace 30 --seed 1 --fault-rate 0 --repair 14400s --tick-gap 0 --checkpoint resume
--trace data/philly/philly_jobs.csv. The default slice is the first 44 days of the Philly trace on
64 hosts × 8 GPUs with the simulator's defaults (docs/simulation.md): 10,263 passes, the first ~400
on a cluster that is not full, then the first four days of backlog (preemptions, nominations,
reservations). ``--start D`` starts D days into the trace on an empty cluster (the test's slice).

What is hashed, per pass (the policy callable's return value, before the simulator applies it):
starts (workload, GPUs, allocated, unfunded), stops (attempt, reason, preemptor), nominations,
reservations (host → workload) with their earliest starts, host-state changes, and pending reason
codes. The simulator runs with ``with_reasons=False``, so it computes **no** pending reasons: that
part is empty in every captured pass (``compare --with-reasons`` re-runs each pass with reasons on
and checks the other decisions are unchanged). Lists are sorted and GPU lists sorted before hashing
(canonical JSON), so a digest does not depend on dict or list order. A pass's digest is the SHA-256
of that JSON; the run's digest chains (pass index, simulated time, pass digest) over all passes.

``capture`` writes a pickle stream (not committed; default under var/replay/): a header, then per
pass the snapshot the policy saw (containers frozen into tuples/dicts, shared objects stored once)
and its canonical decisions, then a trailer with the run's digest. ``compare`` feeds each captured
snapshot to a fresh ``schedule()`` (no state between passes) and/or to one ``IncrementalScheduler``
(in capture order) and compares with the recorded decisions pass by pass; it prints how many and
which passes differ, the first (``--show N``: N) with a readable diff, and exits 1 on any difference.

``digest`` only runs the simulation (nothing written) and checks the whole-run digest and the
per-pass digests against bench/replay_passes.digest.json; on a difference it names the first
differing pass. A policy change that legitimately changes decisions: check the change is intended
(capture on the old commit, ``compare`` on the new one shows the differing passes), then re-record
with ``--record`` and commit the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gzip
import hashlib
import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# FAIRWAY_ROOT=<another checkout>: its scheduler package (policy and simulator) is the one run, e.g. to
# replay a capture made here through a branch's policy. Otherwise this checkout's (ahead of the
# virtualenv's editable install, which may point at another checkout).
_CODE = Path(os.environ.get("FAIRWAY_ROOT") or ROOT).resolve()
if str(_CODE) not in sys.path[:1]:
    sys.path.insert(0, str(_CODE))

import scheduler  # noqa: E402
from scheduler.policy import Decisions, IncrementalScheduler, Snapshot, schedule  # noqa: E402
from scheduler.sim.simulate import DAY, T0, SimConfig, TraceSim, prepare  # noqa: E402

CODE_ROOT = Path(scheduler.__file__).resolve().parents[1]
"""The checkout whose scheduler package runs (reported with its commit)."""

FORMAT = 1
DIGEST_FILE = ROOT / "bench" / "replay_passes.digest.json"
DEFAULT_CAPTURE = ROOT / "var" / "replay" / "philly.pkl.gz"
DEFAULT_DAYS = 44.0
RECORD_COMMAND = "python bench/replay_passes.py --record"
SLICE_FIELDS = (
    "days",
    "hosts",
    "gpus_per_host",
    "depth",
    "grace_s",
    "seed",
    "fault_rate",
    "repair_s",
    "tick_gap_s",
    "checkpoint",
    "min_runtime_rule",
    "unallocated_rule",
    "window_s",
    "max_reservations",
)


# ------------------------------------------------------------------------------------------------
# Canonical decisions and digests
def _gpus(gpus: Any) -> list[list[Any]]:
    return sorted([str(h), int(i)] for h, i in gpus)


KINDS = ("starts", "stops", "nominations", "reservations", "reserved_start", "host_states", "pending")


def canonical(dec: Decisions) -> dict[str, list[Any]]:
    """The decisions as sorted, JSON-ready lists (independent of dict and list order)."""
    return {
        "starts": sorted([s.workload, _gpus(s.gpus), bool(s.allocated), bool(s.unfunded)] for s in dec.starts),
        "stops": sorted([s.attempt, str(s.reason), s.for_workload or ""] for s in dec.stops),
        "nominations": sorted([w, _gpus(g)] for w, g in dec.nominations.items()),
        "reservations": sorted([h, w] for h, w in dec.reservations.items()),
        "reserved_start": sorted([w, int(t)] for w, t in dec.reserved_start.items()),
        "host_states": sorted([h, str(s)] for h, s in dec.host_states.items()),
        "pending": sorted([w, str(p.reason)] for w, p in dec.pending.items()),
    }


def canon_json(c: dict[str, list[Any]]) -> str:
    return json.dumps(c, sort_keys=True, separators=(",", ":"))


def pass_digest(c: dict[str, list[Any]]) -> str:
    """SHA-256 (hex) of one pass's canonical decisions."""
    return hashlib.sha256(canon_json(c).encode()).hexdigest()


class Chain:
    """The run's digest: SHA-256 over ``index now pass-digest`` lines of every pass, in order."""

    def __init__(self) -> None:
        self._h = hashlib.sha256(f"fairway-replay-v{FORMAT}\n".encode())
        self.n = 0

    def add(self, now: int, digest: str) -> None:
        self._h.update(f"{self.n} {now} {digest}\n".encode())
        self.n += 1

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def short(d: str) -> str:
    """Per-pass digests as committed: 16 hex digits (64 bits) each."""
    return d[:16]


def strip_pending(c: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {**c, "pending": []}


def describe_diff(want: dict[str, list[Any]], got: dict[str, list[Any]], limit: int = 20) -> list[str]:
    """Readable lines: per kind of decision, what only the recorded (-) or the replayed (+) pass has."""
    out: list[str] = []
    for kind in [*[k for k in KINDS if k in want or k in got], *sorted((want.keys() | got.keys()) - set(KINDS))]:
        a = [json.dumps(x) for x in want.get(kind, [])]
        b = [json.dumps(x) for x in got.get(kind, [])]
        only_a = [x for x in a if x not in set(b)]
        only_b = [x for x in b if x not in set(a)]
        if not only_a and not only_b:
            continue
        out.append(f"  {kind}: recorded {len(a)}, replayed {len(b)}")
        for x in only_a[:limit]:
            out.append(f"    - {x}")
        for x in only_b[:limit]:
            out.append(f"    + {x}")
        if len(only_a) > limit or len(only_b) > limit:
            out.append(f"    … ({len(only_a)} only recorded, {len(only_b)} only replayed)")
    return out or ["  (no difference)"]


def counts(c: dict[str, list[Any]]) -> dict[str, int]:
    return {k: len(v) for k, v in c.items()}


# ------------------------------------------------------------------------------------------------
# Snapshots as captured
def freeze(snap: Snapshot) -> Snapshot:
    """A copy of ``snap`` that later simulator steps cannot change: the simulator reuses and mutates
    some containers (its nominations dict, the queue lists behind the pending view); the records in
    them (Host, Budget, Attempt, Workload, UsageRecord) are frozen dataclasses and stay shared."""
    return replace(
        snap,
        hosts=tuple(snap.hosts),
        budgets=tuple(snap.budgets),
        attempts=tuple(snap.attempts),
        pending=tuple(snap.pending),
        usage=tuple(snap.usage),
        nominations={k: tuple(v) for k, v in snap.nominations.items()},
    )


class _Pickler(pickle.Pickler):
    """Policy records (Snapshot, Host, Budget, Attempt, Workload, UsageRecord: the dataclasses of
    scheduler.policy) are stored as their class and their fields by name, and rebuilt by calling the
    class with them: a checkout whose records gained fields with defaults (or reordered them) still
    reads a capture made before. Shared records are stored once (pickle's memo)."""

    def reducer_override(self, obj: Any) -> Any:
        cls = type(obj)
        if dataclasses.is_dataclass(cls) and cls.__module__.startswith("scheduler.policy"):
            kw = {f.name: getattr(obj, f.name) for f in dataclasses.fields(cls) if f.init}
            return functools.partial(cls, **kw), ()
        return NotImplemented


def slice_of(cfg: SimConfig, start_day: float = 0.0) -> dict[str, Any]:
    """The options that define a capture (what the digest file is valid for)."""
    out: dict[str, Any] = {"start_day": start_day}
    out.update({k: getattr(cfg, k) for k in SLICE_FIELDS})
    out["trace"] = _shown(cfg.trace)
    return out


def _shown(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def git_commit(where: Path | None = None) -> str:
    """The commit of ``where`` (default: the checkout whose scheduler package runs), with
    ``+dirty(scheduler/)`` when its scheduler/ has uncommitted changes."""
    where = CODE_ROOT if where is None else where
    try:
        rev = subprocess.run(  # noqa: S603 (fixed arguments)
            ["git", "-C", str(where), "rev-parse", "--short=12", "HEAD"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(  # noqa: S603
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no", "scheduler"],  # noqa: S607
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return rev + ("+dirty(scheduler/)" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ------------------------------------------------------------------------------------------------
# Capture (and the digest-only run)
@dataclass
class RunResult:
    slice: dict[str, Any]
    trace_sha256: str
    passes: int
    digest: str
    per_pass: list[tuple[int, str]]  # (seconds since trace start, short digest)
    totals: dict[str, int]
    deciding: int
    wall_s: float
    cpu_s: float
    policy_cpu_s: float
    path: str | None = None
    size_bytes: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "passes": self.passes,
            "deciding_passes": self.deciding,
            "decisions": self.totals,
            "digest": self.digest,
        }


class _Recorder:
    """The policy callable of the run: calls ``policy``, digests its decisions, optionally writes
    the frozen snapshot and the canonical decisions to ``pickler``."""

    def __init__(
        self,
        policy: Callable[[Snapshot], Decisions],
        pickler: pickle.Pickler | None,
    ) -> None:
        self.policy = policy
        self.pickler = pickler
        self.chain = Chain()
        self.per_pass: list[tuple[int, str]] = []
        self.totals: dict[str, int] = {}
        self.deciding = 0
        self.policy_cpu = 0.0

    def __call__(self, snap: Snapshot) -> Decisions:
        t = time.process_time()
        dec = self.policy(snap)
        self.policy_cpu += time.process_time() - t
        c = canonical(dec)
        d = pass_digest(c)
        i = self.chain.n
        self.chain.add(snap.now, d)
        self.per_pass.append((snap.now - T0, short(d)))
        for k, v in c.items():
            self.totals[k] = self.totals.get(k, 0) + len(v)
        self.deciding += dec.changed
        if self.pickler is not None:
            self.pickler.dump(("pass", i, freeze(snap), c, d))
        return dec


def prepare_slice(cfg: SimConfig, start_day: float = 0.0):  # type: ignore[no-untyped-def]
    """The simulator's inputs for ``cfg`` (``cfg.days`` long), starting ``start_day`` days into the
    trace on an empty cluster (0: the simulator's own start)."""
    if not start_day:
        return prepare(cfg)
    if start_day < 0 or cfg.days is None:
        raise SystemExit("--start needs --days and must not be negative")
    inputs = prepare(replace(cfg, days=start_day + cfg.days))
    first = inputs.jobs[0].submit_time_s
    base = first + int(start_day * DAY)
    inputs.jobs = [j for j in inputs.jobs if j.submit_time_s >= base]
    if not inputs.jobs:
        raise SystemExit(f"no trace job is submitted in the slice (start day {start_day:g}, {cfg.days:g} days)")
    inputs.t_base = base
    inputs.horizon_s = int(cfg.days * DAY)
    return inputs


def run(
    cfg: SimConfig,
    out: str | Path | None = None,
    *,
    start_day: float = 0.0,
    policy: Callable[[Snapshot], Decisions] | None = None,
    progress: bool = False,
    inputs: Any = None,
) -> RunResult:
    """Run the slice under Fairway's policy (the simulator's: one ``IncrementalScheduler``), digest
    every pass and, with ``out``, capture every pass's snapshot and decisions there."""
    wall, cpu = time.perf_counter(), time.process_time()
    if inputs is None:  # (``inputs``: those of prepare_slice(cfg, start_day), read once by a caller)
        inputs = prepare_slice(cfg, start_day)
    sl = slice_of(cfg, start_day)
    sha = file_sha256(cfg.trace)
    bar = _bar(progress, total=round(inputs.horizon_s / DAY, 2), unit="day", desc="simulate")
    fh = pickler = None
    if out is not None:
        out = Path(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".part")
        fh = gzip.open(tmp, "wb", compresslevel=1) if out.name.endswith(".gz") else open(tmp, "wb")  # noqa: SIM115
        pickler = _Pickler(fh, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dump(
            (
                "header",
                {"format": FORMAT, "slice": sl, "trace_sha256": sha, "commit": git_commit(), "python": sys.version},
            )
        )
    rec = _Recorder(policy if policy is not None else IncrementalScheduler(), pickler)
    last = [0.0]

    def on_progress(day: float) -> None:
        if bar is not None:
            bar.update(round(day - last[0], 2))
            bar.set_postfix(passes=rec.chain.n, refresh=False)
            last[0] = day

    sim = TraceSim(inputs, rec, progress=on_progress if bar is not None else None)
    sim.run()
    if bar is not None:
        bar.close()
    digest = rec.chain.hexdigest()
    size = 0
    if pickler is not None and fh is not None and out is not None:
        pickler.dump(("end", {"passes": rec.chain.n, "digest": digest}))
        fh.close()
        os.replace(tmp, out)
        size = out.stat().st_size
        Path(str(out) + ".json").write_text(json.dumps({"slice": sl, "passes": rec.chain.n, "digest": digest}) + "\n")
    return RunResult(
        slice=sl,
        trace_sha256=sha,
        passes=rec.chain.n,
        digest=digest,
        per_pass=rec.per_pass,
        totals=rec.totals,
        deciding=rec.deciding,
        wall_s=time.perf_counter() - wall,
        cpu_s=time.process_time() - cpu,
        policy_cpu_s=rec.policy_cpu,
        path=None if out is None else str(out),
        size_bytes=size,
    )


# ------------------------------------------------------------------------------------------------
# Reading a capture and comparing
def _open(path: str | Path):  # type: ignore[no-untyped-def]
    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")  # noqa: SIM115


def read_capture(
    path: str | Path,
) -> tuple[dict[str, Any], Generator[tuple[int, Snapshot, dict[str, list[Any]], str], None, None]]:
    """The capture's header and an iterator of (index, snapshot, canonical decisions, digest);
    the iterator checks the trailer (the file is complete and its chain matches)."""
    fh = _open(path)
    # One unpickler for the whole stream: objects shared between passes are read once.
    up = pickle.Unpickler(fh)  # noqa: S301 (our own capture files)
    kind, header = up.load()
    if kind != "header" or header.get("format") != FORMAT:
        fh.close()
        raise SystemExit(f"{path}: not a replay capture of format {FORMAT}")

    def passes() -> Generator[tuple[int, Snapshot, dict[str, list[Any]], str], None, None]:
        chain = Chain()
        try:
            while True:
                try:
                    item = up.load()
                except (EOFError, pickle.UnpicklingError, gzip.BadGzipFile):
                    raise SystemExit(f"{path}: truncated capture (no trailer after {chain.n} passes)") from None
                if item[0] == "end":
                    trailer = item[1]
                    if trailer["passes"] != chain.n or trailer["digest"] != chain.hexdigest():
                        raise SystemExit(f"{path}: trailer does not match the passes read (corrupt capture)")
                    header["trailer"] = trailer
                    return
                _, i, snap, c, d = item
                if pass_digest(c) != d:
                    raise SystemExit(f"{path}: pass {i}: recorded decisions do not match their digest")
                chain.add(snap.now, d)
                yield i, snap, c, d
        finally:
            fh.close()

    return header, passes()


@dataclass
class Difference:
    index: int
    now: int
    check: str
    recorded: dict[str, list[Any]]
    replayed: dict[str, list[Any]]

    def report(self) -> str:
        day = (self.now - T0) / DAY
        head = (
            f"pass {self.index} (t={self.now}, day {day:.4f} of the trace) differs under {self.check}:"
            f" recorded {counts(self.recorded)}"
        )
        return "\n".join([head, *describe_diff(self.recorded, self.replayed)])


@dataclass
class CompareResult:
    header: dict[str, Any]
    passes: int = 0
    checks: tuple[str, ...] = ()
    differing: dict[str, list[int]] = field(default_factory=dict)
    first: Difference | None = None
    shown: list[Difference] = field(default_factory=list)
    """The first ``show`` differences (the first included), for the report."""
    digest: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    policy_cpu_s: dict[str, float] = field(default_factory=dict)
    idle_reservations: dict[str, int] = field(default_factory=dict)
    """With reasons: passes the capture decided nothing on (the idle screen of a pass without reasons,
    which skips everything, reservations included) where the replay with reasons reports reservations."""

    @property
    def ok(self) -> bool:
        return not any(self.differing.values())


def compare(
    path: str | Path,
    *,
    checks: tuple[str, ...] = ("fresh", "incremental"),
    fresh: Callable[[Snapshot], Decisions] = schedule,
    incremental: Callable[[], Callable[[Snapshot], Decisions]] = IncrementalScheduler,
    with_reasons: bool = False,
    limit: int | None = None,
    show: int = 1,
    progress: bool = False,
) -> CompareResult:
    """Replay every captured pass under each check and compare its decisions with the recorded ones.

    ``fresh``: ``fresh(snapshot)`` per pass, no state between passes. ``incremental``: one
    ``incremental()`` instance fed the snapshots in capture order. ``with_reasons``: the snapshot is
    replayed with reasons on; the pending reasons are left out of the comparison (the capture has
    none) — it checks that explaining changes no decision. One difference is expected and counted
    apart (:attr:`CompareResult.idle_reservations`): without reasons a pass that can change nothing
    is answered by the idle screen with empty decisions, while the full pass with reasons also
    reports the reservations it would hold.
    """
    wall, cpu = time.perf_counter(), time.process_time()
    header, passes = read_capture(path)
    res = CompareResult(header=header, checks=checks, differing={c: [] for c in checks})
    res.policy_cpu_s = dict.fromkeys(checks, 0.0)
    inc = incremental() if "incremental" in checks else None
    side = Path(str(path) + ".json")
    total = json.loads(side.read_text()).get("passes") if side.exists() else None
    if limit is not None and total is not None:
        total = min(total, limit)
    bar = _bar(progress, total=total, unit="pass", desc="compare")
    chain = Chain()
    for i, snap, want, _d in passes:
        if limit is not None and i >= limit:
            break
        s = replace(snap, with_reasons=True) if with_reasons else snap
        for check in checks:
            t = time.process_time()
            dec = fresh(s) if check == "fresh" else inc(s)  # type: ignore[misc]
            res.policy_cpu_s[check] += time.process_time() - t
            got = canonical(dec)
            if with_reasons:
                got = strip_pending(got)
                if got != want and _idle_screen_only(want, got):
                    res.idle_reservations[check] = res.idle_reservations.get(check, 0) + 1
                    got = want
            if got != want:
                res.differing[check].append(i)
                if len(res.shown) < show:
                    res.shown.append(Difference(i, snap.now, check, want, got))
                if res.first is None:
                    res.first = res.shown[0] if res.shown else Difference(i, snap.now, check, want, got)
            if check == checks[0]:
                chain.add(snap.now, pass_digest(got))
        res.passes += 1
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    passes.close()  # (stopped early by --limit: closes the file)
    res.digest = chain.hexdigest()
    res.wall_s = time.perf_counter() - wall
    res.cpu_s = time.process_time() - cpu
    return res


def _idle_screen_only(want: dict[str, list[Any]], got: dict[str, list[Any]]) -> bool:
    """``want`` is an empty pass and ``got`` differs from it only by reservations."""
    return not any(want.values()) and not any(v for k, v in got.items() if k not in ("reservations", "reserved_start"))


# ------------------------------------------------------------------------------------------------
# The committed digest file
def digest_doc(r: RunResult) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "about": (
            "Decision digests of Fairway's policy on a Philly slice (bench/replay_passes.py, docs/simulation.md"
            ' "Replaying passes"). per_pass: [seconds since the trace start, first 16 hex digits of the'
            " pass digest], in pass order."
        ),
        "record_command": RECORD_COMMAND,
        "recorded_at_commit": git_commit(),
        "slice": r.slice,
        "trace_sha256": r.trace_sha256,
        **r.summary(),
        "per_pass": [[t, d] for t, d in r.per_pass],
    }


def write_digest_file(doc: dict[str, Any], path: str | Path = DIGEST_FILE) -> None:
    """JSON with one pass per line (reviewable diffs when a re-record changes a few passes)."""
    head = {k: v for k, v in doc.items() if k != "per_pass"}
    text = json.dumps(head, indent=1, sort_keys=False)[:-2]
    rows = ",\n".join(json.dumps(p) for p in doc["per_pass"])
    Path(path).write_text(text + ',\n "per_pass": [\n' + rows + "\n ]\n}\n")


def read_digest_file(path: str | Path = DIGEST_FILE) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


@dataclass
class Check:
    ok: bool
    lines: list[str]
    first_pass: int | None = None


def check_against(r: RunResult | dict[str, Any], doc: dict[str, Any]) -> Check:
    """Compare a run (or a capture's header + recomputed passes) with a digest file's contents."""
    if isinstance(r, RunResult):
        sl, sha, n, dg, per = r.slice, r.trace_sha256, r.passes, r.digest, [list(p) for p in r.per_pass]
    else:
        sl, sha, n, dg, per = r["slice"], r["trace_sha256"], r["passes"], r["digest"], r["per_pass"]
    lines = []
    if sl != doc["slice"]:
        diff = {
            k: (doc["slice"].get(k), sl.get(k))
            for k in sl.keys() | doc["slice"].keys()
            if sl.get(k) != doc["slice"].get(k)
        }
        return Check(False, [f"NOT COMPARABLE: the digest file is for another slice (file, this run): {diff}"])
    if sha != doc["trace_sha256"]:
        lines.append("note: the trace file differs from the one the digest was recorded on")
    if dg == doc["digest"] and n == doc["passes"]:
        return Check(True, [*lines, f"OK: {n:,} passes, digest {dg} = the committed digest"])
    first = next((i for i, (a, b) in enumerate(zip(per, doc["per_pass"], strict=False)) if list(a) != list(b)), None)
    if first is None:
        first = min(len(per), len(doc["per_pass"]))
    lines.append(f"DIFFERENT: {n:,} passes, digest {dg}; committed: {doc['passes']:,} passes, digest {doc['digest']}")
    if first < min(len(per), len(doc["per_pass"])):
        t_new, d_new = per[first]
        t_old, d_old = doc["per_pass"][first]
        lines.append(
            f"first differing pass: #{first} (committed t={t_old} s, day {t_old / DAY:.4f}, {d_old};"
            f" this run t={t_new} s, {d_new})"
        )
    else:
        lines.append(f"the first {first:,} passes agree; then one run has more passes")
    lines.append(
        "to see the decisions: capture on the recorded commit, then `compare` on this one; if the change is"
        f" intended, re-record with `{RECORD_COMMAND}`"
    )
    return Check(False, lines, first)


# ------------------------------------------------------------------------------------------------
# Command line
def _bar(enabled: bool, **kw: Any):  # type: ignore[no-untyped-def]
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(file=sys.stderr, dynamic_ncols=True, mininterval=0.5, **kw)


def _duration(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": DAY}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def config_from(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        trace=args.trace,
        days=args.days,
        hosts=args.hosts,
        gpus_per_host=args.gpus_per_host,
        depth=args.depth or None,
        grace_s=args.grace,
        seed=args.seed,
        fault_rate=args.fault_rate,
        repair_s=_duration(args.repair),
        tick_gap_s=args.tick_gap,
        checkpoint=args.checkpoint,
    )


def _args(p: argparse.ArgumentParser) -> None:
    d = SimConfig()
    p.add_argument("mode", nargs="?", default="digest", choices=("digest", "capture", "compare"))
    p.add_argument("--record", action="store_true", help="digest, capture: write the digest file from this run")
    p.add_argument("--capture", default=str(DEFAULT_CAPTURE), help="capture: where to write; compare: what to read")
    p.add_argument("--digest-file", default=str(DIGEST_FILE))
    p.add_argument("--no-progress", action="store_true")
    g = p.add_argument_group("slice (digest, capture)")
    g.add_argument("--trace", default=d.trace)
    g.add_argument("--start", type=float, default=0.0, help="start this many days into the trace, on an empty cluster")
    g.add_argument(
        "--days", type=float, default=DEFAULT_DAYS, help=f"simulated days from the trace start ({DEFAULT_DAYS:g})"
    )
    g.add_argument("--hosts", type=int, default=d.hosts)
    g.add_argument("--gpus-per-host", type=int, default=d.gpus_per_host)
    g.add_argument("--depth", type=int, default=8, help="queue view (0: all pending; 8: the recorded slice)")
    g.add_argument("--grace", type=int, default=d.grace_s)
    g.add_argument("--seed", type=int, default=d.seed)
    g.add_argument("--fault-rate", type=float, default=d.fault_rate)
    g.add_argument("--repair", default=f"{d.repair_s}s")
    g.add_argument("--tick-gap", type=int, default=d.tick_gap_s)
    g.add_argument("--checkpoint", default=d.checkpoint, choices=("resume", "restart"))
    c = p.add_argument_group("compare")
    c.add_argument("--check", default="both", choices=("fresh", "incremental", "both"))
    c.add_argument("--with-reasons", action="store_true", help="replay with pending reasons on (not compared)")
    c.add_argument("--limit", type=int, default=None, help="only the first N passes")
    c.add_argument("--show", type=int, default=1, help="print the decisions of the first N differing passes (1)")


def _print_run(r: RunResult, what: str) -> None:
    print(
        f"{what}: {r.passes:,} passes ({r.deciding:,} deciding) in {r.wall_s:.1f} s wall, {r.cpu_s:.1f} s CPU"
        f" (policy {r.policy_cpu_s:.1f} s); decisions {r.totals}"
    )
    print(f"digest {r.digest}")
    if r.path:
        print(f"wrote {_shown(r.path)} ({r.size_bytes / 1e6:.1f} MB)")


def _against_file(r: RunResult, path: str, record: bool) -> int:
    if record:
        write_digest_file(digest_doc(r), path)
        print(f"recorded {_shown(path)}: {r.passes:,} passes, digest {r.digest} (commit it)")
        return 0
    if not Path(path).exists():
        print(f"no digest file {_shown(path)}; record one with `{RECORD_COMMAND}`")
        return 2
    chk = check_against(r, read_digest_file(path))
    for line in chk.lines:
        print(line)
    return 0 if chk.ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _args(ap)
    args = ap.parse_args(argv)
    progress = not args.no_progress

    if args.mode == "compare":
        checks = ("fresh", "incremental") if args.check == "both" else (args.check,)
        r = compare(
            args.capture,
            checks=checks,
            with_reasons=args.with_reasons,
            limit=args.limit,
            show=args.show,
            progress=progress,
        )
        h = r.header
        print(
            f"capture {_shown(args.capture)}: slice {h['slice']}, captured at commit {h['commit']};"
            f" replayed with the policy of {_shown(str(CODE_ROOT)) or '.'} at commit {git_commit()}"
        )
        print(
            f"compared {r.passes:,} passes × {'+'.join(checks)}"
            f"{' (with reasons)' if args.with_reasons else ''} in {r.wall_s:.1f} s wall, {r.cpu_s:.1f} s CPU"
            f" (policy: {', '.join(f'{k} {v:.1f} s' for k, v in r.policy_cpu_s.items())})"
        )
        for check, n in r.idle_reservations.items():
            print(f"({check}: {n:,} passes empty without reasons (idle screen) report reservations with them)")
        if r.ok:
            print(f"SAME decisions on all {r.passes:,} passes (digest {r.digest})")
        else:
            for check, idx in r.differing.items():
                if idx:
                    more = " …" if len(idx) > 20 else ""
                    print(f"DIFFERENT under {check}: {len(idx):,} of {r.passes:,} passes differ: {idx[:20]}{more}")
            for d in r.shown:
                print(d.report())
        trailer = h.get("trailer")
        if trailer and Path(args.digest_file).exists():
            doc = read_digest_file(args.digest_file)
            if doc["slice"] == h["slice"]:
                same = trailer["digest"] == doc["digest"]
                rel = "=" if same else "!="
                print(f"(the capture's recorded digest {rel} the committed digest {doc['digest'][:16]}…)")
        return 0 if r.ok else 1

    cfg = config_from(args)
    if args.mode == "capture":
        r = run(cfg, args.capture, start_day=args.start, progress=progress)
        _print_run(r, "captured")
        if args.record or (Path(args.digest_file).exists() and read_digest_file(args.digest_file)["slice"] == r.slice):
            return _against_file(r, args.digest_file, args.record)
        return 0
    r = run(cfg, None, start_day=args.start, progress=progress)
    _print_run(r, "simulated")
    return _against_file(r, args.digest_file, args.record)


if __name__ == "__main__":
    sys.exit(main())
