"""import48: what ``import_history philly`` states about the import's instant, and how the
pyramid shows a range whose occupied time was barely measured (docs/standing.md, docs/demo.md)."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from budgets.services import do_create_budget
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.pyramid import Pyramid
from scheduler.services import do_create_cluster, do_register_host
from tests.conftest import connected

# Job 1 (vc aa, unallocated by the rule below) holds all 8 GPUs; job 2 (vc bb, allocated) asks for
# them 10 minutes later and preempts it; job 2 still runs at the import's instant (job 3's
# submission), so job 1 waits there, requeued, with 6,600 s of its 7,200 s left (less the grace).
TRACE = """job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s
1,0,aa,8,7200,
2,600,bb,8,36000,
3,3600,aa,1,60,
"""


@pytest.fixture
def philly(db, researcher, org_tree):
    cluster = do_create_cluster("philly")
    for h in ("p1", "p2"):
        connected(do_register_host(cluster, h, [(i, f"GPU-{h}-{i}", "H100", 80000) for i in range(4)])[0])
    do_create_budget(name="vc-aa", parent=org_tree["nlp"])
    do_create_budget(name="vc-bb", parent=org_tree["vision"])
    return cluster


def _import(tmp_path: Path) -> str:
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    out = StringIO()
    call_command(
        "import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
        "--before-job", "3", "--days", "1", "--load", "100", "--unallocated-rule", "vc:aa", stdout=out,
    )  # fmt: skip
    return out.getvalue()


def test_a_job_preempted_and_waiting_at_the_import_is_imported_pending_not_canceled(philly, tmp_path, settings):
    """Reviewer's fault 2: a job preempted and requeued, pending again at the import's instant,
    was imported canceled (and finished then). It is what the live scheduler would have: its
    attempt ended preempted, the workload pending (requeued) with its remaining run time."""
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    _import(tmp_path)
    w = Workload.objects.get(name="philly-1")
    assert w.state == "pending"
    assert w.finished_at is None
    [a] = w.attempts.all()
    assert a.end_reason == "preempted" and a.ended_at is not None and not a.allocated
    assert a.charged_gpu_seconds == 0  # unallocated: free
    ran = (a.ended_at - a.started_at).total_seconds()
    assert ran == pytest.approx(600 + grace, abs=1)
    assert w.duration_hint_s == 7200 - round(ran)  # what is left of its run, as the simulator had it
    assert w.command[-2:] == ["--duration", str(7200 - round(ran))]  # runs what is left, if started
    # the stop was asked at the preemption, the GPUs released a grace later
    assert a.stop_requested_at is not None
    assert (a.ended_at - a.stop_requested_at).total_seconds() == pytest.approx(grace, abs=1)
    kinds = list(w.events.order_by("at", "pk").values_list("kind", flat=True))
    assert kinds == ["submitted", "preempted", "requeued"]


def test_the_job_running_at_the_import_is_cut_there_and_said_so(philly, tmp_path):
    """A job still running at the import's instant has no agent to go on with it: its attempt is
    cut there, canceled, as docs/demo.md says, with an event that says why (it had none: a
    canceled workload with no word of who canceled it); charged to the cut, never past now."""
    _import(tmp_path)
    now = timezone.now()
    w = Workload.objects.get(name="philly-2")
    assert w.state == "canceled"
    [a] = w.attempts.all()
    assert a.end_reason == "canceled" and a.ended_at <= now and w.finished_at == a.ended_at
    assert a.charged_gpu_seconds == 8 * round((a.ended_at - a.started_at).total_seconds())
    assert w.duration_hint_s == 8 * 3600  # the run it was given, capped (the trace's 10 h was never run)
    last = w.events.order_by("-at", "-pk").first()
    assert last is not None and last.kind == "canceled" and "end of the imported span" in last.message
    assert not WorkloadEvent.objects.filter(at__gt=now).exists()
    assert not Attempt.objects.filter(ended_at__gt=now).exists()


@pytest.mark.parametrize(("measured", "shown"), [(0.3, False), (49.0, False), (50.0, True), (100.0, True)])
def test_a_range_barely_measured_shows_utilization_not_measured(measured, shown):
    """Reviewer's fault 1: after an imported week, the 7-day range's utilization was its live
    minutes' mean times the week's occupancy: "72% (…, measured over less than 1% of the occupied
    GPU-time)", a projection from almost nothing shown as a figure. Under half of the occupied
    GPU-time measured, the range's utilization is not measured (null, "not measured (…)")."""
    p = Pyramid(registered=200.0, available=200.0, allocated=100.0, measured=measured, utilized=measured * 0.8)
    share = p.fractions()
    text = p.utilization_text()
    if shown:
        assert share["utilization"] == pytest.approx(0.4) and share["utilization_of_occupied"] == pytest.approx(0.8)
        assert text.startswith("40% (occupied GPU-time at 80% mean utilization")
    else:
        assert share["utilization"] is None and share["utilization_of_occupied"] is None
        assert share["utilization_measured"] == pytest.approx(measured / 100)
        assert text.startswith("not measured (")
        assert "%" not in text.split("(")[0]
        assert ("less than 1%" if measured < 1 else f"{measured:.0f}%") in text


def test_the_demo_may_cancel_the_waiting_work_and_it_says_so(philly, tmp_path):
    """``--requeued cancel`` (the demo's: its replay starts from an empty queue): the work waiting
    at the import's instant is canceled there, by an event that says so, not silently."""
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    out = StringIO()
    call_command(
        "import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
        "--before-job", "3", "--days", "1", "--load", "100", "--unallocated-rule", "vc:aa",
        "--requeued", "cancel", stdout=out,
    )  # fmt: skip
    assert "1 preempted and waiting at the span's end (canceled there)" in out.getvalue()
    w = Workload.objects.get(name="philly-1")
    assert w.state == "canceled" and w.finished_at is not None
    [a] = w.attempts.all()
    assert a.end_reason == "preempted" and w.finished_at > a.ended_at
    last = w.events.order_by("-at", "-pk").first()
    assert last is not None and last.kind == "canceled" and "--requeued cancel" in last.message
    assert "1 preempted and waiting at the span's end (pending, requeued)" in _import_other(tmp_path)


def _import_other(tmp_path: Path) -> str:
    """The default on another cluster of its own: pending, requeued."""
    from scheduler.models import Cluster

    Workload.objects.all().delete()
    Cluster.objects.filter(name="philly").update(name="philly-old")
    cluster = do_create_cluster("philly")
    for h in ("q1", "q2"):
        connected(do_register_host(cluster, h, [(i, f"GPU-{h}-{i}", "H100", 80000) for i in range(4)])[0])
    return _import(tmp_path)


def test_the_waiting_job_is_the_live_schedulers_to_start_and_its_past_reads_not_measured(philly, tmp_path):
    """The requeued workload is the live queue's: the next tick starts its attempt 2 on the GPUs the
    cut job left; its imported attempt, never sampled, reads "not measured" (not 0 %)."""
    from rest_framework.test import APIClient

    from scheduler.tick import run_tick

    _import(tmp_path)
    w = Workload.objects.get(name="philly-1")
    run_tick(philly.pk)
    w.refresh_from_db()
    assert w.state in ("starting", "running")
    assert sorted(w.attempts.values_list("number", flat=True)) == [1, 2]
    api = APIClient()
    api.force_authenticate(w.owner)
    body = api.get(f"/api/v1/workloads/{Workload.objects.get(name='philly-2').pk}/").json()
    assert body["efficiency"]["utilization"] is None
