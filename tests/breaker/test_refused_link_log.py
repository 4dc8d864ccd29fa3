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
