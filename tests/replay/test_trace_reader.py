"""The strict trace reader (scheduler/trace.py): the shipped file reads, bad files fail with their line."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from scheduler.trace import COLUMNS, TraceError, TraceJob, parse_trace, read_trace, select_jobs, stretch_facts

REPO = Path(__file__).resolve().parents[2]
PHILLY = REPO / "data" / "philly" / "philly_jobs.csv"
PHILLY_SHA256 = "df85cd1e0c5c7b082d440d8bbf9904542f58593ee78e9b0816319a88e692c0c3"
HEADER = ",".join(COLUMNS)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    return path


def test_shipped_trace_matches_its_published_digest() -> None:
    assert hashlib.sha256(PHILLY.read_bytes()).hexdigest() == PHILLY_SHA256


def test_shipped_trace_header_is_accepted_and_every_job_reads() -> None:
    first_line = PHILLY.read_text().splitlines()[0]
    assert first_line == HEADER

    jobs = read_trace(PHILLY)

    assert len(jobs) == 111_549
    assert jobs[0] == TraceJob(0, 0, "6214e9", 1, 3613033, 3613015, line=2)
    assert sum(1 for j in jobs if j.vc == "unknown") == 2136
    assert all(j.duration_pcs_s is None for j in jobs if j.vc == "unknown")


def test_demo_stretch_is_the_first_500_jobs_of_day_60() -> None:
    stretch = select_jobs(read_trace(PHILLY), start_day=60, limit=500)

    facts = stretch_facts(stretch)

    assert (facts.first_job_id, facts.last_job_id, facts.jobs) == (34805, 35304, 500)
    assert facts.span_s == 47181  # 13.1 hours
    assert round(facts.median_duration_s / 60) == 34
    assert facts.max_gpus == 8
    assert len(facts.multi_day_jobs) == 18


def test_valid_small_trace_reads_with_empty_pcs_and_extra_column(tmp_path: Path) -> None:
    path = write(tmp_path, f"{HEADER},note\n7,0,unknown,2,60,,x\n9,5,abc,1,0,0,y\n\n")

    jobs = read_trace(path)

    assert jobs == [TraceJob(7, 0, "unknown", 2, 60, None, line=2), TraceJob(9, 5, "abc", 1, 0, 0, line=3)]


@pytest.mark.parametrize(
    ("text", "line", "column", "problem"),
    [
        # A missing column is reported on the header line.
        ("job_id,submit_time_s,vc,duration_s,duration_pcs_s\n1,0,a,5,5\n", 1, "num_gpus", "missing column"),
        (f"{HEADER}\n1,0,a,1,60,60\n2,10,a,two,60,60\n", 3, "num_gpus", "'two' is not a number"),
        (f"{HEADER}\n1,0,a,1,60,60\n2,10,a,1,60,60\n3,20,a,1,-5,60\n", 4, "duration_s", "-5 is negative"),
        (f"{HEADER}\n1,-1,a,1,60,60\n", 2, "submit_time_s", "-1 is negative"),
        (f"{HEADER}\n1,0,a,1,1.5,60\n", 2, "duration_s", "'1.5' is not a whole number"),
        (f"{HEADER}\n1,0,a,1,60,abc\n", 2, "duration_pcs_s", "'abc' is not a number"),
        (f"{HEADER}\n1,0,a,0,60,60\n", 2, "num_gpus", "below the minimum of 1"),
        (f"{HEADER}\n1,0,,1,60,60\n", 2, "vc", "empty value"),
        (f"{HEADER}\nx,0,a,1,60,60\n", 2, "job_id", "'x' is not a number"),
        (f"{HEADER}\n1,0,a,1,60,60\n1,5,a,1,60,60\n", 3, "job_id", "ids must increase"),
        (f"{HEADER}\n1,9,a,1,60,60\n2,5,a,1,60,60\n", 3, "submit_time_s", "submission order"),
        (f"{HEADER}\n1,0,a,1,60\n", 2, None, "expected 6 fields, found 5"),
    ],
)
def test_bad_trace_names_file_line_column_and_problem(
    tmp_path: Path, text: str, line: int, column: str | None, problem: str
) -> None:
    path = write(tmp_path, text)

    with pytest.raises(TraceError) as caught:
        read_trace(path)

    err = caught.value
    assert (err.line, err.column) == (line, column)
    assert problem in err.problem
    message = str(err)
    assert str(path) in message and f"line {line}" in message and problem in message
    if column is not None:
        assert repr(column) in message


def test_empty_and_missing_files_are_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="empty"):
        read_trace(write(tmp_path, ""))
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(tmp_path / "nope.csv")


def test_parse_trace_takes_lines_and_a_name() -> None:
    with pytest.raises(TraceError, match=r"^mem, line 2, column 'vc': empty value"):
        parse_trace([HEADER, "1,0,,1,1,1"], name="mem")


def test_select_jobs_by_id_day_and_limit() -> None:
    jobs = [TraceJob(i, i * 40_000, "a", 1, 60, 60) for i in range(10)]

    assert [j.job_id for j in select_jobs(jobs, start_job_id=3, limit=2)] == [3, 4]
    assert [j.job_id for j in select_jobs(jobs, start_day=1)] == [3, 4, 5, 6, 7, 8, 9]  # 3 × 40,000 ≥ 86,400
    assert [j.job_id for j in select_jobs(jobs, limit=1)] == [0]
    with pytest.raises(ValueError, match="job 42 is not in the trace"):
        select_jobs(jobs, start_job_id=42)
    with pytest.raises(ValueError, match="no job is submitted on or after day 9"):
        select_jobs(jobs, start_day=9)


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("1,0,a,1_0,60,60", "num_gpus"),  # read as 10 GPUs
        ("1,0,a,1,6_0.0,60", "duration_s"),  # float() takes underscores too
        ("1,0,a,\u0661\u0662,60,60", "num_gpus"),  # Arabic-Indic digits: 12 GPUs
        ("1,\uff15,a,1,60,60", "submit_time_s"),  # a fullwidth 5
        ("1,0,a,1,60,\u00b2", "duration_pcs_s"),
    ],
)
def test_a_trace_number_is_ascii_digits_only(tmp_path: Path, row: str, column: str) -> None:
    """brk35: ``int()`` read ``1_0`` as 10 and Arabic-Indic or fullwidth digits as numbers, so a
    trace's typo or pasted text replayed jobs of another size; a number is ASCII digits (the API's
    rule, ``scheduler.api.serializers._PLAIN_INT``), refused naming its column otherwise."""
    with pytest.raises(TraceError) as caught:
        read_trace(write(tmp_path, f"{HEADER}\n{row}\n"))
    assert (caught.value.line, caught.value.column) == (2, column)
    assert "not a number" in caught.value.problem


@pytest.mark.parametrize("vc", ["a\x00b", '"a\nb"', "a\x1b[2Jb", "a\u202eb", "a\u200bb"])
def test_a_trace_vc_holding_control_or_invisible_characters_is_refused(tmp_path: Path, vc: str) -> None:
    """brk35: a VC is a budget's name in every report (``vc-<vc>``): a line break, an escape
    sequence or an invisible character in it was taken, and broke the report's tables or named a
    budget that prints like another."""
    with pytest.raises(TraceError) as caught:
        read_trace(write(tmp_path, f"{HEADER}\n1,0,{vc},1,60,60\n"))
    assert caught.value.column == "vc" and "character" in caught.value.problem


@pytest.mark.parametrize("text", ["\u0661\u0662", "\uff11h", "\u0661d"])
def test_a_duration_is_ascii_digits_only(text: str) -> None:
    """brk35: ``parse_duration`` (``since=``, ``--grace``, join token lifetimes) read
    Arabic-Indic and fullwidth digits, which the API's submission durations refuse."""
    from scheduler.trace import parse_duration

    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_a_duration_of_too_many_digits_says_it_is_no_duration() -> None:
    from scheduler.trace import parse_duration

    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration("9" * 5000)
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration("\u00b2")
