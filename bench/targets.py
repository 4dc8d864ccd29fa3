"""DESIGN.md §9's performance targets in one table: target, measured, ratio, met.

    python bench/targets.py [--quick] [--only NAME[,NAME]] [--repeat N] [--verbose]

Runs the §9 benchmarks that fit in a few minutes at their real sizes, by calling the bench
scripts' own functions (``bench/tick.py``, ``bench/tick_db.py``, ``bench/estimates.py``), and
prints one table. ``--quick`` runs each at a reduced size (a smoke run of the same code, seconds
each): its ratios are not verdicts, so its ``met`` column reads ``-``. ``--only`` picks targets by
name (the first column). Names:

    tick            policy tick, 1,250 hosts x 8 GPUs, ~5,000 running, ~20,000 pending: median <= 0.25 s
    tick4000        policy tick, 4,000 hosts, ~140,000 pending: median <= 2 s
    growth          the policy's cost in pending workloads: no worse than O(n log n) (ratio <= 1)
    tick_db         full tick on PostgreSQL at the first size, 10 minutes after a tick: <= 2 s (wall)
    tick_db_starts  the same an hour without a tick (~2,000 workloads start in it): <= 2 s (wall)
    estimates       estimated starts for every pending workload at the first size: <= 1 s
    quote           a quote at demo size: <= 300 ms

Times are CPU seconds of this process (``time.process_time``) but for the two database ticks, whose
target is the tick's wall-clock time (PostgreSQL's own CPU is another process's). ``tick_db`` and
``tick_db_starts`` need PostgreSQL: ``DATABASE_URL`` (default, as ``bench/tick_db.py``'s,
``postgres://postgres@127.0.0.1:5432/fairway_bench``; the name must contain "bench": the bench
empties it). ``estimates`` runs the forward simulation once with a CPU budget of ``--estimate-budget``
seconds (default 30): unless it covers the whole window in 1 s, the measured figure is a lower bound.

Not run here (a whole process layout, or tens of minutes): the 1,000 agents and the API's targets
(``bench/agents_load.py``, ``bench/api_load.py``) and the whole Philly trace
(``bench/simulate_philly.py``); their latest numbers and commands are in docs/benchmarks/README.md.
Exit status 1 if a target errored, else 0 (a missed target is a figure, not an error).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm  # noqa: E402


@dataclass(frozen=True)
class Measured:
    value: float  # in the target's unit; the ratio is value / bound
    shown: str  # the figure as printed
    lower_bound: bool = False  # the run stopped before the end: the real figure is higher


@dataclass(frozen=True)
class Target:
    name: str
    text: str  # the §9 line, short
    bound: float
    unit: str
    run: Callable[[bool, int], Measured]  # (quick, repeat) -> the measurement


def _tick(hosts: int, workloads: int, repeat: int) -> Measured:
    from bench.synth import make_settled
    from bench.tick import timed

    snap = make_settled(hosts, workloads).snapshot()
    med, _ = timed(snap, repeat)
    return Measured(med, f"{med:.3f} s CPU, median of {repeat} ({len(snap.pending):,} pending)")


def run_tick(quick: bool, repeat: int) -> Measured:
    return _tick(125, 2500, repeat) if quick else _tick(1250, 25000, repeat)


def run_tick4000(quick: bool, repeat: int) -> Measured:
    # bench/tick.py times the 4,000-host row with half the repeats
    return _tick(400, 16000, 1) if quick else _tick(4000, 160000, max(1, repeat // 2))


def run_growth(quick: bool, repeat: int) -> Measured:
    from bench.tick import growth

    rows = growth((100, 1000), repeat, hosts=125) if quick else growth((1000, 10000, 100000), repeat)
    pending, med, ratio = rows[-1]
    first = rows[0]
    return Measured(
        ratio,
        f"{ratio:.2f} at {pending:,} pending ({med / pending * 1e6:.1f} µs/job; "
        f"{first[1] / first[0] * 1e6:.1f} at {first[0]:,})",
    )


_db: dict[Any, Any] = {}  # the database's name, and the reasons before per size


def _tick_db(after: int, quick: bool, repeat: int) -> Measured:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from bench import tick_db

    hosts, workloads = (125, 2500) if quick else (1250, 25000)
    if "name" not in _db:
        _db["name"] = tick_db.setup()
    key = ("previous", hosts, workloads)
    if key not in _db:
        _db[key] = tick_db.reasons_before(hosts, workloads)
    engine, cluster_id, _ = tick_db.write_state(after, _db[key], hosts, workloads)
    med, _runs, result, queries, _changed = tick_db.time_ticks(cluster_id, tick_db.dt(engine.now), repeat)
    return Measured(
        med["total"],
        f"{med['total']:.3f} s wall, median of {repeat} ({len(result.starts):,} starts, {queries} queries; "
        f"CPU {med['total_cpu']:.3f} s)",
    )


def run_tick_db(quick: bool, repeat: int) -> Measured:
    return _tick_db(600, quick, repeat)


def run_tick_db_starts(quick: bool, repeat: int) -> Measured:
    return _tick_db(3600, quick, repeat)


ESTIMATE_BUDGET_S = [30.0]  # --estimate-budget


def run_estimates(quick: bool, repeat: int) -> Measured:
    from bench.estimates import estimates_bench, state

    snap = state(40, 800) if quick else state(1250, 25000)
    budget = 2.0 if quick else ESTIMATE_BUDGET_S[0]
    r = estimates_bench(snap, budget, 1, 1.0)
    whole = r["reached"] >= r["window_end"]
    share = 100 * r["estimated"] / max(1, r["pending"])
    reached = (r["reached"] - r["now"]) / 86400
    if whole:
        return Measured(r["cpu_s"], f"{r['cpu_s']:.3f} s CPU, the whole window ({share:.0f} % estimated)")
    return Measured(
        r["cpu_s"],
        f"> {r['cpu_s']:.1f} s CPU: cut at now + {reached:.3f} d of {(r['window_end'] - r['now']) / 86400:g} d, "
        f"{share:.0f} % of pending estimated",
        lower_bound=True,
    )


def run_quote(quick: bool, repeat: int) -> Measured:
    from bench.estimates import quote_times

    n = 1 if quick else max(repeat, 5)
    _demo, quotes = quote_times(n)
    worst = max(q[2] for q in quotes)
    return Measured(worst, f"{worst * 1000:.0f} ms CPU, the slower of {len(quotes)} budgets' medians of {n}")


TARGETS = [
    Target("tick", "policy tick, 1,250 hosts, ~20k pending: median", 0.25, "s", run_tick),
    Target("tick4000", "policy tick, 4,000 hosts, ~140k pending: median", 2.0, "s", run_tick4000),
    Target("growth", "policy cost in pending: O(n log n) (ratio to n log n)", 1.0, "", run_growth),
    Target("tick_db", "full tick on PostgreSQL, first size", 2.0, "s", run_tick_db),
    Target("tick_db_starts", "full tick on PostgreSQL, ~2,000 starts in it", 2.0, "s", run_tick_db_starts),
    Target("estimates", "estimated starts, every pending workload, first size", 1.0, "s", run_estimates),
    Target("quote", "a quote at demo size", 0.3, "s", run_quote),
]
NAMES = [t.name for t in TARGETS]
COLUMNS = ("name", "target", "measured", "ratio", "met")


def table(rows: list[tuple[str, str, str, str, str]]) -> str:
    """The rows under ``COLUMNS``, aligned: one header line, one rule, one line per row."""
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(COLUMNS)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(COLUMNS), line(tuple("-" * w for w in widths)), *(line(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="reduced sizes: a smoke run, no verdicts")
    ap.add_argument("--only", help=f"comma-separated names: {', '.join(NAMES)}")
    ap.add_argument("--repeat", type=int, default=5, help="passes or ticks per timed figure (default 5)")
    ap.add_argument("--estimate-budget", type=float, default=30.0, help="CPU s of the estimates' run (default 30)")
    ap.add_argument("--verbose", action="store_true", help="show the bench functions' own lines")
    args = ap.parse_args(argv)
    chosen = TARGETS
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in NAMES]
        if unknown or not names:
            ap.error(f"unknown target(s) {', '.join(unknown)}; names: {', '.join(NAMES)}")
        chosen = [t for t in TARGETS if t.name in names]
    ESTIMATE_BUDGET_S[0] = args.estimate_budget
    repeat = min(args.repeat, 3) if args.quick else args.repeat

    rows: list[tuple[str, str, str, str, str]] = []
    failed = False
    progress = tqdm(chosen, desc="§9 targets", unit="target", file=sys.stderr, dynamic_ncols=True)
    for t in progress:
        progress.set_postfix_str(t.name)
        bound = f"≤ {t.bound:g} {t.unit}".rstrip()
        captured = io.StringIO()
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(captured):
                m = t.run(args.quick, repeat)
        except Exception as exc:  # noqa: BLE001 - one target's failure is a row, the others still run
            failed = True
            rows.append((t.name, f"{t.text} {bound}", f"error: {type(exc).__name__}: {exc}"[:100], "-", "-"))
            continue
        finally:
            if args.verbose and captured.getvalue():
                progress.write(captured.getvalue().rstrip(), file=sys.stderr)
        took = time.perf_counter() - started
        progress.write(f"{t.name}: {m.shown} ({took:.0f} s wall for the run)", file=sys.stderr)
        ratio = f"{'≥ ' if m.lower_bound else ''}{m.value / t.bound:.2f}"
        met = "-" if args.quick else ("no" if m.lower_bound or m.value > t.bound else "yes")
        rows.append((t.name, f"{t.text} {bound}", m.shown, ratio, met))
    progress.close()

    print(
        f"DESIGN.md §9 targets: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"Python {sys.version.split()[0]}{', --quick (reduced sizes: no verdicts)' if args.quick else ''}"
    )
    print(table(rows))
    if not args.only:
        print(
            "not run here: 1,000 agents and start p99, the API's p99s and 503s (bench/agents_load.py, "
            "bench/api_load.py), the whole Philly trace (bench/simulate_philly.py): docs/benchmarks/README.md"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
