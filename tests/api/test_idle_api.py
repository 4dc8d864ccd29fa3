"""Idle GPUs on the API and the CLI (docs/jobs.md "Idle GPUs"): the detail's and the rows' ``idle``,
``?idle=true|false``, ``fairway ls --idle``, its marker and ``fairway show``."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import GPU, Attempt, AttemptGPU, GpuMinuteSample, Workload
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli


@pytest.fixture(autouse=True)
def _rule(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}


def run_on(workload: Workload, host: str, util: float, idle_min: int = 80) -> Attempt:
    """``workload`` running for 3 hours on ``host``'s first GPUs, at 50 % until ``idle_min`` minutes
    ago and at ``util`` % since."""
    now = timezone.now()
    gpus = list(GPU.objects.filter(host__name=host).order_by("index")[: workload.gpu_count])
    attempt = Attempt.objects.create(
        workload=workload, number=1, host=gpus[0].host, allocated=True, placed_at=now - timedelta(hours=3),
        started_at=now - timedelta(hours=3),
    )  # fmt: skip
    AttemptGPU.objects.bulk_create([AttemptGPU(attempt=attempt, gpu=g) for g in gpus])
    Workload.objects.filter(pk=workload.pk).update(state=Workload.State.RUNNING)
    minute = now.replace(second=0, microsecond=0)
    GpuMinuteSample.objects.bulk_create(
        [
            GpuMinuteSample(
                gpu=g, minute=minute - timedelta(minutes=m), samples=2, utilization_samples=2, utilization_sum=2 * u
            )
            for g in gpus
            for m in range(170)  # idle since minute - (idle_min - 1): "1h 19m" for 80
            for u in [util if m < idle_min else 50.0]
        ]
    )
    return attempt


@pytest.fixture
def two(researcher, submit_kwargs):
    """An idle workload (2 GPUs of a100-1 under 1 % for 80 minutes) and a busy one (a100-2)."""
    idle = do_submit_workload(researcher, **submit_kwargs(name="idler", gpu_count=2))
    busy = do_submit_workload(researcher, **submit_kwargs(name="worker", gpu_count=2))
    run_on(idle, "a100-1", 0.2)
    run_on(busy, "a100-2", 70.0)
    pending = do_submit_workload(researcher, **submit_kwargs(name="waiter"))
    return idle, busy, pending


def test_the_detail_and_the_rows_say_idle(researcher_client, two):
    idle, busy, pending = two
    data = researcher_client.get(f"/api/v1/workloads/{idle.pk}/").json()["idle"]
    assert data["gpus"] == 2 and data["threshold_pct"] == 1.0
    assert 80 * 60 - 60 <= data["seconds"] <= 80 * 60 + 60
    assert data["gpu_hours"] == pytest.approx(2 * data["seconds"] / 3600, abs=0.01)
    assert researcher_client.get(f"/api/v1/workloads/{busy.pk}/").json()["idle"] is None
    assert researcher_client.get(f"/api/v1/workloads/{pending.pk}/").json()["idle"] is None
    rows = {w["id"]: w["idle"] for w in researcher_client.get("/api/v1/workloads/").json()["results"]}
    assert rows[idle.pk]["since"] == data["since"] and rows[busy.pk] is None and rows[pending.pk] is None


def test_the_list_filters_idle(researcher_client, two):
    idle, busy, pending = two
    ids = [w["id"] for w in researcher_client.get("/api/v1/workloads/?idle=true").json()["results"]]
    assert ids == [idle.pk]
    answer = researcher_client.get("/api/v1/workloads/?idle=False").json()
    assert sorted(w["id"] for w in answer["results"]) == sorted([busy.pk, pending.pk]) and answer["count"] == 2


@pytest.mark.parametrize("value", ["yes", "", "1"])
def test_a_bad_idle_value_is_refused(researcher_client, two, value):
    response = researcher_client.get("/api/v1/workloads/", {"idle": value})
    if value == "":
        assert response.status_code == 200  # empty: no filter, as every filter of the list
        return
    assert response.status_code == 400
    assert "idle is true or false" in json.dumps(response.json())


def test_off_nothing_is_idle(researcher_client, two, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_AFTER_S": 0}
    assert researcher_client.get("/api/v1/workloads/?idle=true").json()["results"] == []
    assert researcher_client.get(f"/api/v1/workloads/{two[0].pk}/").json()["idle"] is None


def test_the_list_reads_the_idle_rule_in_one_query(researcher_client, two):
    """The page's rows ask the rule once, whatever their number: two queries at most, of the running rows."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as q:
        researcher_client.get("/api/v1/workloads/")
    assert sum("scheduler_gpuminutesample" in x["sql"] for x in q.captured_queries) == 2


def test_fairway_ls_idle_marker_and_show(monkeypatch, researcher, two):
    idle, busy, _pending = two
    table = run_cli(monkeypatch, researcher, "ls")
    assert "running (idle)" in table
    assert re.search(rf"#{idle.pk} idle for 1h (19|20)m .*: [0-9.]+ GPU-h held idle", table), table
    assert f"#{busy.pk} idle" not in table
    only = run_cli(monkeypatch, researcher, "ls", "--idle")
    assert "idler" in only and "worker" not in only and "waiter" not in only
    rows = json.loads(run_cli(monkeypatch, researcher, "--json", "ls", "--idle"))
    assert [w["id"] for w in rows] == [idle.pk]
    shown = run_cli(monkeypatch, researcher, "show", str(idle.pk))
    assert re.search(r"idle for 1h (19|20)m \(GPUs < 1 % since (?:[A-Z][a-z]{2} \d+ )?\d\d:\d\d:00 UTC\)", shown), shown
    assert "idle for" not in run_cli(monkeypatch, researcher, "show", str(busy.pk))


def test_fairway_notifications_take_idle(monkeypatch, researcher, db):
    out = run_cli(monkeypatch, researcher, "notifications", "--email", "idle,failed")
    assert "idle" in out
    from scheduler.models import NotificationSettings

    assert NotificationSettings.objects.get(user=researcher).email_kinds == ["failed", "idle"]


def test_a_bulk_cancel_takes_the_idle_filter(researcher_client, two):
    """The bulk actions read the list's filters: ``?owner=me&idle=true`` cancels the idle work alone."""
    idle, _busy, _pending = two
    answer = researcher_client.post(
        "/api/v1/workloads/bulk/?owner=me&idle=true", {"action": "cancel", "dry_run": True}, format="json"
    ).json()
    assert (answer["matched"], answer["ids"]) == (1, [idle.pk])
