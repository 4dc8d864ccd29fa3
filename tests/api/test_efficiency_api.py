"""Job efficiency on the API, the CLI and the page (docs/jobs.md "Efficiency"): the detail's and
each attempt's ``efficiency`` (one query), the history's ``utilization``, ``fairway show``'s block,
``fairway seff``, ``fairway history``'s column, the workload page."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from fairway_cli.words import NOT_MEASURED
from scheduler.models import GPU, Attempt, AttemptGPU, GpuMinuteSample, Workload
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli


@pytest.fixture(autouse=True)
def _rule(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0}


def ran(workload: Workload, host: str, number: int, began_min: int, minutes: int, util: float | None, end=True):
    """An attempt of ``workload`` on ``host``'s first GPUs, placed ``began_min`` minutes ago (on a
    minute) for ``minutes``, at ``util`` % each minute (None: no sample), 30 GiB of 80 used."""
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=began_min)
    gpus = list(GPU.objects.filter(host__name=host).order_by("index")[: workload.gpu_count])
    GPU.objects.filter(pk__in=[g.pk for g in gpus]).update(memory_mb=80 * 1024)
    attempt = Attempt.objects.create(
        workload=workload, number=number, host=gpus[0].host, allocated=True, placed_at=minute, started_at=minute,
        ended_at=minute + timedelta(minutes=minutes) if end else None, end_reason="preempted" if end else "",
    )  # fmt: skip
    AttemptGPU.objects.bulk_create([AttemptGPU(attempt=attempt, gpu=g, open=not end) for g in gpus])
    if util is not None:
        GpuMinuteSample.objects.bulk_create(
            [
                GpuMinuteSample(
                    gpu=g,
                    minute=minute + timedelta(minutes=m),
                    samples=2,
                    utilization_samples=2,
                    utilization_sum=2 * util,
                    memory_used_max_mb=30 * 1024,
                )  # fmt: skip
                for g in gpus
                for m in range(minutes)
            ]
        )
    return attempt


@pytest.fixture
def twice(researcher, submit_kwargs):
    """A workload that ran 60 minutes on 2 GPUs at 80 %, then 60 minutes unmeasured, and succeeded."""
    w = do_submit_workload(researcher, **submit_kwargs(name="trainer", gpu_count=2))
    ran(w, "a100-1", 1, 200, 60, 80.0)
    ran(w, "a100-2", 2, 100, 60, None)
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.SUCCEEDED, finished_at=timezone.now())
    return w


def test_the_detail_has_the_workloads_and_each_attempts_efficiency_in_one_query(researcher_client, twice):
    with CaptureQueriesContext(connection) as q:
        data = researcher_client.get(f"/api/v1/workloads/{twice.pk}/").json()
    assert sum("memory_used_max_mb" in x["sql"] for x in q.captured_queries) == 1
    total = data["efficiency"]
    assert total["gpu_hours"] == 4.0 and total["utilization"] == 0.8 and total["not_measured"] == 0.5
    assert total["idle"] == 0.0 and (total["memory_peak_mb"], total["memory_total_mb"]) == (30720, 81920)
    first, second = data["attempts"]
    assert first["efficiency"]["utilization"] == 0.8 and first["efficiency"]["not_measured"] == 0.0
    assert second["efficiency"]["utilization"] is None and second["efficiency"]["not_measured"] == 1.0


def test_a_pending_workload_reads_no_samples(researcher_client, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="waiter"))
    with CaptureQueriesContext(connection) as q:
        data = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert not any("memory_used_max_mb" in x["sql"] for x in q.captured_queries)
    assert data["efficiency"]["gpu_hours"] == 0 and data["efficiency"]["utilization"] is None


def test_history_has_each_attempts_mean_utilization(researcher_client, twice):
    with CaptureQueriesContext(connection) as q:
        rows = researcher_client.get("/api/v1/workloads/history/").json()["results"]
    assert sum("memory_used_max_mb" in x["sql"] for x in q.captured_queries) == 1
    assert sorted((r["attempt"], r["utilization"]) for r in rows) == [(1, 0.8), (2, None)]


def test_fairway_show_seff_and_history(monkeypatch, researcher, twice):
    shown = run_cli(monkeypatch, researcher, "show", str(twice.pk))
    assert f"efficiency (all attempts; each: fairway seff {twice.pk}):\n  GPU-time held:" in shown
    assert "GPU-time held:   4.00 GPU-h (2 GPUs)" in shown
    assert "GPU utilization: 80% (mean over the measured GPU-time)" in shown
    assert "Peak GPU memory: 30.0 of 80.0 GiB (38%)" in shown
    assert "Not measured:    50% of the GPU-time held had no utilization reading" in shown
    seff = run_cli(monkeypatch, researcher, "seff", str(twice.pk))
    assert f"Workload:        #{twice.pk} trainer" in seff and "Attempts:        2" in seff
    # try61: "User/budget:     alice/nlp/olmo" read as one budget path three deep
    assert f"User:            {researcher.username}\nBudget:          {twice.budget.path}\n" in seff
    assert "attempt 2:\n  GPU-time held:   2.00 GPU-h (2 GPUs)\n" in seff
    assert f"  GPU utilization: {NOT_MEASURED}\n" in seff and f"  Idle minutes:    {NOT_MEASURED}\n" in seff
    data = json.loads(run_cli(monkeypatch, researcher, "--json", "seff", str(twice.pk)))
    assert data["efficiency"]["utilization"] == 0.8 and len(data["attempts"]) == 2
    history = run_cli(monkeypatch, researcher, "history")
    assert "UTIL" in history and "80%" in history and NOT_MEASURED in history
    csv = run_cli(monkeypatch, researcher, "history", "--csv").splitlines()
    assert csv[0].endswith(",utilization") and any(line.endswith(",0.8") for line in csv[1:])


def test_fairway_seff_of_a_running_and_a_pending_workload(monkeypatch, researcher, submit_kwargs):
    running = do_submit_workload(researcher, **submit_kwargs(name="runner", gpu_count=1))
    ran(running, "a100-1", 1, 30, 20, 0.5, end=False)  # 20 sampled minutes at 0.5 %, 10 without
    Workload.objects.filter(pk=running.pk).update(state=Workload.State.RUNNING)
    seff = run_cli(monkeypatch, researcher, "seff", str(running.pk))
    assert " GPU-min (1 GPU, so far)" in seff  # left60: as charged GPU-time
    assert "efficiency:\n  GPU-time held:" in run_cli(monkeypatch, researcher, "show", str(running.pk))
    assert "Idle minutes:    100% of the measured GPU-time under 1 %" in seff
    pending = do_submit_workload(researcher, **submit_kwargs(name="waiter"))
    assert "This workload has no attempt yet." in run_cli(monkeypatch, researcher, "seff", str(pending.pk))
    run_cli(monkeypatch, researcher, "seff", "nope", expect=2)


def test_the_workload_page_shows_efficiency(client, researcher, twice):
    client.force_login(researcher)
    html = client.get(f"/workloads/{twice.pk}/").content.decode()
    assert 'id="efficiency"' in html and "80% (mean over the measured GPU-time)" in html
    assert f'<td class="num attempt-util">{NOT_MEASURED}</td>' in html
    assert '<td class="num attempt-util">80%</td>' in html


def test_every_surface_reads_a_short_jobs_one_utilization(
    client, monkeypatch, researcher, researcher_client, submit_kwargs
):
    """util46: a 50 s job (placed at :40, ended at 1:30) held no whole minute and read "not measured"
    everywhere, though the agent sampled its GPU; each minute now counts for the seconds held of it,
    with its busy seconds (util47: 20 s held of a minute of four readings at 30 %, 1.2 busy readings,
    so two fell in the 20 s: 12 s busy; 30 s of one at 90 %, 30 s busy: 84 %; busy46 read 60 s × the
    mean bounded by the seconds held, 96 %; the held seconds' weights read 66 %), the same
    figure on the API's detail and history, ``fairway show``, ``seff`` and ``history``, the workload
    page, and the cluster's pyramid (its metrics)."""
    from scheduler.models import Host
    from scheduler.pyramid import hour_of, rollup_hour

    w = do_submit_workload(researcher, **submit_kwargs(name="quick", gpu_count=1))
    minute = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=10)
    Host.objects.update(created_at=minute - timedelta(days=1))
    gpu = GPU.objects.get(host__name="a100-1", index=0)
    attempt = Attempt.objects.create(
        workload=w, number=1, host=gpu.host, allocated=True, placed_at=minute + timedelta(seconds=40),
        started_at=minute + timedelta(seconds=40), ended_at=minute + timedelta(minutes=1, seconds=30),
        end_reason="succeeded",
    )  # fmt: skip
    AttemptGPU.objects.create(attempt=attempt, gpu=gpu, open=False)
    for m, util in ((0, 30.0), (1, 90.0)):
        GpuMinuteSample.objects.create(
            gpu=gpu, minute=minute + timedelta(minutes=m), samples=4, utilization_samples=4, utilization_sum=4 * util
        )
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.SUCCEEDED, finished_at=timezone.now())
    data = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert data["efficiency"]["utilization"] == 0.84 and data["attempts"][0]["efficiency"]["utilization"] == 0.84
    rows = researcher_client.get("/api/v1/workloads/history/").json()["results"]
    assert [(r["workload"], r["utilization"]) for r in rows] == [(w.pk, 0.84)]
    assert "GPU utilization: 84% (mean over the measured GPU-time)" in run_cli(
        monkeypatch, researcher, "show", str(w.pk)
    )
    assert "GPU utilization: 84%" in run_cli(monkeypatch, researcher, "seff", str(w.pk))
    assert any(line.endswith(",0.84") for line in run_cli(monkeypatch, researcher, "history", "--csv").splitlines())
    client.force_login(researcher)
    assert '<td class="num attempt-util">84%</td>' in client.get(f"/workloads/{w.pk}/").content.decode()
    for hour in {hour_of(attempt.placed_at), hour_of(attempt.ended_at)}:
        if hour < hour_of(timezone.now()):
            rollup_hour(gpu.host.cluster, hour)
    pyramid = researcher_client.get("/api/v1/metrics/pyramid/").json()
    (cluster,) = [c for c in pyramid if c["cluster"] == gpu.host.cluster.name]
    assert cluster["total"]["utilization_of_occupied"] == 0.84
    assert "occupied GPU-time at 84% mean utilization" in client.get("/metrics/").content.decode()


def test_a_finished_workloads_efficiency_survives_the_samples_prune_on_every_surface(
    admin_client, client, monkeypatch, researcher, researcher_client, twice
):
    """util47: the retention job deleted the minute samples and an ended attempt's figure was read
    again from what was left: 80 % became "not measured" on the API, the CLI, the page. Its figure
    is kept before the prune (``Attempt.efficiency_kept``), one source every surface reads."""
    from scheduler import metrics

    client.force_login(researcher)

    def surfaces():
        detail = researcher_client.get(f"/api/v1/workloads/{twice.pk}/").json()
        history = researcher_client.get("/api/v1/workloads/history/").json()["results"]
        seff = run_cli(monkeypatch, researcher, "seff", str(twice.pk))
        html = client.get(f"/workloads/{twice.pk}/").content.decode()
        page = re.search(r'id="efficiency".*?</table>', html, re.S).group(0), re.findall(r'attempt-util">[^<]*', html)
        first = twice.attempts.get(number=1)
        html = admin_client.get(f"/admin/scheduler/attempt/{first.pk}/change/").content.decode()
        admin = re.search(r'field-efficiency.*?<div class="readonly">(.*?)</div>', html, re.S).group(1)
        return detail["efficiency"], [a["efficiency"] for a in detail["attempts"]], history, seff, page, admin

    before = surfaces()
    assert before[0]["utilization"] == 0.8
    assert "GPU utilization: 80% (mean over the measured GPU-time)" in before[5]  # the admin's too
    # a month later, every sample past the retention
    assert metrics.prune(timezone.now() + timedelta(days=31), days=30) == 60 * 2  # its first attempt's minutes
    assert not GpuMinuteSample.objects.exists()
    after = surfaces()
    assert after == before
