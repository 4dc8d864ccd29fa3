"""The web UI's state changes × personas (session login): the same rules as the API, and on a
denial nothing changed. Anonymous visitors are sent to the login page."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.api.test_permissions import state_of_the_world, world  # noqa: F401 -- the fixture is shared

WEB_USERS = ["admin", "program", "project", "owner", "outsider", "anonymous"]


def _client(world, persona) -> Client:  # noqa: F811 -- the fixture's value
    client = Client()
    if persona != "anonymous":
        client.force_login(world["users"][persona])
    return client


@pytest.mark.parametrize("persona", WEB_USERS)
def test_cancel_from_the_web(world, persona):  # noqa: F811
    before = state_of_the_world()
    response = _client(world, persona).post(f"/workloads/{world['workload'].pk}/cancel/")
    world["workload"].refresh_from_db()
    if persona in {"admin", "owner"}:
        assert world["workload"].state == "canceled"
    else:
        assert response.status_code == 302
        assert state_of_the_world() == before


@pytest.mark.parametrize("persona", WEB_USERS)
@pytest.mark.parametrize("verb", ["cordon", "drain", "drain-now", "resume"])
def test_host_actions_from_the_web(world, persona, verb, caplog):  # noqa: F811
    """break27: a non-admin got a bare "403 Forbidden" and a traceback in the log; now the cluster
    page with the reason, and one warning line."""
    before = state_of_the_world()
    client = _client(world, persona)
    response = client.post(f"/hosts/a100-1/{verb}/", {"reason": "x"})
    assert response.status_code == 302
    assert not [r for r in caplog.records if r.exc_info]
    if persona not in {"admin", "anonymous"}:
        assert state_of_the_world() == before
        page = client.get(response["Location"])
        assert b"a100-1: only admins with the change_host permission cordon, drain or resume hosts." in page.content
        assert [r.levelname for r in caplog.records if "refused" in r.getMessage()] == ["WARNING"]
    elif persona == "anonymous":
        assert state_of_the_world() == before


@pytest.mark.parametrize("persona", WEB_USERS)
def test_revoking_someone_elses_token_from_the_web(world, persona):  # noqa: F811
    before = state_of_the_world()
    _client(world, persona).post("/tokens/", {"revoke": world["ids"]["owner_token"]})
    after = state_of_the_world()
    if persona == "owner":
        assert len(after["tokens"]) == len(before["tokens"]) - 1
    else:
        assert after == before


@pytest.mark.parametrize("persona", WEB_USERS)
def test_logs_partial_only_for_members(world, persona):  # noqa: F811
    response = _client(world, persona).get(f"/workloads/{world['workload'].pk}/logs/")
    if persona == "anonymous":
        assert response.status_code == 302
    elif persona == "outsider":
        assert b"owner and members of its budget only" in response.content
    else:
        assert b"This workload has no attempt yet." in response.content
