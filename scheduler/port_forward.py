"""``/ws/port-forward/``: one TCP connection to a port inside one's own running attempt
(``fairway port-forward ID 6006``: TensorBoard, Jupyter; ``kubectl port-forward``, ``ssh -L``
through a login node; docs/jobs.md, "Reach a port in a running workload").

An interactive session's path and checks (:class:`scheduler.exec_session.AttemptStreamConsumer`:
the API's token, the owner only, ``not_running``, ``host_offline``, ``throttled``, ``agent_too_old``),
one websocket per forwarded connection. The agent makes the connection from the attempt's
containment as its owner (``port_open``: docs/isolation.md).

Frames, client → server: the first, text, ``{"workload", "attempt", "rank", "port"}`` (with ``"check":
true``: its checks only, answered ``{"type": "checked", "attempt", "host"}``, then close 1000:
the CLI's word before it listens, the forward's one count in ``FAIRWAY_THROTTLE_EXEC``; ``"check":
"again"``: the same, not counted, the CLI's word once the workload is no longer running, cli46); then binary frames
of the connection's bytes (each at most :data:`~agent.protocol.PORT_CHUNK_BYTES`) and text
``{"type": "eof"}`` (the client's side ended: TCP's half-close). Server → client: text
``{"type": "started", "attempt", "host"}``; binary frames of the workload's side's bytes; text
``{"type": "ack", "bytes", "chunks"}`` (that much of what the client sent was written to the
connection in the workload), ``{"type": "eof"}`` (the workload's side ended); ``{"type": "end",
"timed_out"}`` last (then close 1000), or ``{"type": "error", "code", "message"}`` and close
4000 + the API's status (``port_refused``: nothing listens there); Redis or the database failing,
as an interactive session's (:mod:`scheduler.exec_session`), close 4503.

Flow control, both ways as the interactive session's output: at most ``EXEC_TTY_WINDOW`` bytes and
``EXEC_TTY_WINDOW_CHUNKS`` frames ahead of the other side's acknowledgements. A client that sends
more than that unacknowledged is ended (``input_overflow``), so nothing here or at the agent holds
more than a window per connection and direction. ``FAIRWAY_EXEC_IDLE_TIMEOUT`` seconds with
nothing in or out end it; so do its token's end, a reader that took nothing for
:data:`~scheduler.exec_session.READER_STALL_S`, and ``rank`` (a gang member's node rank, default 0)
reaches a port of that member's part. Each connection counts in ``FAIRWAY_EXEC_MAX_SESSIONS`` as
an interactive session does (:class:`~scheduler.exec_session.AttemptStreamConsumer`).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from typing import Any

from django.conf import settings

from agent.protocol import EXEC_TTY_WINDOW, EXEC_TTY_WINDOW_CHUNKS, PORT_CHUNK_BYTES
from config.errors import ServiceError
from scheduler import execs
from scheduler.exec_session import AttemptStreamConsumer, frame_json
from scheduler.gateway import agent_db

CHECK_VALUES = 'check is true (the checks only, counted), "again" (the checks only, not counted) or false.'
"""The refusal of a first frame's ``check`` of another value (brk48)."""


@agent_db
def _port_target(user: Any, data: Any, counted: bool) -> execs.PortTarget:
    return execs.port_target(user, data, counted)


class PortForwardConsumer(AttemptStreamConsumer):
    """One forwarded connection's websocket at ``/ws/port-forward/`` (module docstring)."""

    WHAT = "forwarded connection"
    NOUN = "connection"
    PORT = True

    async def connect(self) -> None:
        self.unacked = 0  # bytes of the client's sent to the agent, not yet written there
        self.unacked_chunks = 0
        await super().connect()

    async def check(self, data: Any) -> execs.PortTarget:
        check = data.pop("check", False) if isinstance(data, dict) else False
        # true: the forward's check before it listens, its one count in FAIRWAY_THROTTLE_EXEC;
        # "again": a later one (why it ended: cli46), not counted, as its connections are not
        if not (check is True or check is False or check == "again"):
            # brk48: "yes", 1, null ... opened a connection where the frame asked for its checks only
            raise ServiceError("invalid_check", "check", CHECK_VALUES, status=400)
        self.check_only = check is True or check == "again"
        return await _port_target(self.user, data, check is True)

    async def checked_only(self, target: execs.PortTarget) -> bool:
        if not self.check_only:
            return False
        self.ended = True
        with contextlib.suppress(Exception):
            await self.send(
                text_data=json.dumps({"type": "checked", "attempt": target.number, "host": target.host_name})
            )
            await self.close(code=1000)
        return True

    def open_event(self, target: execs.PortTarget) -> dict[str, Any]:
        return {
            "type": "port.open",
            "attempt_id": target.wire_id,
            "port": target.port,
            "idle_s": int(settings.FAIRWAY_EXEC_IDLE_TIMEOUT),
        }

    def done_frame(self, event: dict[str, Any]) -> dict[str, Any]:
        return {"type": "end", "timed_out": bool(event.get("timed_out"))}

    def agent_refusal(self, error: str, message: str) -> ServiceError:
        target = self.target
        if error == "exec_port_refused" and isinstance(target, execs.PortTarget):
            words = execs.port_refused_words(target.port, target.workload_id, message or "connection refused")
            return ServiceError("port_refused", None, words, status=409)
        refusal = super().agent_refusal(error, message)
        if refusal.code == "exec_failed" and isinstance(target, execs.PortTarget):  # not "the command"
            words = f"No connection to port {target.port} could be made in attempt {target.number}: {message}"
            return ServiceError("exec_failed", None, words, status=409)
        return refusal

    async def relay_in(self, text_data: str | None, bytes_data: bytes | None) -> None:
        if bytes_data is None:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                if frame_json(text_data).get("type") == "eof":
                    await self._to_agent({"type": "port.data", "data": "", "eof": True})
            return  # not one we know: ignored
        if len(bytes_data) > PORT_CHUNK_BYTES:
            await self._end_with("input_too_large", f"A frame is at most {PORT_CHUNK_BYTES} bytes.", 400)
            return
        if not bytes_data:
            return
        if self.unacked + len(bytes_data) > EXEC_TTY_WINDOW or self.unacked_chunks >= EXEC_TTY_WINDOW_CHUNKS:
            message = f"More than {EXEC_TTY_WINDOW} bytes (or {EXEC_TTY_WINDOW_CHUNKS} frames) sent ahead of the acks."
            await self._end_with("input_overflow", message, 409)
            return
        self.unacked += len(bytes_data)
        self.unacked_chunks += 1
        await self._to_agent({"type": "port.data", "data": base64.b64encode(bytes_data).decode(), "eof": False})

    # --- from the agent's connection (scheduler.consumers.AgentConsumer) ---

    async def port_data(self, event: dict[str, Any]) -> None:
        """The workload's side's bytes (base64, as the agent sent them), or its end (``eof``)."""
        if self.ended:
            return
        if event.get("eof"):
            await self._to_reader(text_data=json.dumps({"type": "eof"}))
            return
        try:
            data = base64.b64decode(str(event["data"]), validate=True)
        except binascii.Error:
            await self._end_with("exec_failed", execs.NOT_BASE64, 409)
            return
        if not await self._to_reader(bytes_data=data):  # waits while the reader's socket buffer is full
            return
        await self._to_agent({"type": "exec.tty.ack", "bytes": len(data), "chunks": 1})

    async def port_ack(self, event: dict[str, Any]) -> None:
        """The agent wrote that much of the client's to the connection: the client may send more."""
        if self.ended:
            return
        done, chunks = int(event["bytes"]), int(event["chunks"])
        self.unacked, self.unacked_chunks = max(0, self.unacked - done), max(0, self.unacked_chunks - chunks)
        await self._to_reader(text_data=json.dumps({"type": "ack", "bytes": done, "chunks": chunks}))
