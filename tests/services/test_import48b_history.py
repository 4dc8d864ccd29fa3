"""import48b: a Slurm job still running at the export counts its usage so far (DESIGN.md §3.1),
waiting lines are skipped as docs/standing.md says, and the pyramid hour an import happened in
reads its imported part as the earlier imported hours do."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from budgets.models import UsageEntry
from budgets.services import do_create_budget
from scheduler.history import SACCT_RUNNING_NOTE, sacct_note_user
from scheduler.models import ClusterHourlyMetrics
from scheduler.pyramid import HOUR, hour_of, rollup_missing_hours
from scheduler.services import do_create_cluster, do_register_host
from tests.sacct_files import HEADER
from tests.sacct_files import import_sacct as _sacct
from tests.sacct_files import stamp as _stamp


def test_a_job_running_at_the_export_counts_its_usage_so_far(cluster, researcher, org_tree, tmp_path: Path):
    """It was skipped ("has not started or not ended"): the budgets running the most looked the
    least used. Its GPUs count from Start to the import's instant, as a running attempt's (§3.1),
    in an interval noted running at the export (not an attempt: a sacct import writes none)."""
    before = timezone.now()
    s = _stamp(before - timedelta(hours=3))
    text = _sacct(tmp_path, f"104|researcher|olmo|cpu=4,gres/gpu=2|{s}|Unknown|RUNNING")
    after = timezone.now()
    [entry] = UsageEntry.objects.all()
    assert entry.budget == org_tree["nlp/olmo"] and entry.gpus == 2
    assert entry.start == datetime.fromisoformat(s).replace(tzinfo=UTC)
    assert before <= entry.end <= after  # cut at the import's instant, never past it
    assert entry.note == SACCT_RUNNING_NOTE.format(job="104", user="researcher")
    assert sacct_note_user(entry.note) == "researcher"  # the statement still names the Slurm user
    assert "imported 1 Slurm jobs (6.0 GPU-hours" in text and "1 running at the export, counted to now" in text
    assert "skipped" not in text.replace("0 skipped", "")


def test_a_job_imported_running_is_extended_by_a_later_export(cluster, researcher, org_tree, tmp_path: Path):
    """The next export names the job again (it ran after its -S): it was refused "already
    imported" with the whole file; its interval now runs on to its End (or the new cut)."""
    now = timezone.now()
    s = _stamp(now - timedelta(hours=5))
    _sacct(tmp_path, f"7|researcher|olmo|gres/gpu=1|{s}|Unknown|RUNNING")
    [entry] = UsageEntry.objects.all()
    first_end = entry.end
    text = _sacct(tmp_path, f"7|researcher|olmo|gres/gpu=1|{s}|Unknown|RUNNING")
    [entry] = UsageEntry.objects.all()
    assert entry.end >= first_end and "running at the export" in entry.note
    assert "imported 1 Slurm jobs" in text
    e = _stamp(timezone.now())
    _sacct(tmp_path, f"7|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED")
    [entry] = UsageEntry.objects.all()
    assert entry.end == datetime.fromisoformat(e).replace(tzinfo=UTC)
    assert entry.note == "sacct job 7 user researcher"  # ended now: a finished job's entry
    with pytest.raises(CommandError, match="JobID 7 is already imported on default"):
        _sacct(tmp_path, f"7|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED")
    assert UsageEntry.objects.count() == 1


def test_waiting_lines_are_skipped_and_ended_preempted_or_requeued_runs_count(
    cluster, researcher, org_tree, tmp_path: Path
):
    """PENDING (no Start, no AllocTRES: it read "held no GPUs") and a requeued job waiting again
    are skipped as not started; a run that ended PREEMPTED or REQUEUED held its GPUs from Start to
    End and counts, as a preempted attempt's run is charged."""
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=2))
    text = _sacct(
        tmp_path,
        "1|researcher|olmo||Unknown|Unknown|PENDING",
        "2|researcher|olmo||Unknown|Unknown|REQUEUED",
        f"3|researcher|olmo|gres/gpu=1|{s}|{e}|PREEMPTED",
        f"4|researcher|olmo|gres/gpu=1|{s}|{e}|REQUEUED",
    )
    assert "line 2: job 1 has not started (PENDING)" in text
    assert "line 3: job 2 has not started (REQUEUED)" in text
    assert sorted(UsageEntry.objects.values_list("note", flat=True)) == [
        "sacct job 3 user researcher",
        "sacct job 4 user researcher",
    ]


def test_a_running_job_starting_after_the_import_is_refused(cluster, researcher, org_tree, tmp_path: Path):
    s = _stamp(timezone.now() + timedelta(hours=1))
    f = tmp_path / "bad.txt"
    f.write_text(HEADER + f"9|researcher|olmo|gres/gpu=1|{s}|Unknown|RUNNING\n")
    with pytest.raises(CommandError, match=r"line 2 \(job 9\): Start is in the future"):
        call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
    assert not UsageEntry.objects.exists()


TRACE = """job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s
1,0,aa,2,600,
2,3600,aa,1,60,
"""


def test_the_import_hour_reads_its_imported_part_as_the_earlier_hours(db, researcher, org_tree, tmp_path, monkeypatch):
    """lead47 counted the hosts available in the imported complete hours; the hour the import ran in
    was rolled up later by the clock with the hosts' state then (offline until the agents' hello):
    its imported part, idle, read unavailable. The part before the import's instant now counts the
    hosts available, the rest by their state at the roll-up."""
    imported_at = hour_of(timezone.now()) - 2 * HOUR + timedelta(minutes=30)
    monkeypatch.setattr(timezone, "now", lambda: imported_at)
    cluster = do_create_cluster("philly")
    for h in ("p1", "p2"):
        do_register_host(cluster, h, [(i, f"GPU-{h}-{i}", "H100", 80000) for i in range(4)])
    do_create_budget(name="vc-aa", parent=org_tree["nlp"])
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    call_command(
        "import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
        "--before-job", "2", "--days", "1", "--load", "100", stdout=StringIO(),
    )  # fmt: skip
    hour = hour_of(imported_at)
    assert not ClusterHourlyMetrics.objects.filter(cluster=cluster, hour=hour).exists()  # not complete yet
    rollup_missing_hours(now=hour + HOUR + timedelta(minutes=1))  # the clock, the agents still not up
    row = ClusterHourlyMetrics.objects.get(cluster=cluster, hour=hour)
    assert set(cluster.hosts.values_list("state", flat=True)) == {"offline"}
    assert row.registered_gpu_s == pytest.approx(8 * 3600)
    assert row.available_gpu_s == pytest.approx(8 * 30 * 60)  # the imported half hour, idle and available
    earlier = ClusterHourlyMetrics.objects.get(cluster=cluster, hour=hour - HOUR)
    assert earlier.available_gpu_s == earlier.registered_gpu_s
