"""Estimate quality on a trace (scheduler/sim/estimate_quality.py): a tiny trace checked by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

from scheduler.sim.estimate_quality import EstimatingSim, Sampling, estimate_quality, sampled
from scheduler.sim.simulate import T0, SimConfig, prepare
from tests.sim.test_simulate import make_trace

H = 3600


def tiny(tmp_path: Path) -> SimConfig:
    # One host of 8 GPUs, grace 30 s, M = min(run time, 2 h), no unallocated work.
    #   j0 aa 8 GPUs at 0 for 4 h: starts at once (M = 2 h), needs no estimate.
    #   j1 bb 8 GPUs at 600 for 1 h: bb (no usage) may take j0 once its protection ends at 7200;
    #      j0 is stopped then, released at 7230 (grace), requeued; j1 starts at 7230.
    #   j2 aa 8 GPUs at 1200 for 30 min: behind j1, then behind j0 (requeued, submitted first).
    #      Really: j1 ends at 10830, j0 resumes its 7170 s left until 18000, j2 starts at 18000.
    trace = make_trace(tmp_path / "t.csv", [(0, "aa", 8, 4 * H), (600, "bb", 8, H), (1200, "aa", 8, H // 2)])
    return SimConfig(trace=trace, hosts=1, gpus_per_host=8, grace_s=30, unallocated_rule="none", days=1)


def test_first_estimates_and_their_quality_on_a_tiny_trace(tmp_path: Path) -> None:
    cfg = tiny(tmp_path)
    sim = EstimatingSim(prepare(cfg), Sampling(wall_time_slack_s=600))
    sim.run()
    starts = {k: w.first_start for k, w in sim.workloads.items()}
    assert starts == {"j0": T0, "j1": T0 + 7230, "j2": T0 + 18000}
    # With limits of run time + 600 s the forward simulation at j2's arrival: j1 holds the
    # reservation at j0's protection end (7200: the reservation caps its estimate, the grace is
    # not counted), starts at 7230 and is stopped by its limit at 7230 + 4200, released at 11460;
    # j0 (requeued, first in aa's queue) then runs until its limit 11460 + 15000, released at
    # 26490, when j2 starts.
    assert sim.first == {"j1": T0 + 7200, "j2": T0 + 26490}
    assert sim.unestimated == {"j0"}
    q = estimate_quality(prepare(cfg), Sampling(wall_time_slack_s=600))
    assert (q["jobs_sampled"], q["started_unestimated"], q["judged"], q["started_by_estimate"]) == (3, 1, 2, 1)
    assert q["fraction_started_by_estimate"] == 0.5  # j1 started 30 s after its estimate (the grace)
    assert q["median_error_h"] == pytest.approx((30 - 8490) / 2 / H, abs=1e-3)
    assert q["forward_runs"] == 2 and q["forward_runs_cut"] == 0


def test_without_limits_nothing_ends_and_estimates_follow_preemption_only(tmp_path: Path) -> None:
    sim = EstimatingSim(prepare(tiny(tmp_path)), Sampling())
    sim.run()
    # j1's estimate is its reservation as before; j2's comes from the forward simulation
    # preempting j1 (nothing ends on its own there), earlier than its real start.
    assert sim.first["j1"] == T0 + 7200
    assert sim.first["j2"] is not None and sim.first["j2"] < T0 + 18000


def test_sampling_by_rate_and_interval(tmp_path: Path) -> None:
    assert all(sampled(i, 1.0) for i in range(100))
    picked = [i for i in range(2000) if sampled(i, 0.25)]
    assert 400 < len(picked) < 600 and picked == [i for i in range(2000) if sampled(i, 0.25)]
    # One forward simulation per 2 h at most: j1 (at 600) is estimated alone, j2 (at 1200) waits
    # for the next run, which only comes with a pass after 7800, when it is estimated still pending.
    sim = EstimatingSim(prepare(tiny(tmp_path)), Sampling(every_s=2 * H, wall_time_slack_s=600))
    sim.run()
    assert sim.runs == 2 and set(sim.first) == {"j1", "j2"}
    with pytest.raises(ValueError, match="rate"):
        Sampling(rate=0).check()


def test_simulate_command_reports_estimate_quality(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tiny(tmp_path)
    call_command(
        "simulate",
        "--trace", cfg.trace, "--hosts", "1", "--unallocated-rule", "none", "--days", "1",
        "--estimates", "--estimate-wall-time-slack", "10m", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    out = capsys.readouterr().out
    assert '"fraction_started_by_estimate": 0.5' in out
    assert (tmp_path / "out" / "estimates.json").exists()


def test_simulate_and_the_philly_bench_take_the_same_estimate_options() -> None:
    """Issue 13 (fix13): the estimate-quality options were declared twice, with different names
    (``--estimate-from-day`` / ``--estimates-from``) and units (a duration / integer seconds).
    Declared once (``scheduler.sim.estimate_options``): the same names, the same parse."""
    from bench.simulate_philly import build_parser
    from scheduler.management.commands.simulate import Command
    from scheduler.sim.estimate_options import sampling_from

    argv = [
        "--estimates", "--estimate-rate", "0.25", "--estimate-every", "30m", "--estimate-budget", "20",
        "--estimate-from-day", "7", "--estimate-wall-time-slack", "1h",
    ]  # fmt: skip
    simulate = vars(Command().create_parser("manage.py", "simulate").parse_args(argv))
    bench = vars(build_parser().parse_args(argv))
    expected = Sampling(rate=0.25, every_s=1800, budget_s=20.0, from_day=7.0, wall_time_slack_s=3600)
    assert sampling_from(simulate) == sampling_from(bench) == expected
    # Plain seconds are the same unit.
    seconds = ["--estimate-every", "1800", "--estimate-wall-time-slack", "3600"]
    assert sampling_from(vars(build_parser().parse_args(seconds))).every_s == 1800
    names = {a.dest for a in build_parser()._actions if a.dest.startswith("estimate")}
    assert names == {a.dest for a in Command().create_parser("m", "simulate")._actions if a.dest.startswith("estimate")}
    with pytest.raises(ValueError, match="not a duration"):
        sampling_from(vars(build_parser().parse_args(["--estimate-every", "soon"])))
