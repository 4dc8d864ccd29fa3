"""brk63: a websocket to an attempt (``/ws/exec/``, ``/ws/port-forward/``) opened with a valid
token and then silent held its connection for ever: nothing bounded the wait for its first frame,
and such a socket counted in no cap (``FAIRWAY_EXEC_MAX_SESSIONS`` counts sessions asked for), so
one person could hold any number of them on a web process. One that sends no first frame within
:data:`scheduler.exec_session.FIRST_FRAME_S` is refused ``first_frame_timeout`` (close 4408)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.db import aclose_old_connections
from channels.testing import WebsocketCommunicator

from accounts.services import create_api_token
from config.asgi import application
from scheduler import exec_session

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.mark.parametrize("path", ["/ws/exec/", "/ws/port-forward/"])
def test_a_websocket_silent_before_its_first_frame_is_closed(researcher: Any, monkeypatch: Any, path: str) -> None:
    monkeypatch.setattr(exec_session, "FIRST_FRAME_S", 0.3)
    token = create_api_token(researcher)[1]

    async def run() -> tuple[dict[str, Any], int, int]:
        try:
            comm = WebsocketCommunicator(application, path, headers=[(b"authorization", f"Token {token}".encode())])
            assert (await comm.connect())[0]
            frame = json.loads(await comm.receive_from(timeout=10))
            closed = await comm.receive_output(timeout=10)
            await comm.disconnect()
            return frame, closed.get("code"), exec_session.sessions_held()
        finally:
            await aclose_old_connections()

    frame, code, held = asyncio.run(run())
    assert (frame["type"], frame["code"], code) == ("error", "first_frame_timeout", 4408)
    assert "first frame" in frame["message"]
    assert held == 0
