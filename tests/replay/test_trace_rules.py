"""The replay rules (scheduler/trace.py): minimum runtime, unallocated jobs, time compression.

They are deterministic (same input, same answer, in any order and process) and the defaults are the
ones docs/demo.md states.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.trace import (
    DEFAULT_MIN_RUNTIME_RULE,
    DEFAULT_UNALLOCATED_RULE,
    MinRuntimeRule,
    TraceJob,
    UnallocatedRule,
    job_hash_fraction,
    parse_duration,
    plan_job,
    plan_replay,
)

REPO = Path(__file__).resolve().parents[2]
H = 3600


def job(job_id: int = 1, *, vc: str = "abc", duration: int = 600, gpus: int = 1, submit: int = 0) -> TraceJob:
    return TraceJob(job_id, submit, vc, gpus, duration, duration)


# --- durations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0),
        ("90", 90),
        ("90s", 90),
        ("30m", 1800),
        ("2h", 7200),
        ("1d", 86400),
        ("6d12h", 561600),
        ("1w", 604800),
        ("2W", 1209600),
        ("1w2d3h", 788400),
    ],
)
def test_parse_duration(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "w", "2x", "-5", "1.5h", "2h1d", "1d2w", "1.5w", "1w1w", "1week"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


# --- minimum runtime ----------------------------------------------------------------------


def test_default_min_runtime_rule_is_run_time_capped_at_two_hours() -> None:
    rule = MinRuntimeRule.parse(DEFAULT_MIN_RUNTIME_RULE)

    assert DEFAULT_MIN_RUNTIME_RULE == "duration,cap:2h"
    assert rule.min_runtime_s(600) == 600
    assert rule.min_runtime_s(2 * H) == 2 * H
    assert rule.min_runtime_s(3 * 24 * H) == 2 * H
    assert rule.describe() == "M = run time, at most 2h"


def test_fraction_rule_with_floor_and_cap() -> None:
    rule = MinRuntimeRule.parse("fraction:0.5,floor:10m,cap:2h")

    assert rule.min_runtime_s(300) == 300  # shorter than the floor: protected for all of it
    assert rule.min_runtime_s(900) == 600  # half is 450 s, the floor lifts it to 10 min
    assert rule.min_runtime_s(2 * H) == H
    assert rule.min_runtime_s(10 * H) == 2 * H
    assert rule.describe() == "M = 0.5 × run time, at least min(run time, 10m), at most 2h"


def test_fixed_rule_ignores_the_run_time() -> None:
    rule = MinRuntimeRule.parse("fixed:30m")

    assert rule.min_runtime_s(60) == rule.min_runtime_s(10 * H) == 1800


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "unknown term"),
        ("cap:2h", "needs one of"),
        ("duration,fixed:1h", "only one of"),
        ("fraction:0", "fraction must be in"),
        ("fraction:x", "is not a number"),
        ("fixed:0", "at least 1s"),
        ("duration,cap:soon", "is not a duration"),
        ("fraction:0.5,floor:3h,cap:1h", "floor is above cap"),
        ("percent:5", "unknown term"),
    ],
)
def test_bad_min_runtime_rules_are_refused(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MinRuntimeRule.parse(spec)


# --- unallocated --------------------------------------------------------------------------


def test_default_unallocated_rule_takes_the_unknown_vc_and_a_tenth_of_the_rest() -> None:
    rule = UnallocatedRule.parse(DEFAULT_UNALLOCATED_RULE)
    others = [job(i) for i in range(20_000)]

    share = sum(rule.is_unallocated(j) for j in others) / len(others)

    assert DEFAULT_UNALLOCATED_RULE == "vc:unknown,fraction:0.1"
    assert all(rule.is_unallocated(job(i, vc="unknown")) for i in range(100))
    assert 0.09 < share < 0.11
    assert rule.describe() == "every job of VC unknown and 10% of the others (by a hash of the job id)"


def test_unallocated_choice_depends_only_on_the_job_id() -> None:
    rule = UnallocatedRule.parse("fraction:0.3")
    ids = list(range(500))

    forward = [rule.is_unallocated(job(i, duration=60)) for i in ids]
    backward = [rule.is_unallocated(job(i, duration=9999, gpus=8, vc="zzz")) for i in reversed(ids)]

    assert forward == list(reversed(backward))


def test_unallocated_choice_is_pinned() -> None:
    """A change of the hash would silently change every replay (and the demo's figures)."""
    tenth = UnallocatedRule.parse("fraction:0.1")

    assert [i for i in range(100) if tenth.is_unallocated(job(i))] == [6, 29, 36, 37, 46, 48, 64, 69, 71, 74, 83, 98]
    assert round(job_hash_fraction(34805), 9) == 0.592268739


def test_unallocated_choice_is_the_same_in_another_process() -> None:
    code = "from scheduler.trace import job_hash_fraction as h; print([round(h(i), 9) for i in range(50)])"

    out = subprocess.run(  # noqa: S603 - fixed argv, our own interpreter
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": "7"}
    ).stdout.strip()

    assert out == str([round(job_hash_fraction(i), 9) for i in range(50)])


def test_none_and_all() -> None:
    assert not any(UnallocatedRule.parse("none").is_unallocated(job(i, vc="unknown")) for i in range(100))
    assert all(UnallocatedRule.parse("all").is_unallocated(job(i)) for i in range(100))


@pytest.mark.parametrize("spec", ["fraction:1.5", "fraction:x", "team:a", "vc:"])
def test_bad_unallocated_rules_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="unallocated rule"):
        UnallocatedRule.parse(spec)


# --- compression --------------------------------------------------------------------------

DEFAULT_RULES = {
    "min_runtime_rule": MinRuntimeRule.parse(DEFAULT_MIN_RUNTIME_RULE),
    "unallocated_rule": UnallocatedRule.parse("none"),
}


def test_plan_compresses_submission_run_time_and_min_runtime() -> None:
    planned = plan_job(job(duration=3 * H, submit=6000), t0_s=0, time_scale=300, max_duration_s=H, **DEFAULT_RULES)

    assert planned.offset_s == 20.0
    assert planned.trace_run_s == H  # capped before compression
    assert planned.run_s == 12.0
    assert planned.trace_min_runtime_s == H  # the rule sees the replayed run time
    assert planned.min_runtime_s == 12
    assert planned.allocated


def test_plan_keeps_at_least_one_second_of_run_and_of_protection() -> None:
    planned = plan_job(job(duration=0), t0_s=0, time_scale=300, max_duration_s=None, **DEFAULT_RULES)

    assert planned.run_s == 1.0
    assert planned.min_runtime_s == 1


def test_plan_rounds_min_runtime_up_to_whole_seconds() -> None:
    planned = plan_job(job(duration=700), t0_s=0, time_scale=300, max_duration_s=None, **DEFAULT_RULES)

    assert planned.run_s == pytest.approx(700 / 300)
    assert planned.min_runtime_s == 3


def test_protection_allowance_is_added_to_allocated_jobs_only() -> None:
    rules = {**DEFAULT_RULES, "unallocated_rule": UnallocatedRule.parse("vc:unknown")}

    allocated = plan_job(
        job(duration=H), t0_s=0, time_scale=300, max_duration_s=None, protection_allowance_s=1, **rules
    )
    free = plan_job(
        job(vc="unknown", duration=H), t0_s=0, time_scale=300, max_duration_s=None, protection_allowance_s=1, **rules
    )

    assert (allocated.run_s, allocated.min_runtime_s) == (12.0, 13)
    assert free.min_runtime_s == 0
    with pytest.raises(ValueError, match="protection_allowance_s"):
        plan_job(job(), t0_s=0, time_scale=300, max_duration_s=None, protection_allowance_s=-1, **rules)


def test_unallocated_jobs_get_no_minimum_runtime() -> None:
    rules = {**DEFAULT_RULES, "unallocated_rule": UnallocatedRule.parse("vc:unknown")}

    planned = plan_job(job(vc="unknown"), t0_s=0, time_scale=300, max_duration_s=None, **rules)

    assert planned.min_runtime_s == 0 and not planned.allocated


def test_plan_replay_is_relative_to_the_first_job() -> None:
    jobs = [job(1, submit=1000), job(2, submit=1600), job(3, submit=1600)]

    plan = plan_replay(jobs, time_scale=60, max_duration_s=None, **DEFAULT_RULES)

    assert [p.offset_s for p in plan] == [0.0, 10.0, 10.0]
    assert [p.job.job_id for p in plan] == [1, 2, 3]
