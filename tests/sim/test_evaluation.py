"""Issue 16's metrics on small hand-made traces, values checked by hand: workload classes, demand ÷
capacity, the disruption ledger (checkpoint loss to preemption and to faults), evictions per decision."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.classes import classify, declares_zero
from scheduler.sim.simulate import DAY, T0, SimConfig, SimulationError, TraceSim, make_policy, prepare, summarize
from scheduler.trace import TraceJob

from .test_simulate import make_trace

H = 3600


def _job(i: int, t: int, vc: str, g: int, d: int) -> TraceJob:
    return TraceJob(i, t, vc, g, d, d)


def test_classes_from_the_trace() -> None:
    jobs = [_job(i, 30 * i, "aa", 1, 5 * H) for i in range(10)]  # 10 1-GPU jobs 30 s apart: a sweep
    jobs += [_job(10 + i, 10_000 + 60 * i, "bb", 1, 600) for i in range(9)]  # 9 only: not a sweep (debug)
    jobs += [_job(19 + i, 20_000 + 61 * i, "cc", 1, 600) for i in range(12)]  # 61 s apart: no burst (debug)
    jobs += [
        _job(31, 20_030, "dd", 2, 1800),  # 2 GPUs, 30 min: debug
        _job(32, 20_040, "dd", 2, 1801),  # 2 GPUs, longer: training
        _job(33, 20_050, "dd", 8, 10 * H),  # training
        _job(34, 20_060, "dd", 3, 600),  # short but 3 GPUs: other
        _job(35, 20_070, "dd", 1, 5 * H),  # a lone long 1-GPU job: other
        _job(36, 60, "zz", 1, 100),  # 1 GPU of another VC among aa's burst: its own VC has no burst
    ]
    c = classify(jobs)
    assert [c[i] for i in range(10)] == ["sweep"] * 10
    assert {c[i] for i in range(10, 31)} == {"debug"}
    assert [c[i] for i in range(31, 37)] == ["debug", "training", "training", "other", "other", "debug"]


def test_debug_zero_is_a_fixed_draw_per_job() -> None:
    drawn = [declares_zero(i, 0.5) for i in range(2000)]
    assert 900 < sum(drawn) < 1100
    assert drawn == [declares_zero(i, 0.5) for i in range(2000)]
    assert not any(declares_zero(i, 0.0) for i in range(100)) and all(declares_zero(i, 1.0) for i in range(100))


def _sim(tmp_path: Path, rows: list[tuple[int, str, int, int]], policy: str, **kw: object) -> tuple[dict, TraceSim]:
    base: dict[str, object] = {"hosts": 1, "gpus_per_host": 8, "grace_s": 30, "unallocated_rule": "none"}
    base.update(kw)
    inputs = prepare(SimConfig(trace=make_trace(tmp_path / "t.csv", rows), **base))  # type: ignore[arg-type]
    fn, charge_all = make_policy(policy)
    sim = TraceSim(inputs, fn, charge_all=charge_all)
    m = sim.run()
    return summarize(policy, inputs, sim, m), sim


def test_demand_over_capacity_per_day(tmp_path: Path) -> None:
    """Two 8-GPU 12-hour jobs at 0 on 8 GPUs (fifo): 16 GPUs asked for 12 h, then 8 for 12 h, then 0."""
    r, _ = _sim(tmp_path, [(0, "aa", 8, 12 * H), (0, "bb", 8, 12 * H)], "fifo", days=3)
    dr = r["demand_ratio"]
    assert dr["daily"] == [1.5, 0.0, 0.0]  # (16 × 12 h + 8 × 12 h) / (8 × 24 h)
    assert dr["daily_min"] == [1.0, 0.0, 0.0]
    assert dr["days_over_capacity"] == 1 and dr["median_over_capacity"] == 1.5
    assert dr["mean"] == 0.5
    assert r["busy_days"] == [0] and r["occupancy_of_available_busy_days"] == 1.0


def test_ledger_with_a_checkpoint_interval(tmp_path: Path) -> None:
    """aa's 10-h 8-GPU job is preempted at 2 h (its M) for bb's 1-h 8-GPU job, stops after 30 s of
    grace: 7,230 s run, hourly checkpoints, so 30 s × 8 GPUs are lost and run again."""
    rows = [(0, "aa", 8, 10 * H), (H, "bb", 8, H)]
    r, _ = _sim(tmp_path, rows, "fairway", days=7, checkpoint_interval_s=H)
    assert r["preemptions"] == 1 and r["protected_work_violations"] == 0
    led = r["ledger"]
    aa, bb = led["per_budget"]["org/vc-aa"], led["per_budget"]["org/vc-bb"]
    assert aa["lost_preemption_gpu_h"] == round(8 * 30 / H, 1) == 0.1
    assert aa["preemptions"] == 1 and bb["preemptions"] == 0
    assert aa["lost_faults_gpu_h"] == 0
    # delivered = the work plus the work lost and run again; owed = min(entitlement, demand) = the work
    assert aa["delivered_gpu_h"] == round(8 * (10 * H + 30) / H, 1) == aa["run_gpu_h"]
    assert aa["owed_gpu_h"] == 80.0 and bb["owed_gpu_h"] == bb["delivered_gpu_h"] == 8.0
    assert led["total"]["delivered_gpu_h"] == aa["delivered_gpu_h"] + bb["delivered_gpu_h"]
    assert led["total"]["lost_preemption_gpu_h"] == 0.1
    assert led["preemptions_per_1000_gpu_h"] == round(1000 / (8 * (11 * H + 30) / H), 3)
    assert led["saturated_weeks"] == [] and led["saturated_week_ratio_min"] is None
    ev = r["evictions"]
    assert ev["decisions"] == 1 and ev["evicted_over_requested"]["max"] == 1.0
    assert ev["evicted_beyond_need"] == {"max": 0.0, "p99": 0.0, "mean": 0.0}


def test_restart_loses_the_whole_attempt_resume_nothing(tmp_path: Path) -> None:
    rows = [(0, "aa", 8, 10 * H), (H, "bb", 8, H)]
    r, _ = _sim(tmp_path, rows, "fairway", days=7, checkpoint="restart")
    assert r["ledger"]["per_budget"]["org/vc-aa"]["lost_preemption_gpu_h"] == round(8 * (2 * H + 30) / H, 1)
    r, _ = _sim(tmp_path, rows, "fairway", days=7)
    assert r["ledger"]["per_budget"]["org/vc-aa"]["lost_preemption_gpu_h"] == 0


def test_a_one_gpu_preemptor_evicts_eight(tmp_path: Path) -> None:
    """bb's 1-GPU job preempts aa's whole 8-GPU attempt: 8 evicted for 1 requested, 7 beyond need."""
    rows = [(0, "aa", 8, 10 * H), (H, "bb", 1, H)]
    r, _ = _sim(tmp_path, rows, "fairway", days=1)
    ev = r["evictions"]
    assert ev["decisions"] == 1
    assert ev["evicted_over_requested"] == {"max": 8.0, "p99": 8.0, "mean": 8.0}
    assert ev["evicted_beyond_need"] == {"max": 7.0, "p99": 7.0, "mean": 7.0}
    assert (ev["gpus_evicted"], ev["gpus_beyond_need"]) == (8, 7)
    split = ev["beyond_need_by_victims"]  # aa's attempt is allocated (M = its run time, at most 2 h)
    assert split["some_allocated"] == {
        "decisions": 1,
        "with_beyond_need": 1,
        "gpus_beyond_need": 7,
        "max_beyond_need": 7,
        "mean_requested": 1.0,
    }
    assert split["unallocated_only"]["decisions"] == 0 and split["unallocated_only"]["max_beyond_need"] is None


def test_beyond_need_split_by_the_victims_funding_class() -> None:
    from scheduler.sim.simulate import eviction_stats

    decisions = [(16, 1, 15), (8, 8, 0), (8, 1, 7)]
    victims = [(0, 16), (8, 0), (2, 6)]  # (allocated GPUs evicted, unallocated GPUs evicted)
    split = eviction_stats(decisions, victims)["beyond_need_by_victims"]
    assert split["unallocated_only"] == {
        "decisions": 1,
        "with_beyond_need": 1,
        "gpus_beyond_need": 15,
        "max_beyond_need": 15,
        "mean_requested": 1.0,
    }
    assert split["some_allocated"] == {
        "decisions": 2,
        "with_beyond_need": 1,
        "gpus_beyond_need": 7,
        "max_beyond_need": 7,
        "mean_requested": 4.5,
    }
    assert "beyond_need_by_victims" not in eviction_stats(decisions)
    assert eviction_stats(decisions)["beyond_need_counts"] == {"0": 1, "7": 1, "15": 1}


def test_work_lost_to_a_host_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One fault at 4,000 s (repaired 600 s later, then none): 30-min checkpoints lose 400 s × 8 GPUs."""

    def once(self: TraceSim, host: str, after: int) -> int:
        return T0 + 4000 if after == T0 else T0 + 100 * DAY

    monkeypatch.setattr(TraceSim, "_next_fault", once)
    rows = [(0, "aa", 8, 5 * H)]
    r, _ = _sim(tmp_path, rows, "fairway", days=1, fault_rate=1.0, repair_s=600, checkpoint_interval_s=1800)
    aa = r["ledger"]["per_budget"]["org/vc-aa"]
    assert r["fault_kills"] == 1
    assert aa["lost_faults_gpu_h"] == round(8 * 400 / H, 1) and aa["lost_preemption_gpu_h"] == 0
    assert aa["run_gpu_h"] == round(8 * (5 * H + 400) / H, 1)
    assert r["availability"] == round(1 - 600 / DAY, 4)


def test_wait_by_class_and_debug_zero(tmp_path: Path) -> None:
    """A debug job waits behind a training job on a full host; with debug_zero=1 it runs unallocated."""
    rows = [(0, "aa", 8, 2 * H), (100, "bb", 1, 600)]
    r, _ = _sim(tmp_path, rows, "fifo", days=1)
    w = r["wait_s_by_class"]
    assert w["training"]["p90"] == 0 and w["debug"]["p90"] == 2 * H - 100
    assert w["debug"]["started"] == 1 and w["sweep"]["p50"] is None
    assert r["class_run_gpu_h"]["debug"] == round(600 / H, 1)
    by = r["debug_wait_s_by_funding"]
    assert by["allocated"] == {
        "jobs": 1,
        "p50": 2 * H - 100,
        "p90": 2 * H - 100,
        "p99": 2 * H - 100,
        "within_30s": 0.0,
        "within_60s": 0.0,
    }
    assert by["unallocated"]["jobs"] == 0 and by["unallocated"]["within_30s"] is None
    r, _ = _sim(tmp_path, rows, "fairway", days=1, debug_zero=1.0)
    assert r["occupancy_unallocated"] > 0 and r["ledger"]["per_budget"]["org/vc-bb"]["delivered_gpu_h"] == 0
    by = r["debug_wait_s_by_funding"]
    assert by["allocated"]["jobs"] == 0 and by["unallocated"]["jobs"] == 1
    assert by["unallocated"]["p90"] == 2 * H - 100  # unallocated work never preempts (DESIGN.md §3.4 rule 4)


def test_a_slice_starts_later_and_bad_options_fail(tmp_path: Path) -> None:
    rows = [(0, "aa", 1, 60), (DAY, "aa", 1, 60), (DAY + 5, "bb", 1, 60)]
    trace = make_trace(tmp_path / "t.csv", rows)
    inputs = prepare(SimConfig(trace=trace, hosts=1, start_day=1))
    assert [j.job_id for j in inputs.jobs] == [1, 2] and inputs.t_base == DAY and inputs.horizon_s == 6
    with pytest.raises(SimulationError, match="no job"):
        prepare(SimConfig(trace=trace, hosts=1, start_day=3))
    for kw, msg in (
        ({"start_day": -1}, "start-day"),
        ({"checkpoint_interval_s": -1}, "interval"),
        ({"debug_zero": 2}, "probability"),
    ):
        with pytest.raises(SimulationError, match=msg):
            prepare(SimConfig(trace=trace, **kw))  # type: ignore[arg-type]


def test_report_shows_the_evaluation_and_the_target_table(tmp_path: Path) -> None:
    from bench.simulate_philly import target_table
    from scheduler.sim.report import write_report
    from scheduler.sim.simulate import simulate

    from .test_simulate import busy_trace

    cfg = SimConfig(trace=busy_trace(tmp_path, n=80), hosts=2, gpus_per_host=8, days=8, checkpoint_interval_s=1800)
    report = simulate(cfg, ["fairway", "kai-timeshare"])
    by = {r["policy"]: r for r in report["policies"]}
    rows = target_table(by)
    assert [r["met"] for r in rows][-1] is True  # 0 protected-work violations
    assert set(rows[0]["values"]) == {"fairway", "kai-timeshare"}
    report["target_table"] = rows
    names = {p.name for p in write_report(report, tmp_path / "out")}
    assert {"delivered_vs_owed.png", "wait_cdf_by_class.png", "demand_over_capacity.png"} <= names
    md = (tmp_path / "out" / "report.md").read_text()
    for title in ("## Demand ÷ capacity", "## The disruption ledger", "debug p90, seconds", "## Targets of issue 16"):
        assert title in md
    for r in report["policies"]:  # the ledger's totals are the sums of its budgets
        led = r["ledger"]
        assert led["total"]["run_gpu_h"] == pytest.approx(sum(b["run_gpu_h"] for b in led["per_budget"].values()))


def test_median_over_capacity_is_over_the_days_above_one() -> None:
    from scheduler.sim.simulate import median_over_capacity

    assert median_over_capacity([0.4, 1.0, 1.5, 2.0, 3.5, 4.0]) == 2.75  # days above 1: 1.5, 2, 3.5, 4
    assert median_over_capacity([1.2, 0.9, 3.0]) == 2.1
    assert median_over_capacity([0.5, 1.0]) is None
