"""brk59: ``POST workloads/{id}/exec/`` when the channel layer (Redis) is down: the command was
never sent, yet the answer was 504 ``exec_timeout`` "the agent did not answer in time" (the CLI:
"its agent did not answer within 60 s", exit 124), at once."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

DEAD_REDIS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:9/0", "socket_timeout": 2}]},  # port 9: nothing
    }
}


@pytest.fixture
def running(started_workload: tuple[Any, Any]) -> Any:
    return started_workload[0]


def test_exec_with_the_channel_layer_down_says_so_not_that_the_agent_was_silent(running, researcher_client) -> None:
    with override_settings(CHANNEL_LAYERS=DEAD_REDIS):
        got = researcher_client.post(f"/api/v1/workloads/{running.pk}/exec/", {"command": ["id"]}, format="json")
    assert got.status_code == 503, got.json()
    assert got.json()["code"] == "exec_unavailable"
    assert "did not run" in got.json()["detail"] and "did not answer" not in got.json()["detail"]


def test_one_person_cannot_hold_every_exec_slot_of_a_web_process(
    running, researcher, researcher_client, monkeypatch, settings
):
    """A web process waits on a quarter of its request threads' commands (3 by default): one
    person's three ``fairway exec ID -- sleep 600`` answered every other person ``exec_busy`` for
    ten minutes. One person holds at most half of them (at least 1)."""
    from scheduler import execs

    settings.FAIRWAY_WEB_SYNC_THREADS = 12  # the default pool's: 3 slots
    monkeypatch.setattr(
        execs.gateway,
        "request_exec",
        lambda *a: {"exit_code": 0, "stdout": "", "stderr": "", "truncated": False, "timed_out": False},
    )
    cap = execs.exec_slots_per_user()
    assert (execs.exec_slots(), cap) == (3, 1)
    monkeypatch.setattr(execs, "_in_flight", cap)
    monkeypatch.setattr(execs, "_in_flight_by_user", {researcher.pk: cap})
    got = researcher_client.post(f"/api/v1/workloads/{running.pk}/exec/", {"command": ["id"]}, format="json")
    assert (got.status_code, got.json()["code"]) == (429, "exec_busy")
    assert "as many as one person may" in got.json()["detail"]
    monkeypatch.setattr(execs, "_in_flight_by_user", {researcher.pk + 1000: cap})  # someone else's
    got = researcher_client.post(f"/api/v1/workloads/{running.pk}/exec/", {"command": ["id"]}, format="json")
    assert got.status_code == 200, got.json()
    assert execs._in_flight == cap and execs._in_flight_by_user == {researcher.pk + 1000: cap}  # given back
