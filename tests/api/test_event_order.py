"""Events listed in the order they were recorded (their id), not by ``at``: a slow tick stamps its
"attempt 2 placed" with the tick's start, which can be before "attempt 1 ended", recorded by the
agent link while the tick ran (the tick placed attempt 2 because of that end). Ordered by ``at``,
the page, the API and ``fairway show`` listed the placement first; each ``at`` stays as stamped."""

from __future__ import annotations

import html
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from scheduler import lifecycle
from scheduler.models import Attempt, Host, HostEvent, WorkloadEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def test_events_are_listed_in_recording_order(researcher, researcher_client, submit_kwargs, cluster, monkeypatch):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, retries=1))
    run_tick(cluster.pk)
    first = Attempt.objects.get(workload=w)
    assert lifecycle.attempt_started(first.host, first.pk)
    tick_began = timezone.now()  # the slow tick starts, then the agent link records the end
    assert lifecycle.attempt_exited(first.host, first.pk, exit_code=1)
    run_tick(cluster.pk, now=tick_began)
    kinds = list(WorkloadEvent.objects.filter(workload=w).order_by("id").values_list("kind", "at"))
    ended, placed = kinds[-2], kinds[-1]
    assert ended[0] == "retried" and placed[0] == "placed"
    assert placed[1] < ended[1]  # ``at`` as stamped: the tick's instant

    body = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert [e["kind"] for e in body["events"]][-2:] == ["retried", "placed"]

    page = Client()
    page.force_login(researcher)
    text = html.unescape(page.get(f"/workloads/{w.pk}/").content.decode())
    assert text.index("attempt 1 ended") < text.index("attempt 2 placed")

    out = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert out.index("attempt 1 ended") < out.index("attempt 2 placed")
    assert timedelta(0) < ended[1] - placed[1] < timedelta(minutes=1)


def test_the_model_and_the_admin_list_events_in_recording_order_too(admin, researcher, submit_kwargs, cluster):
    """Given events whose ``at`` runs backwards (a later record stamped earlier), the model's default
    order, the admin's inline on the workload and the admin's event list (by its "at" column too)
    read them in the order they were recorded, as the page, the API and ``fairway show`` do."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    now = timezone.now()
    late = WorkloadEvent.objects.create(workload=w, at=now, kind="note", message="recorded first")
    early = WorkloadEvent.objects.create(
        workload=w, at=now - timedelta(minutes=5), kind="note", message="recorded second"
    )

    ids = list(WorkloadEvent.objects.filter(workload=w).values_list("id", flat=True))
    assert ids == sorted(ids) and ids.index(late.pk) < ids.index(early.pk)

    console = Client()
    console.force_login(admin)
    change = console.get(f"/admin/scheduler/workload/{w.pk}/change/").content.decode()
    assert change.index("recorded first") < change.index("recorded second")
    listing = console.get("/admin/scheduler/workloadevent/").content.decode()
    assert listing.index("recorded second") < listing.index("recorded first")  # newest recorded first
    by_at = console.get("/admin/scheduler/workloadevent/?o=0").content.decode()  # the "at" column, ascending
    assert by_at.index("recorded first") < by_at.index("recorded second")


def test_a_hosts_events_are_read_in_recording_order_too(admin, researcher_client, hosts):
    """A host's events have ``at`` out of id order too (a tick stamps its host events with its start,
    a heartbeat with its receipt, before either waited for the host's lock). Given two cordons of a100-1, the
    later recorded stamped earlier: the hosts API's ``state_reason`` (and so the clusters page and
    ``fairway hosts``) names the one recorded last, and the model, the host's admin inline and the
    admin's host event list read them by id, as workload events are read."""
    host = hosts["a100-1"]
    Host.objects.filter(pk=host.pk).update(state=Host.State.CORDONED)
    now = timezone.now()
    first = HostEvent.objects.create(host=host, at=now, kind="cordoned", message="recorded first")
    second = HostEvent.objects.create(
        host=host, at=now - timedelta(minutes=5), kind="cordoned", message="recorded second"
    )

    reason = researcher_client.get("/api/v1/hosts/a100-1/").json()["state_reason"]
    assert reason["message"] == "recorded second"

    ids = list(HostEvent.objects.filter(host=host).values_list("id", flat=True))
    assert ids == sorted(ids) and ids.index(first.pk) < ids.index(second.pk)

    console = Client()
    console.force_login(admin)
    change = console.get(f"/admin/scheduler/host/{host.pk}/change/").content.decode()
    assert change.index("recorded second") < change.index("recorded first")  # newest recorded first
    listing = console.get("/admin/scheduler/hostevent/").content.decode()
    assert listing.index("recorded second") < listing.index("recorded first")  # newest recorded first
    by_at = console.get("/admin/scheduler/hostevent/?o=0").content.decode()  # the "at" column, ascending
    assert by_at.index("recorded first") < by_at.index("recorded second")
