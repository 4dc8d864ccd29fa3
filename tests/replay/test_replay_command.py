"""``manage.py replay_trace``: submits trace jobs in order through the submission service; summary figures.

Given the demo seed (budget tree with one project ``vc-<vc>`` per Philly VC, the ``researcher``
login, one host of 8 H100), when jobs of the shipped trace are replayed with ``--no-wait``, then
one workload per job exists, in trace order, with the rule's budget and minimum runtime.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from scheduler.management.commands.replay_trace import format_summary, percentile, summarize
from scheduler.models import Attempt, AttemptGPU, Host, Workload
from scheduler.trace import (
    DEFAULT_MIN_RUNTIME_RULE,
    DEFAULT_UNALLOCATED_RULE,
    MinRuntimeRule,
    UnallocatedRule,
    plan_replay,
    read_trace,
    select_jobs,
)

REPO = Path(__file__).resolve().parents[2]
PHILLY = REPO / "data" / "philly" / "philly_jobs.csv"
START, LIMIT, SCALE = 34805, 40, 300

pytestmark = pytest.mark.django_db


@pytest.fixture
def seeded() -> None:
    call_command("seed_demo", "--hosts", "1", "--gpus", "8", stdout=StringIO())


def replay(*extra: str) -> str:
    out = StringIO()
    call_command(
        "replay_trace",
        str(PHILLY),
        *extra,
        "--no-wait",
        "--no-progress",
        "--time-scale",
        "1e9",  # every submission is due at once; the compression of runs is tested separately
        stdout=out,
        stderr=StringIO(),
    )
    return out.getvalue()


def test_no_wait_replay_submits_each_job_in_trace_order_with_its_budget_and_min_runtime(seeded: None) -> None:
    out = replay("--start", str(START), "--limit", str(LIMIT), "--max-duration", "1h")

    jobs = select_jobs(read_trace(PHILLY), start_job_id=START, limit=LIMIT)
    plan = plan_replay(
        jobs,
        time_scale=1e9,
        max_duration_s=3600,
        min_runtime_rule=MinRuntimeRule.parse(DEFAULT_MIN_RUNTIME_RULE),
        unallocated_rule=UnallocatedRule.parse(DEFAULT_UNALLOCATED_RULE),
        protection_allowance_s=1,  # replay_trace's default
    )
    workloads = list(Workload.objects.select_related("budget", "owner", "cluster").order_by("seq"))
    assert f"Submitted {LIMIT} of {LIMIT} jobs" in out
    assert [w.name for w in workloads] == [f"philly-{j.job_id}" for j in jobs]
    assert [w.budget.name for w in workloads] == [f"vc-{j.vc}" for j in jobs]
    assert [w.gpu_count for w in workloads] == [j.num_gpus for j in jobs]
    assert [w.min_runtime_s for w in workloads] == [p.min_runtime_s for p in plan]
    assert {w.owner.username for w in workloads} == {"researcher"}
    assert {(w.cluster.name, w.gpu_model, w.state) for w in workloads} == {("philly", "H100", "pending")}
    submitted = [w.submitted_at for w in workloads]
    assert submitted == sorted(submitted)
    # Unallocated jobs are the rule's (0 s); allocated ones declare at least 1 s.
    assert [w.min_runtime_s == 0 for w in workloads] == [not p.allocated for p in plan]
    assert any(w.min_runtime_s == 0 for w in workloads) and any(w.min_runtime_s > 0 for w in workloads)
    first = workloads[0]
    assert first.command == [sys.executable, "-m", "agent.standin", "--duration", "1.00"]
    assert first.env["TRACE_JOB_ID"]["value"] == str(START)


def test_rules_and_scale_reach_the_workloads(seeded: None) -> None:
    replay(
        "--start",
        str(START),
        "--limit",
        "5",
        "--min-runtime-rule",
        "fixed:30m",
        "--unallocated-rule",
        "none",
        "--protection-allowance",
        "0",
    )

    # fixed 30 min at a scale of 1e9 is a fraction of a second: an allocated job keeps at least 1 s.
    assert list(Workload.objects.order_by("seq").values_list("min_runtime_s", flat=True)) == [1] * 5


def test_wall_time_slack_gives_each_job_a_limit_of_its_run_time_plus_the_slack(seeded: None) -> None:
    replay("--start", str(START), "--limit", "5", "--wall-time-slack", "20")
    rows = list(Workload.objects.order_by("seq").values_list("min_runtime_s", "duration_hint_s", "max_runtime_s"))
    # At a scale of 1e9 every run is the 1 s floor: max(M, run time) + 20.
    assert rows and all(limit == max(m, run) + 20 for m, run, limit in rows)
    Workload.objects.all().delete()
    replay("--start", str(START), "--limit", "5")
    assert set(Workload.objects.values_list("max_runtime_s", flat=True)) == {None}


def test_bad_trace_submits_nothing_and_names_the_line(seeded: None, tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n1,0,6214e9,1,60,60\n2,5,6214e9,x,60,60\n"
    )

    with pytest.raises(CommandError, match=r"nothing submitted: .*bad\.csv, line 3, column 'num_gpus': 'x' is not"):
        call_command("replay_trace", str(bad), "--no-wait", "--no-progress", stdout=StringIO())

    assert not Workload.objects.exists()


def test_missing_budget_submits_nothing(seeded: None, tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n1,0,6214e9,1,60,60\n2,5,nope,1,60,60\n"
    )

    with pytest.raises(CommandError, match="vc-nope"):
        call_command("replay_trace", str(trace), "--no-wait", "--no-progress", stdout=StringIO())

    assert not Workload.objects.exists()


def test_summary_counts_waits_preemptions_and_gpu_hours(seeded: None) -> None:
    replay("--start", str(START), "--limit", "3", "--unallocated-rule", "none")
    w1, w2, w3 = Workload.objects.order_by("seq")
    host = Host.objects.get()
    gpus = list(host.gpus.order_by("index"))
    t = timezone.now()
    Workload.objects.update(submitted_at=t)

    def attempt(
        w: Workload, number: int, gpu_idx: list[int], start_s: int, end_s: int | None, reason: str, *, alloc: bool
    ):
        a = Attempt.objects.create(
            workload=w,
            number=number,
            host=host,
            allocated=alloc,
            placed_at=t + timedelta(seconds=start_s),
            started_at=t + timedelta(seconds=start_s),
            ended_at=None if end_s is None else t + timedelta(seconds=end_s),
            end_reason=reason,
        )
        for i in gpu_idx:
            AttemptGPU.objects.create(attempt=a, gpu=gpus[i], open=end_s is None)

    # w1: waits 10 s, runs 100 s on 2 GPUs allocated.
    attempt(w1, 1, [0, 1], 10, 110, "succeeded", alloc=True)
    # w2: waits 20 s, preempted after 30 s unallocated on 1 GPU, restarts, runs 60 s more.
    attempt(w2, 1, [2], 20, 50, "preempted", alloc=False)
    attempt(w2, 2, [2], 70, 130, "succeeded", alloc=False)
    # w3: never started.
    Workload.objects.filter(pk__in=[w1.pk, w2.pk]).update(state=Workload.State.SUCCEEDED)

    s = summarize([w1.pk, w2.pk, w3.pk], time_scale=SCALE)

    assert s.submitted == 3
    assert s.states == {"succeeded": 2, "pending": 1}
    assert (s.preemptions, s.preempted_workloads, s.preemptions_allocated) == (1, 1, 0)
    assert sorted(s.waits_s) == [10.0, 20.0]
    assert s.mean_wait_s == 15.0
    assert s.p90_wait_s == 20.0
    assert sum(h.allocated_s for h in s.gpu_seconds.values()) == 200.0  # 2 GPUs × 100 s
    assert sum(h.unallocated_s for h in s.gpu_seconds.values()) == 90.0  # 1 GPU × (30 + 60) s
    assert s.gpu_seconds[w1.budget.name].allocated_s == 200.0
    text = format_summary(s, elapsed_s=42, time_scale=SCALE)
    assert "preempted           1 preemptions of 1 workloads (1 of unallocated attempts, 0 of allocated)" in text
    assert "15.0 s real =    75.0 min of trace" in text  # 15 s × 300 = 75 trace minutes


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.9) is None
    assert percentile([5.0], 0.9) == 5.0
    assert percentile([float(i) for i in range(1, 11)], 0.9) == 9.0
    assert percentile([float(i) for i in range(1, 101)], 0.9) == 90.0


def test_a_replay_is_not_held_to_the_per_user_limit_unless_it_names_one(seeded: None, settings) -> None:
    """A replay submits a whole lab's jobs as one user: ``FAIRWAY_MAX_SUBMITTED_PER_USER`` (a per-user
    limit, lim42) would refuse the 11th of a trace replayed past a limit of 10; ``--submit-limit``
    keeps one for the replay."""
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": 10}

    out = replay("--start", str(START), "--limit", "12", "--max-duration", "1h")
    assert "Submitted 12 of 12 jobs" in out
    assert Workload.objects.filter(owner__username="researcher").count() == 12

    Workload.objects.all().delete()
    with pytest.raises(CommandError, match="7 of 12 jobs were rejected at submission"):
        replay("--start", str(START), "--limit", "12", "--max-duration", "1h", "--submit-limit", "5")
    assert Workload.objects.filter(owner__username="researcher").count() == 5
