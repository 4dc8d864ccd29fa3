"""break32: faults found by brk32 (files, time, sizes, authorization)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from budgets.models import UsageEntry


def _stamp(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S")


def test_a_sacct_job_id_too_long_for_its_note_is_refused_not_imported_twice(cluster, researcher, org_tree, tmp_path):
    """A JobID of 190 characters: the usage interval's note (200 characters, by which a second import
    of the job is recognised) was cut before its " user " part, so the same export imported again
    was taken as new: the lab's usage doubled without a word."""
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    job = "7" * 190
    f.write_text(f"JobID|User|Account|AllocTRES|Start|End|State\n{job}|researcher|olmo|gres/gpu=4|{s}|{e}|COMPLETED\n")
    for _ in range(2):
        with pytest.raises(CommandError) as err:
            call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
        assert "line 2 (job 777" in str(err.value) and "JobID" in str(err.value)
    assert UsageEntry.objects.count() == 0


@pytest.mark.parametrize("until", ["9999-12-31T23:59:59-12:00", "9999-12-31T20:00:00-05:00"])
def test_an_instant_past_the_last_utc_datetime_is_a_400(researcher, api_client_for, cluster, until):
    """``metrics/pyramid/?until=9999-12-31T23:59:59-12:00``: a date-time a datetime holds whose UTC
    instant it does not (year 10000); the report's query converted it to UTC: a 500."""
    api = api_client_for(researcher)
    api.raise_request_exception = False
    for url, key in [("/api/v1/metrics/pyramid/", "until"), ("/api/v1/workloads/history/", "since")]:
        r = api.get(url, {key: until})
        assert r.status_code == 400, (url, r.status_code)
        assert key in r.json()
