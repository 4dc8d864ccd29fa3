"""brk48b: a later export's line of a job imported running at an earlier export moves that
interval's end; what else the line says must be what was imported (User, Account, GPUs), and its
End cannot put the interval's end before its start."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError
from django.utils import timezone

from budgets.models import UsageEntry
from tests.sacct_files import import_sacct as _sacct
from tests.sacct_files import stamp as _stamp


@pytest.mark.parametrize(
    ("later", "says"),
    [
        ("7|teammate|olmo|gres/gpu=2|{s}|{e}|COMPLETED", "User 'teammate'"),
        ("7|researcher|tulu|gres/gpu=2|{s}|{e}|COMPLETED", "Account 'tulu'"),
        ("7|researcher|olmo|gres/gpu=8|{s}|{e}|COMPLETED", "8 GPUs"),
        ("7|teammate|olmo|gres/gpu=2|{s}|Unknown|RUNNING", "User 'teammate'"),
    ],
)
def test_a_later_line_changing_user_account_or_gpus_is_refused(
    cluster, researcher, teammate, org_tree, tmp_path: Path, later: str, says: str
):
    """It moved the end only: a new User took the whole job's usage in the statement (the note),
    a new Account or GPU count was silently dropped, the import saying the job imported."""
    now = timezone.now()
    s = _stamp(now - timedelta(hours=5))
    _sacct(tmp_path, f"7|researcher|olmo|gres/gpu=2|{s}|Unknown|RUNNING")
    [before] = UsageEntry.objects.values_list("budget", "gpus", "note", "end")
    with pytest.raises(CommandError, match=rf"line 2 \(job 7\): .*{says}.*imported running"):
        _sacct(tmp_path, later.format(s=s, e=_stamp(timezone.now())))
    assert list(UsageEntry.objects.values_list("budget", "gpus", "note", "end")) == [before]


def test_a_later_end_before_the_imported_interval_is_refused(cluster, researcher, org_tree, tmp_path: Path):
    """Imported running with a Start before the fair-share window (clipped to the window's start),
    a later line's End before that clipped start made an interval ending before it starts (what
    UsageEntry.clean refuses)."""
    window = int(settings.FAIRWAY["LOOKBACK_WINDOW_S"])
    now = timezone.now()
    s = _stamp(now - timedelta(seconds=window + 3 * 3600))
    _sacct(tmp_path, f"8|researcher|olmo|gres/gpu=1|{s}|Unknown|RUNNING")
    [entry] = UsageEntry.objects.all()
    e = _stamp(entry.start - timedelta(hours=1))
    with pytest.raises(CommandError, match=r"line 2 \(job 8\): End .* before"):
        _sacct(tmp_path, f"8|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED")
    for entry in UsageEntry.objects.all():
        assert entry.end >= entry.start


def test_a_job_restarted_after_the_earlier_import_is_not_charged_the_gap(
    cluster, researcher, org_tree, tmp_path: Path, monkeypatch
):
    """Imported running at T0; Slurm requeued it (its waiting line skipped as not started), and it
    ran again from a later Start: the later line moved the old interval's end to its End, charging
    the whole wait between its runs. The first run ends at the earlier cut at the latest, the new
    run is an interval of its own from its Start."""
    real_now = timezone.now()
    t0 = real_now - timedelta(hours=3)
    s1 = _stamp(t0 - timedelta(hours=2))
    monkeypatch.setattr(timezone, "now", lambda: t0)
    _sacct(tmp_path, f"9|researcher|olmo|gres/gpu=2|{s1}|Unknown|RUNNING")
    [first] = UsageEntry.objects.all()
    monkeypatch.undo()
    s2, e2 = real_now - timedelta(hours=1), real_now - timedelta(minutes=10)
    _sacct(tmp_path, "9|researcher|olmo||Unknown|Unknown|REQUEUED")  # waiting again: skipped
    _sacct(tmp_path, f"9|researcher|olmo|gres/gpu=2|{_stamp(s2)}|{_stamp(e2)}|COMPLETED")
    spans = sorted(UsageEntry.objects.values_list("start", "end", "gpus", "note"))
    assert spans == [
        (first.start, first.end, 2, "sacct job 9 user researcher"),
        (s2.replace(microsecond=0), e2.replace(microsecond=0), 2, "sacct job 9 user researcher"),
    ]
    with pytest.raises(CommandError, match="JobID 9 is already imported on default"):
        _sacct(tmp_path, f"9|researcher|olmo|gres/gpu=2|{_stamp(s2)}|{_stamp(e2)}|COMPLETED")
