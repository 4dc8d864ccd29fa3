"""The trace simulator on small traces made here (scheduler/sim/simulate.py, docs/simulation.md)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.policy import UsageRecord
from scheduler.policy.usage import windowed_usage
from scheduler.sim.budgets import BudgetFileError, default_plan, parse_plan
from scheduler.sim.simulate import (
    DAY,
    T0,
    SimConfig,
    TraceSim,
    WindowUsage,
    make_policy,
    prepare,
    run_policy,
    simulate,
    summarize,
    window_demand,
)
from scheduler.trace import TraceError

HEADER = "job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n"


def make_trace(path: Path, rows: list[tuple[int, str, int, int]]) -> str:
    """rows: (submit_s, vc, gpus, duration_s); ids in order."""
    lines = [HEADER] + [f"{i},{t},{vc},{g},{d},{d}\n" for i, (t, vc, g, d) in enumerate(rows)]
    path.write_text("".join(lines))
    return str(path)


def busy_trace(tmp_path: Path, n: int = 300, seed: int = 7) -> str:
    rng = random.Random(seed)
    rows, t = [], 0
    for _ in range(n):
        t += rng.randint(0, 900)
        g = rng.choice([1, 1, 1, 1, 2, 4, 8, 16])
        rows.append((t, rng.choice(["aa", "aa", "aa", "bb", "cc"]), g, rng.randint(60, 6 * 3600)))
    return make_trace(tmp_path / "t.csv", rows)


def small(trace: str, **kw: object) -> SimConfig:
    base = {"trace": trace, "hosts": 4, "gpus_per_host": 8, "grace_s": 30}
    base.update(kw)
    return SimConfig(**base)  # type: ignore[arg-type]


def strip_timing(report: dict) -> dict:
    for r in report["policies"]:
        for k in ("wall_s", "cpu_s", "sim_days_per_wall_minute"):
            r.pop(k)
    return report


def test_every_policy_runs_and_fairway_never_preempts_protected_work(tmp_path: Path) -> None:
    report = simulate(small(busy_trace(tmp_path)), ["fairway", "fifo", "slurm-fairshare", "kueue-drs", "kai-timeshare"])
    by = {r["policy"]: r for r in report["policies"]}
    fw = by["fairway"]
    assert fw["protected_work_violations"] == 0
    assert fw["jobs"]["submitted"] == 300
    for r in by.values():
        assert 0 < r["occupancy"] <= r["availability"] == 1.0
        assert r["occupancy_allocated"] + r["occupancy_unallocated"] == pytest.approx(r["occupancy"], abs=2e-4)
    assert by["fifo"]["preemptions"] == by["slurm-fairshare"]["preemptions"] == 0
    # the peers that preempt know nothing of minimum runtimes: they cut protected work short
    assert by["kueue-drs"]["protected_work_violations"] + by["kai-timeshare"]["protected_work_violations"] > 0


def test_deterministic_for_a_seed_and_faults_follow_the_seed(tmp_path: Path) -> None:
    trace = busy_trace(tmp_path, n=150)
    cfg = small(trace, fault_rate=0.5, repair_s=2 * 3600, seed=3)
    a = strip_timing(simulate(cfg, ["fairway", "kai-timeshare"]))
    b = strip_timing(simulate(cfg, ["fairway", "kai-timeshare"]))
    assert a == b
    fw = a["policies"][0]
    assert fw["availability"] < 1.0 and fw["fault_kills"] > 0
    c = strip_timing(simulate(small(trace, fault_rate=0.5, repair_s=2 * 3600, seed=4), ["fairway"]))
    assert c["policies"][0] != fw


def test_checkpoint_resume_keeps_work_restart_loses_it(tmp_path: Path) -> None:
    # a's long 8-GPU jobs fill the cluster; b arrives later and reclaims GPUs once protection (2 h) ends.
    rows = [(0, "aa", 8, 20 * 3600), (0, "aa", 8, 20 * 3600), (3 * 3600, "bb", 8, 3600), (3 * 3600, "bb", 8, 3600)]
    trace = make_trace(tmp_path / "t.csv", rows)
    resume = run_policy(prepare(small(trace, hosts=2, unallocated_rule="none", days=2)), "fairway")
    restart = run_policy(
        prepare(small(trace, hosts=2, unallocated_rule="none", days=2, checkpoint="restart")), "fairway"
    )
    assert resume["preemptions"] == restart["preemptions"] == 2
    assert resume["lost_gpu_hours"] == 0
    assert restart["lost_gpu_hours"] == pytest.approx(2 * 8 * 3, abs=0.5)  # 3 h of 8 GPUs (and the grace), twice
    assert (
        resume["jobs"]["finished"] > restart["jobs"]["finished"]
        or resume["jct_hours"]["mean"] < restart["jct_hours"]["mean"]
    )


def test_unplaceable_jobs_are_rejected_and_counted(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.csv", [(0, "aa", 12, 60), (10, "aa", 1, 60), (20, "aa", 64, 60)])
    r = run_policy(prepare(small(trace, days=1)), "fifo")
    assert r["jobs"]["rejected_unplaceable"] == 2  # 12 is no multiple of 8; 64 needs 8 hosts of 4
    assert r["jobs"]["finished"] == 1


def test_window_usage_matches_the_policy_pro_rata_usage() -> None:
    rng = random.Random(1)
    wu = WindowUsage(1000)
    recs = []
    now = 0
    for _ in range(300):
        now += rng.randint(0, 50)
        start = now - rng.randint(0, 2500)
        g = rng.randint(1, 8)
        b = rng.choice("xyz")
        wu.add(b, g, start, now)
        recs.append(UsageRecord(b, start, now, gpus=g))
        if rng.random() < 0.3:
            assert wu.at(now) == {k: v for k, v in windowed_usage(recs, [], now, 1000).items() if v}


def test_budget_file_errors_name_the_line() -> None:
    vcs = {"aa": 2, "bb": 3}
    ok = parse_plan(
        "org:\n  children:\n    g:\n      shares: 2\n      children:\n        vc-aa: {}\n    x:\n      vcs: [bb]\n", vcs
    )
    assert ok.leaf_of_vc == {"aa": "org/g/vc-aa", "bb": "org/x"}
    with pytest.raises(BudgetFileError, match=r"line 4: budget 'org/g': shares -1 must be >= 1"):
        parse_plan("org:\n  children:\n    g:\n      shares: -1\n      vcs: [aa, bb]\n", vcs)
    with pytest.raises(BudgetFileError, match=r"line 4: budget 'org/g': unknown key 'share'"):
        parse_plan("org:\n  children:\n    g:\n      share: 1\n", vcs)
    with pytest.raises(BudgetFileError, match=r"VC 'bb' of the trace \(first job on trace line 3\) has no budget"):
        parse_plan("org:\n  children:\n    vc-aa: {}\n", vcs)
    with pytest.raises(BudgetFileError, match=r"line 4: VC 'aa' belongs to"):
        parse_plan("org:\n  children:\n    vc-aa: {}\n    z: {vcs: [aa, bb]}\n", vcs)
    assert [b.key for b in default_plan(["bb", "aa"]).budgets] == ["org", "org/vc-aa", "org/vc-bb"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # safe_load's last value won: shares 5, the first line's 2 silently dropped
        (
            "org:\n  children:\n    g:\n      shares: 2\n      shares: 5\n      vcs: [aa, bb]\n",
            r"line 5: 'shares' is given twice \(also on line 4\)",
        ),
        # aliases: a few nested ones expand to millions of budgets when the tree is walked
        ("org:\n  children:\n    g: &g {vcs: [aa]}\n    h: *g\n", r"line 4: aliases \(\*name\) are not allowed"),
    ],
)
def test_a_budget_file_is_read_by_the_strict_reader(text: str, message: str) -> None:
    """left39: the budget file (``simulate --budgets``) was composed with plain ``SafeLoader``."""
    with pytest.raises(BudgetFileError, match=message):
        parse_plan(text, {"aa": 2, "bb": 3})


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("job_id,submit_time_s,vc,num_gpus\n0,0,aa,1\n", "line 1, column 'duration_s': missing column"),
        (HEADER + "0,0,aa,1,60,60\n1,5,aa,two,60,60\n", "line 3, column 'num_gpus': 'two' is not a number"),
    ],
)
def test_bad_trace_fails_with_its_line_and_writes_nothing(tmp_path: Path, content: str, message: str) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(content)
    out = tmp_path / "out"
    with pytest.raises(CommandError, match=message):
        call_command("simulate", "--trace", str(trace), "--out", str(out), "--no-progress")
    assert not out.exists()
    with pytest.raises(TraceError):
        prepare(SimConfig(trace=str(trace)))


def test_bad_budget_file_writes_nothing(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.csv", [(0, "aa", 1, 60)])
    budgets = tmp_path / "b.yaml"
    budgets.write_text("org:\n  children:\n    vc-aa:\n      shares: zero\n")
    out = tmp_path / "out"
    with pytest.raises(CommandError, match=r"b.yaml, line 4: budget 'org/vc-aa': shares 'zero' is not an integer"):
        call_command("simulate", "--trace", trace, "--budgets", str(budgets), "--out", str(out), "--no-progress")
    assert not out.exists()


def test_command_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "out"
    call_command(
        "simulate",
        "--trace",
        busy_trace(tmp_path, n=60),
        "--hosts",
        "2",
        "--policy",
        "fairway,fifo",
        "--out",
        str(out),
        "--no-progress",
    )
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "delivered_vs_owed.png",
        "demand_over_capacity.png",
        "evicted_beyond_need.png",
        "pyramid.png",
        "report.json",
        "report.md",
        "usage_vs_entitlement_fairway.png",
        "usage_vs_entitlement_fifo.png",
        "wait_cdf.png",
        "wait_cdf_by_class.png",
    ]
    assert (
        "| protected-work violations" in (out / "report.md").read_text()
        or "violations" in (out / "report.md").read_text()
    )


def test_skipping_passes_that_cannot_act_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An arrival with no idle GPU gets no pass under a policy that never preempts: same results."""
    from scheduler.sim import peers

    def strip(r: dict) -> dict:
        return {
            k: v for k, v in r.items() if k not in ("wall_s", "cpu_s", "sim_days_per_wall_minute", "ticks", "passes")
        }

    inputs = prepare(small(busy_trace(tmp_path, n=250), hosts=2))
    skipped = run_policy(inputs, "fifo")
    monkeypatch.setattr(peers.FifoPolicy, "preempts", True)
    every = run_policy(inputs, "fifo")
    assert skipped["ticks"] < every["ticks"]
    assert strip(skipped) == strip(every)


def _run(trace: str, policy: str, **kw: object) -> tuple[dict, list[dict[str, float]]]:
    """One policy's summary and its per-window demand (GPU-seconds per budget)."""
    inputs = prepare(small(trace, **kw))
    fn, charge_all = make_policy(policy)
    sim = TraceSim(inputs, fn, charge_all=charge_all)
    m = sim.run()
    return summarize(policy, inputs, sim, m), window_demand(m, T0, 7 * DAY, sim.days // 7)


H = 3600
E = 0.5 * 16 * 7 * 24 * H  # two equal budgets on 16 GPUs: 1,344 GPU-hours each per 7-day window


def test_a_burst_of_short_waiting_jobs_asks_for_its_work_only(tmp_path: Path) -> None:
    """aa submits 20 4-hour 8-GPU jobs at once on 16 GPUs: they wait up to ~40 h, but ask for 640 GPU-h."""
    rows = [(0, "bb", 8, H)] + [(0, "aa", 8, 4 * H)] * 20
    r, demand = _run(make_trace(tmp_path / "t.csv", rows), "fairway", hosts=2, unallocated_rule="none", days=7)
    assert r["jobs"]["finished"] == 21
    assert demand[0]["org/vc-aa"] == 20 * 8 * 4 * H  # at most each job's work, not GPUs × its wait
    assert demand[0]["org/vc-bb"] == 8 * H
    assert r["attainment"]["per_budget"] == {"org/vc-aa": [1.0], "org/vc-bb": [1.0]}
    assert r["attainment"]["saturated_pairs"] == 0  # 640 GPU-h < E: not saturated
    assert r["attainment"]["per_window_saturated_min"] == [None]


def test_a_starving_budget_keeps_its_whole_demand(tmp_path: Path) -> None:
    """Under fifo, aa's 10-day 16-GPU job holds the cluster; bb's two 10-day 8-GPU jobs wait until day 10."""
    rows = [(0, "aa", 16, 10 * DAY), (60, "bb", 8, 10 * DAY), (60, "bb", 8, 10 * DAY)]
    r, demand = _run(make_trace(tmp_path / "t.csv", rows), "fifo", hosts=2, unallocated_rule="none", days=14)
    att = r["attainment"]
    # window 0: bb asked for all 7 days (its remaining work is longer), got nothing
    assert demand[0]["org/vc-bb"] == 16 * (7 * DAY - 60)
    assert att["per_budget"]["org/vc-bb"][0] == 0.0
    assert att["saturated_min"] == 0.0 and att["per_window_saturated_min"][0] == 0.0
    # window 1: aa's running job needed 3 more days at its start (demand 16 GPUs × 3 days < E): served
    assert demand[1]["org/vc-aa"] == 16 * 3 * DAY < E
    assert att["per_budget"]["org/vc-aa"] == [1.0, 1.0]
    # bb still needed 10 days each at day 7 and was present all window: saturated, got 4 days × 16 GPUs
    assert demand[1]["org/vc-bb"] == 16 * 7 * DAY
    assert att["per_budget"]["org/vc-bb"][1] == 1.0  # 1,536 GPU-h delivered ≥ E
    assert att["saturated_pairs"] == 3


def test_demand_at_a_window_start_is_the_work_still_needed(tmp_path: Path) -> None:
    """Jobs crossing day 7 count at most their remaining work there: running (resume or restart) and pending."""
    # aa's 9-day job runs from 0; bb's 8-GPU job of 3 days waits behind aa's second 8-GPU job (8 days)
    rows = [(0, "aa", 8, 9 * DAY), (0, "aa", 8, 8 * DAY), (DAY, "bb", 8, 3 * DAY)]
    trace = make_trace(tmp_path / "t.csv", rows)
    for checkpoint in ("resume", "restart"):
        _, demand = _run(trace, "fifo", hosts=2, unallocated_rule="none", days=14, checkpoint=checkpoint)
        assert demand[1]["org/vc-aa"] == 8 * 2 * DAY + 8 * 1 * DAY  # 2 days and 1 day still to run
        # bb waited from day 1 to 8 (present 6 of window 0, all 3 days still needed at day 7)
        assert demand[0]["org/vc-bb"] == 8 * 3 * DAY
        assert demand[1]["org/vc-bb"] == 8 * 3 * DAY


@pytest.mark.parametrize("kw", [{}, {"fault_rate": 0.5, "repair_s": 2 * 3600, "grace_s": 0}])
def test_incremental_policy_decides_like_a_fresh_pass_on_every_pass(tmp_path: Path, kw: dict) -> None:
    """The simulator's IncrementalScheduler (state kept between passes, synced by difference) is
    checked against a fresh build at every pass, and its decisions against schedule()."""
    from scheduler.policy import IncrementalScheduler, schedule

    inc = IncrementalScheduler(check=True)
    passes = {"n": 0, "deciding": 0}

    def both(snap):  # type: ignore[no-untyped-def]
        fresh = schedule(snap)
        dec = inc(snap)
        assert dec == fresh
        passes["n"] += 1
        passes["deciding"] += dec.changed
        return dec

    inputs = prepare(small(busy_trace(tmp_path, n=250), **kw))
    TraceSim(inputs, both).run()
    assert passes["n"] > 200 and passes["deciding"] > 100
    # The whole queue is in view: every pass after the first takes the simulator's pending
    # changes (scheduler/policy/pending.py), checked against the snapshot's list by check=True.
    assert inc.followed == passes["n"] - 1
    # The attempts likewise (scheduler/policy/attempt_log.py), but a fault replaces a host: a
    # fresh build, then following again.
    if kw:
        assert 0 < inc.attempts_followed < passes["n"] - 1
    else:
        assert inc.attempts_followed == passes["n"] - 1


def test_screen_summary_kept_by_host_version_reads_only_changed_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle screen's host summary is kept between passes per host version
    (scheduler/policy/screen_summary.py, ``KeptSummary``): check=True compares it with a fresh walk on
    every pass (the decisions are schedule()'s: the tests above), and most hosts' parts are not
    read again."""
    import scheduler.policy.incremental as incremental
    import scheduler.policy.screen_summary as screen
    from scheduler.policy import IncrementalScheduler

    read = {"parts": 0, "screens": 0, "fresh": 0}
    part, kept, fresh = screen.host_part, screen.KeptSummary.of, screen.summary_of

    def counted_part(standing, hv):  # type: ignore[no-untyped-def]
        read["parts"] += 1
        return part(standing, hv)

    def counted_of(self, standing):  # type: ignore[no-untyped-def]
        read["screens"] += 1
        return kept(self, standing)

    def counted_fresh(standing):  # type: ignore[no-untyped-def]
        read["fresh"] += 1
        return fresh(standing)

    monkeypatch.setattr(screen, "host_part", counted_part)
    monkeypatch.setattr(incremental, "summary_of", counted_fresh)
    monkeypatch.setattr(screen.KeptSummary, "of", counted_of)
    inc = IncrementalScheduler(check=True)
    TraceSim(prepare(small(busy_trace(tmp_path, n=250), hosts=8)), inc).run()
    kept_parts = read["parts"] - read["fresh"] * 8  # less check=True's fresh walks of the 8 hosts
    assert read["fresh"] > 200
    assert kept_parts < read["screens"] * 8 // 4, read


def test_pending_changes_with_snapshots_skipped_or_a_second_policy(tmp_path: Path) -> None:
    """A policy that misses some of the simulator's snapshots (another reader took them) or
    sees another producer's compares the whole list for those and decides as schedule()."""
    from scheduler.policy import IncrementalScheduler, schedule

    inc = IncrementalScheduler(check=True)
    calls = {"n": 0}

    def policy(snap):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] % 7 == 0:
            sim.snapshot()  # a snapshot the policy never sees: its changes are lost to it
        dec = inc(snap)
        assert dec == schedule(snap)
        return dec

    inputs = prepare(small(busy_trace(tmp_path, n=120)))
    sim = TraceSim(inputs, policy)
    sim.run()
    assert calls["n"] > 100
    assert 0 < inc.followed < calls["n"] - calls["n"] // 7
    assert 0 < inc.attempts_followed < calls["n"] - calls["n"] // 7  # the attempts' changes likewise


def test_skipped_runs_read_from_the_kept_index_decide_as_the_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simulator's passes read their skipped runs from the kept skip index
    (scheduler/policy/skip_index.py; blocks of two workloads, so runs pass many of them), checked
    against a fresh cut on every pass, and decide as schedule() (the walk, no index)."""
    import scheduler.policy.skip_index as skip_index
    from scheduler.policy import IncrementalScheduler, schedule

    monkeypatch.setattr(skip_index, "BLOCK", 2)
    read = {"runs": 0}
    first_stop = skip_index.SkipIndex.first_stop

    def counted(self, start, threshold):  # type: ignore[no-untyped-def]
        read["runs"] += 1
        return first_stop(self, start, threshold)

    monkeypatch.setattr(skip_index.SkipIndex, "first_stop", counted)
    inc = IncrementalScheduler(check=True)

    def both(snap):  # type: ignore[no-untyped-def]
        dec = inc(snap)
        assert dec == schedule(snap)
        return dec

    TraceSim(prepare(small(busy_trace(tmp_path, n=500, seed=3), hosts=3)), both).run()
    assert read["runs"] > 100


@pytest.mark.parametrize("kw", [{}, {"depth": 2, "grace_s": 0}, {"fault_rate": 0.5, "repair_s": 2 * 3600}])
def test_the_kept_queue_view_and_usage_are_those_built_afresh_on_every_pass(tmp_path: Path, kw: dict) -> None:
    """TraceSim keeps the queue view and the usage lumps while the queues, the instant and the
    closed usage are unchanged; on every pass they equal :meth:`TraceSim.plain_snapshot`'s, and a
    second policy fed the plain snapshots (no changes handed: it compares) decides the same."""
    from scheduler.policy import IncrementalScheduler

    kept_policy, plain_policy = IncrementalScheduler(), IncrementalScheduler()
    seen = {"n": 0, "kept": 0}
    sims: list[TraceSim] = []
    last: list[object] = [None]

    def both(snap):  # type: ignore[no-untyped-def]
        plain = sims[0].plain_snapshot()
        assert list(snap.pending) == list(plain.pending) and snap.pending.queues == plain.pending.queues
        assert snap.usage == plain.usage and list(snap.attempts) == list(plain.attempts)
        seen["kept"] += snap.pending.queues is last[0]  # the same view as the last pass's
        last[0] = snap.pending.queues
        dec = kept_policy(snap)
        assert dec == plain_policy(plain)
        seen["n"] += 1
        return dec

    sims.append(TraceSim(prepare(small(busy_trace(tmp_path, n=250), **kw)), both))
    sims[0].run()
    assert seen["n"] > 200 and seen["kept"] > 20


def _rows(sim: TraceSim) -> list[tuple[str, int | None, int | None]]:
    return sorted((w.id, w.first_start, w.finished_at) for w in sim.workloads.values())


@pytest.mark.parametrize("kw", [{}, {"depth": 2, "grace_s": 0}])
def test_snapshots_held_across_passes_keep_the_pending_workloads_they_were_given(tmp_path: Path, kw: dict) -> None:
    """A snapshot's pending list is made on its first read from the queues' lists it holds; a
    queue is copied before it changes while a view holding it lives (else changed in place). Every
    snapshot held to the end, first read then, lists what the plain snapshot of its pass listed,
    and holding them (copies) decides what not holding them (in place) does."""
    from scheduler.policy import IncrementalScheduler

    inputs = prepare(small(busy_trace(tmp_path, n=250), **kw))
    held: list[tuple[object, list, dict]] = []
    sims: list[TraceSim] = []
    inner = IncrementalScheduler()

    def holding(snap):  # type: ignore[no-untyped-def]
        plain = sims[0].plain_snapshot()
        held.append((snap, list(plain.pending), {k: list(q) for k, q in plain.pending.queues.items()}))
        return inner(snap)

    sims.append(TraceSim(inputs, holding))
    sims[0].run()
    assert len(held) > 200
    # the policy reads the first pass's list (its index starts), then follows the changes (no
    # changes are handed with --depth: it reads every list)
    unread = sum(snap.pending._items is None for snap, _, _ in held)  # type: ignore[attr-defined]
    assert unread == (0 if kw else len(held) - 1)
    for snap, items, queues in held:
        assert {k: list(q) for k, q in snap.pending.queues.items()} == queues  # type: ignore[attr-defined]
        assert list(snap.pending) == items  # type: ignore[attr-defined]
    free = TraceSim(inputs, IncrementalScheduler())
    free.run()
    assert _rows(free) == _rows(sims[0]) and free.m.passes == sims[0].m.passes
    assert sims[0].queue_copies > 100 and free.queue_copies == 0  # no view outlived its pass: in place


def test_a_run_pickled_midway_and_continued_is_the_run(tmp_path: Path) -> None:
    """bench/philly_state.py's pickle of a run stopped midway (kept views dropped) continues as
    the run does in place, also while a snapshot of it is held."""
    import io
    import pickle

    from bench.philly_state import _Pickler

    inputs = prepare(small(busy_trace(tmp_path, n=300)))
    whole, _ = make_policy("fairway")
    ref = TraceSim(inputs, whole)
    ref.run()
    policy, _ = make_policy("fairway")
    sim = TraceSim(inputs, policy)
    sim.advance(T0 + DAY // 2)
    held = sim.snapshot()
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(sim)
    loaded = pickle.loads(buf.getvalue())  # noqa: S301 (written just above)
    index = loaded.policy._pending
    index.by_obj = {id(w): w for w in index.by_obj.values()}
    assert loaded._kept_view is None and not loaded._lent
    for s in (sim, loaded):
        s.run()
        assert _rows(s) == _rows(ref) and s.m.passes == ref.m.passes
    assert held.pending is not None


def test_passes_counted_by_cause_are_the_run(tmp_path: Path) -> None:
    """bench/philly_state.py's ``by_cause`` only counts: the run is the plain one, every pass is
    counted once, and a pass the screen answered decided nothing."""
    from bench.philly_state import by_cause

    inputs = prepare(small(busy_trace(tmp_path, n=300)))
    ref_policy, _ = make_policy("fairway")
    ref = TraceSim(inputs, ref_policy)
    ref.advance(T0 + DAY)
    policy, _ = make_policy("fairway")
    sim = TraceSim(inputs, policy)
    rows = by_cause(sim, T0 + DAY)
    assert _rows(sim) == _rows(ref) and sim.m.passes == ref.m.passes
    assert sum(int(n) for n, _ in rows.values()) == sim.m.passes
    assert not any(kind == "screened" and decided == "decided" for _, kind, decided in rows)
    assert {"full"} <= {kind for _, kind, _ in rows} and "_pass" not in sim.__dict__
    sim.advance(T0 + 2 * DAY)  # the wrappers are gone: it goes on as the plain run
    ref.advance(T0 + 2 * DAY)
    assert _rows(sim) == _rows(ref) and sim.m.passes == ref.m.passes
