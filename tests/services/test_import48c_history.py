"""import48c: a ``sacct --duplicates`` export lists a requeued job once per run (same JobID, each
run its own Start/End/State); each run is a usage interval of its own, the same record twice is
still refused, and an export overlapping an earlier one counts each run once."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError
from django.utils import timezone

from budgets.models import UsageEntry
from tests.sacct_files import import_sacct as _sacct
from tests.sacct_files import stamp as _stamp


def _intervals() -> list[tuple[datetime, datetime, int, str]]:
    return list(UsageEntry.objects.order_by("start", "note").values_list("start", "end", "gpus", "note"))


def _at(hours_ago: float) -> datetime:
    return (timezone.now() - timedelta(hours=hours_ago)).replace(microsecond=0)


def test_each_run_of_a_requeued_job_is_its_own_interval(cluster, researcher, org_tree, tmp_path: Path):
    """--duplicates: the preempted and node-failed runs held GPUs too (they were "appears twice")."""
    t = [_at(h) for h in (10, 9, 8, 7, 6, 4)]
    out = _sacct(
        tmp_path,
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[0])}|{_stamp(t[1])}|PREEMPTED",
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[2])}|{_stamp(t[3])}|NODE_FAIL",
        f"5|researcher|olmo|gres/gpu=4|{_stamp(t[4])}|{_stamp(t[5])}|COMPLETED",
    )
    assert "imported 1 Slurm jobs in 3 runs (12.0 GPU-hours)" in out
    note = "sacct job 5 user researcher"
    assert _intervals() == [(t[0], t[1], 2, note), (t[2], t[3], 2, note), (t[4], t[5], 4, note)]


def test_the_same_record_twice_is_still_refused(cluster, researcher, org_tree, tmp_path: Path):
    s, e = _stamp(_at(3)), _stamp(_at(1))
    row = f"5|researcher|olmo|gres/gpu=2|{s}|{e}|COMPLETED"
    with pytest.raises(CommandError, match=r"line 3 \(job 5\): JobID 5 appears twice"):
        _sacct(tmp_path, row, row)
    assert not UsageEntry.objects.exists()


def test_an_overlapping_export_counts_each_run_once(cluster, researcher, org_tree, tmp_path: Path):
    """The first export: run 1 requeued, run 2 running. The next one lists run 1 again (already
    imported: skipped, not refused, not counted twice) and run 2 ended; a new job is imported."""
    t = [_at(h) for h in (10, 9, 8)]
    _sacct(
        tmp_path,
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[0])}|{_stamp(t[1])}|REQUEUED",
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[2])}|Unknown|RUNNING",
    )
    [first, second] = _intervals()
    assert second[3].endswith("(running at the export)")
    end = _at(0.5)
    out = _sacct(
        tmp_path,
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[0])}|{_stamp(t[1])}|REQUEUED",
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[2])}|{_stamp(end)}|COMPLETED",
        f"6|researcher|olmo|gres/gpu=1|{_stamp(t[2])}|{_stamp(end)}|COMPLETED",
    )
    assert "line 2: job 5's run from" in out and "already imported" in out
    note = "sacct job 5 user researcher"
    assert _intervals()[:2] == [first, (t[2], end, 2, note)]
    assert UsageEntry.objects.count() == 3


def test_a_requeued_run_after_a_running_one_is_not_charged_twice(cluster, researcher, org_tree, tmp_path: Path):
    """Imported running; since then it was requeued and runs again: the next export lists both runs.
    The first run's line moves its interval to its End; the second run is an interval of its own."""
    t = [_at(h) for h in (10, 6, 5)]
    _sacct(tmp_path, f"5|researcher|olmo|gres/gpu=2|{_stamp(t[0])}|Unknown|RUNNING")
    _sacct(
        tmp_path,
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[0])}|{_stamp(t[1])}|REQUEUED",
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[2])}|Unknown|RUNNING",
    )
    [(s1, e1, _, n1), (s2, _e2, _, n2)] = _intervals()
    assert (s1, e1, n1) == (t[0], t[1], "sacct job 5 user researcher")
    assert s2 == t[2] and n2.endswith("(running at the export)")


def test_an_export_imported_again_is_still_refused(cluster, researcher, org_tree, tmp_path: Path):
    t = [_at(h) for h in (10, 9, 8, 7)]
    rows = (
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[0])}|{_stamp(t[1])}|REQUEUED",
        f"5|researcher|olmo|gres/gpu=2|{_stamp(t[2])}|{_stamp(t[3])}|COMPLETED",
    )
    _sacct(tmp_path, *rows)
    with pytest.raises(CommandError, match=r"line 2 \(job 5\): JobID 5 is already imported"):
        _sacct(tmp_path, *rows)
    assert UsageEntry.objects.count() == 2


def test_runs_of_one_job_that_overlap_are_refused(cluster, researcher, org_tree, tmp_path: Path):
    """A job runs once at a time: two of its records holding GPUs at once would be charged twice."""
    t = [_at(h) for h in (10, 8, 9, 7)]
    with pytest.raises(CommandError, match=r"line 3 \(job 5\): .*overlaps"):
        _sacct(
            tmp_path,
            f"5|researcher|olmo|gres/gpu=2|{_stamp(t[0])}|{_stamp(t[1])}|REQUEUED",
            f"5|researcher|olmo|gres/gpu=2|{_stamp(t[2])}|{_stamp(t[3])}|COMPLETED",
        )
    assert not UsageEntry.objects.exists()
