"""brk42: a breaker round on newer, less probed surfaces (host actions outside the admin, the
CLI's spec beside its flags)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import User
from accounts.services import create_api_token
from scheduler.models import Host, HostEvent
from scheduler.services import HOST_OPERATOR_REFUSAL

HOST_VERBS = ["cordon", "drain", "drain-now", "resume"]


def _staff(username: str, *codenames: str) -> User:
    """A staff member (the admin site) given view permissions and ``codenames`` besides."""
    user = User.objects.create_user(username=username, password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__startswith="view_") | Permission.objects.filter(codename__in=codenames)
    )
    return user


def _api(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_api_token(user)[1]}")
    return client


def _web(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _ready(host: Host, verb: str) -> None:
    """``host`` in a state the action applies to (resume: a cordoned host)."""
    if verb == "resume":
        Host.objects.filter(pk=host.pk).update(state=Host.State.CORDONED)


def _unchanged(host: Host, before: Any) -> None:
    host.refresh_from_db()
    assert (host.state, host.drain_now, host.removed_at) == before
    assert not HostEvent.objects.filter(host=host, actor__username="auditor").exists()


@pytest.mark.parametrize("verb", [*HOST_VERBS, "remove"])
def test_a_view_only_staff_member_cannot_act_on_hosts_through_the_api(hosts, verb):
    """deploy.md: cordon, drain, resume and removal need ``change_host``; brk40 held the admin's
    actions to it, while ``POST /api/v1/hosts/NAME/drain-now/`` (``fairway hosts drain``) took any
    staff member: a view-only auditor stopped every protected attempt of a host, or removed it."""
    host = hosts["a100-1"]
    if verb == "remove":  # removal is refused on a busy host only: this one is idle
        Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINED)
    _ready(host, verb)
    host.refresh_from_db()
    before = (host.state, host.drain_now, host.removed_at)
    response = _api(_staff("auditor")).post(f"/api/v1/hosts/{host.name}/{verb}/", {}, format="json")
    assert response.status_code == 403, response.content
    assert response.json()["code"] == "forbidden"
    assert response.json()["detail"] == HOST_OPERATOR_REFUSAL
    _unchanged(host, before)


@pytest.mark.parametrize("verb", HOST_VERBS)
def test_a_view_only_staff_member_cannot_act_on_hosts_on_the_clusters_page(hosts, verb):
    host = hosts["a100-1"]
    _ready(host, verb)
    host.refresh_from_db()
    before = (host.state, host.drain_now, host.removed_at)
    client = _web(_staff("auditor"))
    response = client.post(f"/hosts/{host.name}/{verb}/", {"reason": "x"}, follow=True)
    assert response.status_code == 200
    assert "only admins with the change_host permission cordon, drain or resume hosts" in response.content.decode()
    _unchanged(host, before)
    page = client.get(f"/clusters/{host.cluster.name}/").content.decode()
    assert "web-host-action" not in page and f"/hosts/{host.name}/" not in page  # no buttons offered


@pytest.mark.parametrize("verb", HOST_VERBS)
def test_a_staff_member_with_change_host_still_acts_on_both(hosts, verb):
    host = hosts["a100-1"]
    operator = _staff("operator", "change_host")
    _ready(host, verb)
    assert _api(operator).post(f"/api/v1/hosts/{host.name}/{verb}/", {}, format="json").status_code == 200
    other = hosts["a100-2"]
    _ready(other, verb)
    client = _web(operator)
    assert f"/hosts/{other.name}/" in client.get(f"/clusters/{other.cluster.name}/").content.decode()
    client.post(f"/hosts/{other.name}/{verb}/", {"reason": "x"})
    other.refresh_from_db()
    assert other.state == {"cordon": "cordoned", "drain": "draining", "drain-now": "draining", "resume": "active"}[verb]
