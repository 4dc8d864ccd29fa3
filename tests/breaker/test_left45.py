"""left45: faults a breaker found (estimate_moved drift and late events, system posix uids in the
user admin, control characters in host-action reasons)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.models import Workload, WorkloadEvent
from scheduler.services import do_submit_workload

# --- estimate_moved: judged from the estimate last told, not from the last run's ----------------


def _estimates_run(monkeypatch: Any, starts: dict[int, datetime], during: Any = None) -> None:
    """One estimate run whose forward simulation finds ``starts`` (workload id -> start); ``during``
    runs inside the simulation (a tick or a cancel while the run is under way)."""
    import scheduler.sim.estimate as sim_estimate
    from scheduler.estimates import store_estimates

    def forward(*_a: Any, **_k: Any) -> sim_estimate.Found:
        if during is not None:
            during()
        return sim_estimate.Found({str(pk): at.timestamp() for pk, at in starts.items()}, 1e12, frozenset())

    monkeypatch.setattr(sim_estimate, "forward_found", forward)
    cluster_id = Workload.objects.get(pk=next(iter(starts))).cluster_id
    store_estimates(cluster_id, datetime.now(UTC))


A = datetime(2030, 3, 3, 11, 0, tzinfo=UTC)


def test_a_start_sliding_under_an_hour_a_run_is_told_once_it_moved_an_hour(
    hosts, researcher, submit_kwargs, monkeypatch
):
    """docs/jobs.md: ``estimate_moved`` is "the estimated start moved by more than an hour from the
    one last told". Only one run's move was judged, so a start sliding 50 minutes at every run
    (hours in all) was never told."""
    w = do_submit_workload(researcher, **submit_kwargs())
    events = WorkloadEvent.objects.filter(workload=w, kind="estimate_moved")
    _estimates_run(monkeypatch, {w.pk: A})  # the first estimate: nothing to tell, the reference
    assert events.count() == 0
    _estimates_run(monkeypatch, {w.pk: A + timedelta(minutes=50)})
    assert events.count() == 0
    _estimates_run(monkeypatch, {w.pk: A + timedelta(minutes=100)})  # 100 min from the one given
    assert list(events.values_list("data", flat=True)) == [
        {"from": A.isoformat(), "to": (A + timedelta(minutes=100)).isoformat()}
    ]
    events.update(at=events.get().at - timedelta(hours=2))  # the hour is over
    _estimates_run(monkeypatch, {w.pk: A + timedelta(minutes=150)})  # 50 min from the one told
    assert events.count() == 1
    _estimates_run(monkeypatch, {w.pk: A + timedelta(minutes=200)})  # 100 min from it
    assert events.order_by("-id").first().data == {
        "from": (A + timedelta(minutes=100)).isoformat(),
        "to": (A + timedelta(minutes=200)).isoformat(),
    }


@pytest.mark.parametrize("what", ["started", "canceled"])
def test_no_estimate_moved_for_a_workload_that_left_pending_during_the_run(
    hosts, researcher, submit_kwargs, monkeypatch, what
):
    """A run takes up to ~3 s; a workload the tick started (or its owner cancelled) meanwhile got
    an ``estimate_moved`` event and notification for a start that no longer means anything."""
    from scheduler.models import Notification, NotificationSettings

    researcher.email = "r@example.org"
    researcher.save(update_fields=["email"])
    NotificationSettings.objects.create(user=researcher, email_kinds=["estimate_moved"])
    w = do_submit_workload(researcher, **submit_kwargs())
    _estimates_run(monkeypatch, {w.pk: A})
    state = Workload.State.STARTING if what == "started" else Workload.State.CANCELED

    def leaves() -> None:
        Workload.objects.filter(pk=w.pk).update(state=state, estimated_start=None)

    _estimates_run(monkeypatch, {w.pk: A + timedelta(hours=5)}, during=leaves)
    assert not WorkloadEvent.objects.filter(workload=w, kind="estimate_moved").exists()
    assert not Notification.objects.exists()
    assert Workload.objects.get(pk=w.pk).estimated_start is None


def test_an_estimate_run_costs_the_same_queries_at_200_pending_as_at_5(
    hosts, researcher, submit_kwargs, monkeypatch, django_assert_max_num_queries
):
    """The reference is read with the pending rows and written with the estimates, by bulk:
    no query per workload (200 pending, every one moving and told)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def counted(n: int) -> int:
        ws = [do_submit_workload(researcher, **submit_kwargs(name=f"w{n}-{i}")) for i in range(n)]
        _estimates_run(monkeypatch, {w.pk: A for w in ws})
        with CaptureQueriesContext(connection) as q:
            _estimates_run(monkeypatch, {w.pk: A + timedelta(hours=3) for w in ws})
        assert WorkloadEvent.objects.filter(workload__in=ws, kind="estimate_moved").count() == n
        Workload.objects.filter(pk__in=[w.pk for w in ws]).update(state=Workload.State.CANCELED)
        inserts = [x for x in q.captured_queries if x["sql"].startswith('INSERT INTO "scheduler_workloadevent"')]
        assert len(inserts) <= 2  # the events go by the database's batch (SQLite: 2 at 200)
        return len(q.captured_queries) - len(inserts)

    assert counted(200) == counted(5)


@pytest.fixture(autouse=True)
def _fresh_cache() -> Any:
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


# --- the user admin: a system uid (1..999) is refused up front, as uid 0 and system groups are --


@pytest.mark.django_db
@pytest.mark.parametrize("uid", ["1", "33", "999"])
def test_an_admin_set_system_uid_is_refused_unless_a_cluster_allows_root_workloads(admin_client, settings, uid):
    """The admin saved ``posix_uid`` 33 (www-data) without a word; every agent then refuses each
    start of the user's work (below ``isolation.nss_min_uid``, a system account: it needs both root
    consents), which the operator learns only from failed starts. Refused here with the rule, as
    uid 0 and the system groups are, while no cluster allows root workloads."""
    from accounts.models import User
    from scheduler.models import Cluster
    from tests.agent.test_agent_owner_identity import _admin_change, _identity

    user = User.objects.create(username="ivy", posix_uid=7000)
    answer = _admin_change(admin_client, user, posix_uid=uid, posix_gid="2000")
    assert answer.status_code == 200
    errors = answer.context["adminform"].form.errors.as_text()
    assert f"uid {uid}" in errors and "system account" in errors and "below 1000" in errors, errors
    assert "allow_root_workloads" in errors and "FAIRWAY_POSIX_MIN_UID" in errors, errors
    assert _identity(user) == (7000, None, [])

    assert _admin_change(admin_client, user, posix_uid="1000", posix_gid="2000").status_code == 302
    settings.FAIRWAY_POSIX_MIN_UID = 500  # a site whose hosts' UID_MIN is 500
    if int(uid) >= 500:
        assert _admin_change(admin_client, user, posix_uid=uid, posix_gid="2000").status_code == 302
        assert _identity(user)[0] == int(uid)
    settings.FAIRWAY_POSIX_MIN_UID = 1000
    Cluster.objects.create(name="trusted", allow_root_workloads=True)
    assert _admin_change(admin_client, user, posix_uid=uid, posix_gid="2000").status_code == 302
    assert _identity(user) == (int(uid), 2000, [])


# --- host-action reasons: one line, no control characters, on every surface ---------------------

FORGED = "disk swap\n2026-12-06 10:00:00 INFO scheduler.services: admin resumed host a100-2"


@pytest.mark.parametrize("reason", [FORGED, "late\r", "tab\there", "\x1b[31mred", "sep\u2028line"])
def test_a_host_action_reason_with_a_control_character_is_refused_by_the_api(admin_client_api, hosts, reason):
    """A reason went whole into the server's log line (a newline forges the next line) and into
    ``state_reason`` on the pages: refused with a 400 that says why, nothing changed."""
    from scheduler.models import Host, HostEvent

    events = HostEvent.objects.count()
    for action in ("cordon", "drain", "drain-now", "remove"):
        answer = admin_client_api.post(f"/api/v1/hosts/a100-1/{action}/", {"reason": reason}, format="json")
        assert answer.status_code == 400, (action, answer.content)
        assert "control characters" in answer.json()["reason"][0], answer.json()
    assert Host.objects.get(name="a100-1").state == Host.State.ACTIVE
    assert Host.objects.get(name="a100-1").removed_at is None
    assert HostEvent.objects.count() == events


def test_a_host_action_reason_with_a_newline_is_refused_by_the_page_the_cli_and_the_service(admin, hosts, monkeypatch):
    from django.test import Client

    from scheduler.models import Host, HostEvent
    from scheduler.services import HostError, do_remove_host, do_set_host_state
    from tests.cli.inprocess import run_cli

    events = HostEvent.objects.count()
    web = Client()
    web.force_login(admin)
    response = web.post("/hosts/a100-1/drain/", {"reason": FORGED}, follow=True)
    assert b"control characters" in response.content
    err = run_cli(monkeypatch, admin, "hosts", "cordon", "a100-1", "--reason", FORGED, expect=1)
    assert "control characters" in err, err
    host = Host.objects.get(name="a100-1")
    with pytest.raises(HostError, match="control characters"):
        do_set_host_state(admin, host, Host.State.CORDONED, "a\nb")
    with pytest.raises(HostError, match="control characters"):
        do_remove_host(admin, host, "a\x7fb")
    assert Host.objects.get(name="a100-1").state == Host.State.ACTIVE
    assert HostEvent.objects.count() == events
    # one line of any script stays a reason
    do_set_host_state(admin, host, Host.State.CORDONED, "Lüfter defekt — 風扇")
    assert Host.objects.get(name="a100-1").state == Host.State.CORDONED
