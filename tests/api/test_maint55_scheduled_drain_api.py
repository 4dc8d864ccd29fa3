"""maint55: ``POST hosts/{name}/drain/`` (and ``drain-now/``) with ``at`` or ``in`` schedules the
drain; ``cancel-drain/`` and ``resume/`` cancel it; the host shows ``scheduled_drain``."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from scheduler.models import Host, HostEvent


def _at(hours: float) -> str:
    return (timezone.now() + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_an_admin_schedules_a_drain_and_the_host_shows_it(admin_client_api, researcher_client, admin, hosts):
    at = _at(3)
    response = admin_client_api.post(
        "/api/v1/hosts/a100-1/drain-now/", {"at": at, "reason": "BIOS update"}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["state"] == "active"  # not yet
    shown = body["scheduled_drain"]
    assert datetime.fromisoformat(shown["at"]) == datetime.fromisoformat(at.replace("Z", "+00:00"))
    assert (shown["drain_now"], shown["by"], shown["reason"]) == (True, "admin", "BIOS update")
    assert shown["summary"].startswith("drain now scheduled at ")
    # everybody reads it, on the list and the host
    listed = {h["name"]: h for h in researcher_client.get("/api/v1/hosts/").json()}
    assert listed["a100-1"]["scheduled_drain"]["by"] == "admin"
    assert listed["a100-2"]["scheduled_drain"] is None

    later = admin_client_api.post("/api/v1/hosts/a100-1/drain/", {"in": "1d 2h"}, format="json").json()
    assert later["scheduled_drain"]["drain_now"] is False  # replaced
    got = datetime.fromisoformat(later["scheduled_drain"]["at"])
    assert abs((got - timezone.now()) - timedelta(hours=26)) < timedelta(minutes=1)

    cancelled = admin_client_api.post("/api/v1/hosts/a100-1/cancel-drain/", {"reason": "moved"}, format="json")
    assert cancelled.status_code == 200 and cancelled.json()["scheduled_drain"] is None
    assert cancelled.json()["scheduled_drain_change"].endswith(" is canceled")  # try62: said nowhere
    again = admin_client_api.post("/api/v1/hosts/a100-1/cancel-drain/", {}, format="json")
    assert (again.status_code, again.json()["scheduled_drain"]) == (200, None)  # a no-op (left59)
    assert again.json()["scheduled_drain_change"] is None

    admin_client_api.post("/api/v1/hosts/a100-1/drain/", {"at": at}, format="json")
    resumed = admin_client_api.post("/api/v1/hosts/a100-1/resume/", {}, format="json")
    assert resumed.status_code == 200 and resumed.json()["scheduled_drain"] is None
    kinds = list(HostEvent.objects.filter(host__name="a100-1").values_list("kind", "actor"))
    assert [k for k, _a in kinds if k.startswith("drain_")] == [
        "drain_scheduled",
        "drain_scheduled",
        "drain_unscheduled",
        "drain_scheduled",
        "drain_unscheduled",
    ]
    assert {a for k, a in kinds if k.startswith("drain_")} == {admin.pk}


@pytest.mark.parametrize("verb", ["drain", "drain-now", "cancel-drain"])
def test_only_admins_schedule_or_cancel(researcher_client, hosts, verb):
    response = researcher_client.post(f"/api/v1/hosts/a100-1/{verb}/", {"at": _at(2)}, format="json")
    assert response.status_code == 403
    assert Host.objects.get(name="a100-1").drain_at is None
    assert not HostEvent.objects.filter(kind__startswith="drain_").exists()


@pytest.mark.parametrize(
    ("verb", "body", "field", "words"),
    [
        ("drain", {"at": "next tuesday"}, "at", "ISO 8601"),
        ("drain", {"at": "2020-01-01T00:00Z"}, "at", "is past"),
        ("drain", {"at": "2099-01-01T00:00Z"}, "at", "at most 366 days"),
        ("drain", {"at": "2099-01-01T00:00"}, "at", "names its zone"),
        ("drain", {"at": 5}, "at", "ISO 8601"),
        ("drain", {"at": None}, "at", "ISO 8601"),  # not a drain at once
        ("drain-now", {"in": None}, "in", "duration"),
        ("drain-now", {"in": "soon"}, "in", "duration"),
        ("drain-now", {"in": "0"}, "in", "is past"),
        ("drain-now", {"in": "99999999999999d"}, "in", "at most 366 days"),
        ("drain", {"at": "2099-01-01T00:00Z", "in": "2h"}, "at", "not both"),
        ("cordon", {"at": "2099-01-01T00:00Z"}, "at", "Unknown field"),
        ("resume", {"in": "2h"}, "in", "Unknown field"),
        ("drain", {"at": "2099-01-01T00:00Z", "when": 1}, "when", "Unknown field"),
    ],
)
def test_a_bad_schedule_is_a_400_and_changes_nothing(admin_client_api, hosts, verb, body, field, words):
    response = admin_client_api.post(f"/api/v1/hosts/a100-1/{verb}/", body, format="json")
    assert response.status_code == 400, response.json()
    assert words in str(response.json()), response.json()
    assert field in str(response.json())
    host = Host.objects.get(name="a100-1")
    assert (host.state, host.drain_at) == ("active", None)
    assert not HostEvent.objects.filter(host=host).exclude(kind="registered").exists()


def test_a_drain_that_would_change_nothing_is_a_409_and_a_removed_host_a_404(admin_client_api, admin, hosts):
    from scheduler.services import do_remove_host, do_set_host_state

    do_set_host_state(admin, hosts["a100-1"], Host.State.DRAINING)
    response = admin_client_api.post("/api/v1/hosts/a100-1/drain/", {"at": _at(1)}, format="json")
    assert (response.status_code, response.json()["code"]) == (409, "invalid_state")
    assert "draining already" in response.json()["detail"]
    do_remove_host(admin, hosts["a100-2"])
    response = admin_client_api.post("/api/v1/hosts/a100-2/drain/", {"at": _at(1)}, format="json")
    assert response.status_code == 404


def test_a_drain_in_a_duration_is_one_instant_on_every_surface(admin_client_api, hosts):
    """try59: ``fairway hosts drain gpu1 --in 1h`` showed "drain scheduled at 02:48:08 UTC" (its
    instant, 02:48:07.69, rounded up as every instant shown) while the pending reason said "drains
    at 02:48:07 UTC" (the policy's whole seconds, floored): a drain's time is kept in whole seconds,
    so both read the same second."""
    from fairway_cli.numbers import instant_text
    from scheduler.snapshot import epoch

    at = (timezone.now() + timedelta(hours=1)).replace(microsecond=690000).isoformat()
    for body in ({"in": "1h"}, {"at": at}):
        admin_client_api.post("/api/v1/hosts/a100-1/drain/", body, format="json")
        drain_at = Host.objects.get(name="a100-1").drain_at
        assert drain_at is not None and instant_text(drain_at) == instant_text(epoch(drain_at)), body
