"""The server's log line for a refused agent connection named only the peer's address (ops35):
it now names the host and the reason when known, and never the token."""

from __future__ import annotations

import asyncio
import logging

import pytest
from channels.testing import WebsocketCommunicator

from config.asgi import application
from scheduler.models import Cluster
from scheduler.services import do_register_host, do_remove_host, do_revoke_host_token


async def _refused(headers: list[tuple[bytes, bytes]]) -> None:
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
    assert (await comm.connect())[0]
    out = await comm.receive_output(timeout=5)
    assert out["type"] == "websocket.close", out
    await comm.disconnect()


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "agent connection refused" in r.getMessage()]


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_refused_agent_connection_is_logged_with_its_host_and_reason_never_its_token(caplog):
    cluster = Cluster.objects.create(name="gw")
    gone, gone_token = do_register_host(cluster, "retired-7", [(0, "GPU-r7", "H100", 80000)])
    do_remove_host(None, gone)
    revoked, revoked_token = do_register_host(cluster, "h2", [(0, "GPU-h2", "H100", 80000)])
    do_revoke_host_token(None, revoked)
    caplog.set_level(logging.WARNING, logger="scheduler.consumers")

    asyncio.run(_refused([(b"authorization", f"Bearer {gone_token}".encode())]))
    asyncio.run(_refused([(b"authorization", f"Bearer {revoked_token}".encode())]))
    asyncio.run(_refused([]))

    removed, unknown, missing = _refusals(caplog)
    assert "host 'retired-7' was removed from the cluster" in removed, removed
    assert "unknown host token" in unknown and "revoked" in unknown, unknown
    assert "no host token" in missing, missing
    logged = caplog.text
    assert gone_token not in logged and revoked_token not in logged


async def _close_of(headers: list[tuple[bytes, bytes]]) -> dict:
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
    assert (await comm.connect())[0]
    out = await comm.receive_output(timeout=5)
    await comm.disconnect()
    return out


@pytest.mark.timeout(30)
@pytest.mark.django_db(transaction=True)
def test_a_removed_hosts_agent_is_told_why_in_the_close_frame():
    """tryout35: after ``fairway hosts remove``, the retired machine's agent logged only "the server
    refused the host token (rotated or revoked?)" every few seconds; the server knew it was removed
    and said so only in its own log. The close frame now carries the reason (no token in it)."""
    cluster = Cluster.objects.create(name="gw")
    gone, gone_token = do_register_host(cluster, "retired-7", [(0, "GPU-r7", "H100", 80000)])
    do_remove_host(None, gone)

    out = asyncio.run(_close_of([(b"authorization", f"Bearer {gone_token}".encode())]))

    # sec41: with its own code (4410), on which the agent stops instead of reconnecting
    assert out["type"] == "websocket.close" and out["code"] == 4410, out
    assert out.get("reason") == "host 'retired-7' was removed from the cluster", out
    unknown = asyncio.run(_close_of([(b"authorization", b"Bearer fwh_nope")]))
    assert "unknown host token" in unknown.get("reason", ""), unknown
