"""The whole Philly trace's state at a day, pickled once, then continued for a few hours (issue 12).

    python bench/philly_state.py save --day 90 --out /tmp/d90.pkl [--then 100]   # ~10 CPU min to day 90
    python bench/philly_state.py run /tmp/d90.pkl --hours 12                      # CPU s and a digest
    python bench/philly_state.py run /tmp/d90.pkl --hours 12 --passes             # and the passes by cause

Fresh slices (``--start-day 85``) hold a few hundred pending workloads; the whole run holds
20,000+ from day ~70 on, where its CPU goes (docs/benchmarks/speed.md, pol31). ``save`` runs
Fairway exactly (512 GPUs, ``--checkpoint restart``, as the whole-trace benchmark) to the first
instant at or after ``--day`` (``TraceSim.advance``) and pickles the simulator with its policy;
``--then D`` goes on and saves ``<out>_D.pkl`` too. ``run`` loads one and advances ``--hours``,
printing the CPU seconds of that alone and a digest (passes, open attempts, every workload's first
start and end): a loaded state continued gives the digest of the run continued in place, and two
trees given one state must print the same digest (A/B pairs). A state holds lambdas (pickled by
their code and closure) and one dict keyed by object ids (re-keyed on loading); it is read only by
the code that wrote it, or code whose classes pickle the same.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import marshal
import pickle
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduler.policy.types import Decisions, Snapshot  # noqa: E402
from scheduler.sim.simulate import DAY, T0, SimConfig, TraceSim, make_policy, prepare  # noqa: E402


def _cell(value: object) -> types.CellType:
    return types.CellType(value)


def _function(module: str, code: bytes, cells: list[types.CellType] | None, defaults: Any, qualname: str) -> Any:
    body = marshal.loads(code)  # noqa: S302 (code this script pickled)
    g = importlib.import_module(module).__dict__
    f = types.FunctionType(body, g, qualname.rsplit(".", 1)[-1], defaults, tuple(cells or ()) or None)
    f.__qualname__ = qualname
    return f


class _Cell:
    def __init__(self, value: object) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, ...]:
        return (_cell, (self.value,))


class _Pickler(pickle.Pickler):
    """Local functions and lambdas by their code and closure (the cells' values, not the cells)."""

    def reducer_override(self, obj: object) -> Any:
        if (
            isinstance(obj, types.FunctionType)
            and "<locals>" in obj.__qualname__
            or "<lambda>" in getattr(obj, "__qualname__", "")
        ):
            assert isinstance(obj, types.FunctionType)  # noqa: S101
            cells = None if obj.__closure__ is None else [_Cell(c.cell_contents) for c in obj.__closure__]
            code = marshal.dumps(obj.__code__)
            return (_function, (obj.__module__, code, cells, obj.__defaults__, obj.__qualname__))
        return NotImplemented


def _at(day: float) -> int:
    return T0 + int(day * DAY)


def save(day: float, out: Path, then: list[float]) -> None:
    inputs = prepare(SimConfig(checkpoint="restart"))
    policy, charge_all = make_policy("fairway")
    sim = TraceSim(inputs, policy, charge_all=charge_all)
    cpu = time.process_time()
    for d, path in [(day, out), *((t, out.with_name(f"{out.stem}_{t:g}.pkl")) for t in then)]:
        sim.advance(_at(d))
        print(f"day {d:g}: {time.process_time() - cpu:.1f} CPU s, digest {digest(sim)}", flush=True)
        with path.open("wb") as f:
            _Pickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump((sim, _at(d)))


def load(path: Path) -> tuple[TraceSim, int]:
    """The simulator saved and the instant it was advanced to."""
    with path.open("rb") as f:
        sim, until = pickle.load(f)  # noqa: S301 (a state this script wrote)
    index = sim.policy._pending  # type: ignore[attr-defined]
    index.by_obj = {id(w): w for w in index.by_obj.values()}
    for bp in index.budgets.values():  # a state written by a tree whose skip index kept no spans
        if bp.runs is not None and not hasattr(bp.runs, "spans"):
            bp.runs.spans = []
        if bp.runs is not None and not hasattr(bp.runs, "derived"):  # a tree that kept no queue rest
            bp.runs.derived = None
    return sim, until


def digest(sim: TraceSim) -> tuple[int, int, str]:
    rows = sorted(
        (w.id, getattr(w, "first_start", None), getattr(w, "finished_at", None)) for w in sim.workloads.values()
    )
    return sim.m.passes, len(sim.attempts), hashlib.sha256(repr(rows).encode()).hexdigest()[:12]


PassRow = tuple[str, str, str]
"""(what made the pass due, "screened" or "full", "decided" or "nothing")."""


def by_cause(sim: TraceSim, until: int) -> dict[PassRow, list[float]]:
    """``sim.advance(until)`` with its passes counted (docs/benchmarks/speed.md, pol35): per
    :data:`PassRow`, [passes, CPU s of the policy's calls]. The cause is the kinds of the events
    and arrivals that made the instant's pass due (``arrive``, ``exit``, ``release``, ``protect``,
    ``fault``, ``repair``, ``tick``; several joined by ``+``), ``again`` for a pass repeated at
    the same instant; "screened" when the idle screen answered (``IncrementalScheduler.screened``
    grew); "decided" when the pass started, stopped or drained anything (``Decisions.changed``;
    the simulator applies no reservation, so a pass deciding nothing leaves the run as it was).
    The run is the plain ``advance``'s: the wrappers only count (tests/sim/test_simulate.py)."""
    rows: dict[PassRow, list[float]] = {}
    due: set[str] = set()
    first = [True]
    policy, process, arrive, one_pass = sim.policy, sim._process_event, sim._arrive, sim._pass

    def counted_policy(snap: Snapshot) -> Decisions:
        screened = getattr(policy, "screened", 0)
        cpu = time.process_time()
        dec = policy(snap)
        spent = time.process_time() - cpu
        cause = "+".join(sorted(due)) if first[0] else "again"
        first[0] = False
        kind = "screened" if getattr(policy, "screened", 0) > screened else "full"
        row = rows.setdefault((cause, kind, "decided" if dec.changed else "nothing"), [0, 0.0])
        row[0] += 1
        row[1] += spent
        return dec

    def counted_event(kind: str, ident: str) -> bool:
        got = process(kind, ident)
        if got:
            due.add(kind)
        return got

    def counted_arrival(job: Any) -> bool:
        got = arrive(job)
        if got:
            due.add("arrive")
        return got

    def counted_pass() -> None:
        first[0] = True
        one_pass()
        due.clear()

    sim.policy = counted_policy
    sim._process_event = counted_event  # type: ignore[method-assign]
    sim._arrive = counted_arrival  # type: ignore[method-assign]
    sim._pass = counted_pass  # type: ignore[method-assign]
    try:
        sim.advance(until)
    finally:
        sim.policy = policy
        for name in ("_process_event", "_arrive", "_pass"):
            del sim.__dict__[name]
    return rows


def run(path: Path, hours: float, *, passes: bool = False) -> None:
    sim, start = load(path)
    cpu = time.process_time()
    until = start + int(hours * 3600)
    rows: dict[PassRow, list[float]] = {}
    if passes:
        rows = by_cause(sim, until)
    else:
        sim.advance(until)
    spent = time.process_time() - cpu
    print(f"day {(start - T0) / DAY:g} + {hours:g} h: {spent:.2f} CPU s, {sim.m.passes} passes, digest {digest(sim)}")
    for (cause, kind, decided), (n, s) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"  {cause:24} {kind:9} {decided:8} {n:7d} passes {s:8.2f} CPU s {1000 * s / n:6.2f} ms")


def main() -> None:
    sys.setrecursionlimit(100_000)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("--day", type=float, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--then", type=float, action="append", default=[])
    r = sub.add_parser("run")
    r.add_argument("state", type=Path)
    r.add_argument("--hours", type=float, default=12)
    r.add_argument("--passes", action="store_true", help="count the passes by cause, screened, decided")
    args = ap.parse_args()
    if args.cmd == "save":
        save(args.day, args.out, args.then)
    else:
        run(args.state, args.hours, passes=args.passes)


if __name__ == "__main__":
    main()
