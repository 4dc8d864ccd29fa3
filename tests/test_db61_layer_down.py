"""db61: the channel layer (Redis) going away (a restart; simulated by a port where nothing
listens): what the agents' websocket and ``exec`` say: a clear close and one log line, never a
traceback."""

from __future__ import annotations

import asyncio
import logging

import pytest
from channels.testing import WebsocketCommunicator
from django.test import override_settings

from config.asgi import application
from scheduler.models import Cluster
from scheduler.services import do_register_host

DEAD_REDIS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:9/0", "socket_timeout": 2}]},  # port 9: nothing
    }
}


async def _close_of(headers: list[tuple[bytes, bytes]]) -> dict:
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
    connected, _ = await comm.connect(timeout=10)
    assert connected
    out = await comm.receive_output(timeout=10)
    await comm.disconnect()
    return out


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_an_agent_connecting_while_redis_is_down_is_told_to_come_back(caplog):
    cluster = Cluster.objects.create(name="gw")
    _host, token = do_register_host(cluster, "h1", [(0, "GPU-h1", "H100", 80000)])
    caplog.set_level(logging.INFO)
    with override_settings(CHANNEL_LAYERS=DEAD_REDIS):
        from channels.layers import channel_layers

        channel_layers.backends.clear()
        try:
            out = asyncio.run(_close_of([(b"authorization", f"Bearer {token}".encode())]))
        finally:
            channel_layers.backends.clear()
    assert out["type"] == "websocket.close" and out["code"] == 1013, out  # try again later
    assert "Redis" in out.get("reason", ""), out
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.exc_info is None for r in warned), [(r.name, r.getMessage()) for r in warned]
    assert any("h1" in r.getMessage() and "Redis" in r.getMessage() for r in warned), [r.getMessage() for r in warned]


class AnswerLostLayer:
    """A channel layer whose Redis goes away once the command was sent: the send succeeds, the
    read of the answer fails (what a Redis restart does to an ``exec`` waiting for its answer)."""

    def __init__(self, **_config: object) -> None:
        self.sent: list[dict] = []

    async def new_channel(self, prefix: str = "specific.") -> str:
        return prefix + "db61"

    async def group_send(self, group: str, message: dict) -> None:
        self.sent.append(message)

    async def receive(self, channel: str) -> dict:
        import redis.exceptions

        raise redis.exceptions.ConnectionError("Connection closed by server.")


def test_an_exec_whose_answer_redis_lost_says_it_may_have_run(caplog):
    from scheduler import gateway
    from scheduler.execs import agent_refusal

    layer = {"default": {"BACKEND": f"{__name__}.AnswerLostLayer"}}
    caplog.set_level(logging.INFO)
    with override_settings(CHANNEL_LAYERS=layer):
        reply = gateway.request_exec(7, 70, ["id"], 5, 100)
    assert reply == {"error": "answer_lost", "message": "the channel layer failed: ConnectionError"}, reply
    refusal = agent_refusal(reply["error"], reply["message"], "h1", 1)
    assert (refusal.status, refusal.code) == (503, "exec_unavailable")
    assert "may have run" in refusal.message and "did not answer" not in refusal.message, refusal.message
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and warned[0].exc_info is None, [r.getMessage() for r in warned]
    assert "answer was lost" in warned[0].getMessage()
