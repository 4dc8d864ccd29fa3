"""``/ws/exec/``: an interactive session in one's own running attempt (``fairway exec -it ID -- bash``;
``kubectl exec -it``, ``srun --pty --overlap``; docs/jobs.md, "Run a command in a running workload").

The API's token (``Authorization: Token``; a browser cannot set that header on a websocket, so no
other site can open one with a visitor's session) and the one-shot exec's checks
(:func:`scheduler.execs.tty_target`: the owner only, ``not_running``, ``host_offline``,
``throttled``). Then the one-shot exec's path through the channel layer: ``exec.tty.open`` to the
host's group, where the agent's connection (:class:`scheduler.consumers.AgentConsumer`) sends the
agent an ``exec_tty`` and answers this connection its channel and the session's id; from then on
input, resizes, acknowledgements and the close go to that channel, output and the end come back.

Frames, client → server: the first, text, ``{"workload", "attempt", "command", "tty": true,
"rows", "cols"}``; then binary frames of input (bytes for the terminal) and text frames
``{"type": "resize", "rows", "cols"}``. Server → client: text ``{"type": "started", "attempt",
"host"}``; binary frames of output; text ``{"type": "exit", "exit_code", "timed_out"}`` (and
``message``: why the agent ended it) last (then close 1000), or ``{"type": "error", "code",
"message"}`` and close 4000 + the API's status, its reason ``{"retry_after": N}`` where the API's
answer of the refusal has ``Retry-After: N`` (``throttled``, ``database_unavailable``; ws47).

The backing services failing (ws63) are refusals too, logged in one line without a traceback: the
channel layer (Redis) unreachable, before the agent's connection took it, is the one-shot exec's
503 ``exec_unavailable`` (:func:`scheduler.execs.layer_unavailable`), after, the same code saying
the session was ended; the database lost while it opens (its token's or its attempt's lookup) is
the API's 503 ``database_unavailable`` (``database_busy``: no connection to be had;
:func:`scheduler.gateway.run_in_db_thread`); either closes 4503. The connection's channel-layer read
is ended by a message to its own channel, never cancelled (:mod:`scheduler.layer_read`; stream63: a
cancelled read could lose the session's close on its way to the agent's connection).

Flow control: the agent sends at most ``EXEC_TTY_WINDOW`` bytes (and ``EXEC_TTY_WINDOW_CHUNKS``
messages) of output ahead of the acknowledgements this connection sends once each is written to
the reader's socket (uvicorn's send waits while the socket's buffer is full), so a reader that does
not read holds that much, never more. Input is held to the same window, piped (acknowledged by the
agent once the command took it) and on a terminal (flow49: acknowledged by the agent's connection
once relayed to the agent, where it says so at the open; the reader's ``started`` then says
``"window": true``): a flood of a terminal's input filled the agent connection's channel-layer
buffer, where channels-redis drops the oldest messages past its capacity, that host's other pushes
among them. The reader leaving closes the session (the agent hangs its
terminal up and kills its process tree); the attempt ending, the agent's connection ending and
``FAIRWAY_EXEC_IDLE_TIMEOUT`` seconds with nothing in or out end it too, as does its token's end (a
logout, the user's deactivation; checked every :data:`TOKEN_RECHECK_S`).

A reader gone without a word (exl61): an idle one's socket is closed by the web process's keepalive
(uvicorn's pings, ``scheduler.management.commands.serve``: within 3 minutes); one whose socket's
buffers are full never answers, and the keepalive's close waits on those buffers, so a send that
waited :data:`READER_STALL_S` ends the session. A web process holds at most
``FAIRWAY_EXEC_MAX_SESSIONS`` sessions, one person at most half (:func:`agent.protocol.one_persons_share`),
and a socket silent before its first frame for :data:`FIRST_FRAME_S` is refused (brk63);
``fairway port-forward``'s connections (:mod:`scheduler.port_forward`) count in the same, and share
the token's recheck, the stalled reader's end and the abandon of one whose id had not come.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import contextlib
import json
import logging
from typing import Any

from channels.consumer import get_handler_name
from django.conf import settings

from agent.protocol import (
    EXEC_CHUNK_BYTES,
    EXEC_TTY_WINDOW,
    EXEC_TTY_WINDOW_CHUNKS,
    STREAM_RETRY_AFTER_KEY,
    one_persons_share,
)
from config.errors import ServiceError, retry_after_s
from scheduler import execs, gateway
from scheduler.gateway import agent_db
from scheduler.layer_read import LayerReadConsumer
from scheduler.management.commands.serve import WS_PING_INTERVAL_S, WS_PING_TIMEOUT_S

logger = logging.getLogger(__name__)

OPEN_WAIT_S = 10.0
"""How long a session waits for the agent's connection to take it before ``host_offline``."""
FIRST_FRAME_S = 30.0
"""How long a websocket with a valid token may stay silent before its first frame: then it is refused
``first_frame_timeout`` (close 4408). The CLI sends it at once; a socket that never did was held
for ever and counted in no cap (brk63)."""
TOKEN_RECHECK_S = 60.0
"""How often a session's token is checked again: a logout (its token deleted), an expiry or the
user's deactivation ends the session within this (brk61: it went on until the idle timeout)."""
MAX_FRAME_BYTES = 64 * 1024
"""Largest input frame taken (a terminal's input comes a few bytes at a time)."""
READER_STALL_S = WS_PING_INTERVAL_S + WS_PING_TIMEOUT_S
"""How long a send of output to the reader may wait (its socket's buffers full) before the session
ends: the keepalive's bound on an idle reader gone (180 s), so an abandoned session ends within it
either way."""

_held: dict[int, int] = {}
"""Sessions and forwarded connections this web process holds, by user (``FAIRWAY_EXEC_MAX_SESSIONS``)."""


def sessions_held() -> int:
    """Interactive sessions and forwarded connections this web process holds now."""
    return sum(_held.values())


def _take_session(user_id: int) -> None:
    """Count a session (or forwarded connection, one count) of ``user_id``'s: 429 ``exec_busy``
    past ``FAIRWAY_EXEC_MAX_SESSIONS`` or, of them, one person's share (as the one-shot commands'
    slots, ``scheduler.execs``)."""
    cap = int(settings.FAIRWAY_EXEC_MAX_SESSIONS)
    mine = _held.get(user_id, 0)
    if mine >= one_persons_share(cap):
        raise ServiceError(
            "exec_busy",
            None,
            f"You hold {mine} interactive session(s) and forwarded connection(s) on this server already, "
            "as many as one person may at once; "
            "try again when one has ended.",
            status=429,
        )
    if sessions_held() >= cap:
        raise ServiceError(
            "exec_busy",
            None,
            f"This server holds {cap} interactive session(s) and forwarded connection(s), as many as it may at once; "
            "try again shortly.",
            status=429,
        )
    _held[user_id] = mine + 1


def refusal_close_reason(exc: ServiceError) -> str | None:
    """The close reason of refusal ``exc``: ``{"retry_after": N}``, N the seconds of the API's
    ``Retry-After`` of the same refusal (:func:`config.errors.retry_after_s`: a 429 ``throttled``'s,
    a 503 ``database_unavailable``'s), None (no reason) where that answer has none. The CLI reads
    it as it reads the header (``fairway_cli.session.close_retry_after``); under 30 bytes, well
    inside a close frame's 123 (RFC 6455 §5.5)."""
    seconds = retry_after_s(exc)
    return json.dumps({STREAM_RETRY_AFTER_KEY: seconds}, separators=(",", ":")) if seconds else None


def _give_back_session(user_id: int) -> None:
    if (left := _held.pop(user_id, 1) - 1) > 0:
        _held[user_id] = left


@agent_db  # the database lost: its refusal, 503 database_unavailable (gateway.run_in_db_thread)
def _token_user(header: str) -> Any:
    return execs.token_user(header)


@agent_db
def _tty_target(user: Any, data: Any) -> execs.TtyTarget:
    return execs.tty_target(user, data)


def frame_json(text: str | None) -> Any:
    """A text frame's JSON, or None where it holds none: not JSON, or nested deeper than Python
    reads (``[[[…]]]``: RecursionError, no ValueError; brk46: it ended the consumer unclosed, its
    session running on at its host and counted here). The one reading of the streams' frames."""
    try:
        return json.loads(text or "")
    except (ValueError, RecursionError):
        return None


def _authorization(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            return str(value.decode("latin-1").strip())
    return ""


class AttemptStreamConsumer(LayerReadConsumer):
    """What an interactive session's websocket (``/ws/exec/``) and a forwarded connection's
    (``/ws/port-forward/``, :mod:`scheduler.port_forward`) share: the token, the first frame's
    checks (:meth:`check`), the open through the host's group (:meth:`open_event`), the agent's
    connection taking it (``exec.tty.opened``) or not (``host_offline``), refusals, the relay to
    that connection, the close when the reader leaves, the end (``exec.tty.end``); and what ends
    either early: its token's end (:meth:`_recheck_token`), a reader gone or stalled
    (:meth:`_to_reader`), one left before its id came (:meth:`_abandon`). Both count in
    ``FAIRWAY_EXEC_MAX_SESSIONS`` (one count: what it bounds is this process's websockets to
    attempts, the same for each; a forwarded connection's checks-only frame is not counted)."""

    WHAT = "interactive session"
    """What it is, in logs and refusals."""
    NOUN = "session"
    PORT = False
    """A forwarded connection (its refusals speak of a connection, not a command)."""
    READ_OF = "exec or port-forward connection"
    accepted = False
    layer_error: BaseException | None = None
    """The channel layer's failure, once its read failed (:meth:`layer_read_failed`)."""

    async def layer_read_failed(self, exc: BaseException) -> None:
        """This connection's channel-layer read failed (:class:`~scheduler.layer_read.LayerReadConsumer`):
        the layer (Redis) cannot be reached (ws63: the failure ended the consumer with a traceback,
        the socket closed 1011 or its handshake refused); said now, or by :meth:`connect` once
        the socket is accepted."""
        self.layer_error = exc
        if self.accepted:
            await self._layer_lost(exc)

    async def check(self, data: Any) -> Any:
        """The first frame checked for ``self.user``: a target with ``host_id``, ``host_name``
        (its gang member's), ``number`` (the attempt's), ``wire_id`` and ``workload_id``;
        ServiceError otherwise."""
        raise NotImplementedError

    def open_event(self, target: Any) -> dict[str, Any]:
        """The group event that asks the host's agent connection to open it."""
        raise NotImplementedError

    async def relay_in(self, text_data: str | None, bytes_data: bytes | None) -> None:
        """A frame of the reader's once the agent's connection took it."""
        raise NotImplementedError

    def done_frame(self, event: dict[str, Any]) -> dict[str, Any]:
        """The reader's last frame, of the agent's end without an error."""
        raise NotImplementedError

    async def checked_only(self, target: Any) -> bool:
        """Whether the first frame asked for its checks only (answered here, then closed)."""
        return False

    def agent_refusal(self, error: str, message: str) -> ServiceError:
        """The refusal of an ``error`` the agent answered (or ``host_offline``: no answer)."""
        assert self.target is not None  # noqa: S101 -- only once it was asked for
        target = self.target
        return execs.agent_refusal(error, message, target.host_name, target.number, target.workload_id)

    async def connect(self) -> None:
        self.user: Any = None
        self.target: Any = None
        self.agent: str | None = None  # the agent connection's channel, once it took the session
        self.ref = 0
        self.ended = False
        self.opening = False
        self.counted = False  # holds one of FAIRWAY_EXEC_MAX_SESSIONS
        self.taken = False  # the agent's connection told this one the session's id (or ended it)
        self.open_timer: asyncio.TimerHandle | None = None
        self.first_timer: asyncio.TimerHandle | None = None
        self.recheck: asyncio.Task[None] | None = None
        await self.accept()
        self.accepted = True
        if self.layer_error is not None:  # its read failed before the socket's connect came
            await self._layer_lost(self.layer_error)
            return
        try:
            self.user = await _token_user(_authorization(self.scope))
        except ServiceError as exc:
            await self.refuse(exc)
            return
        loop = asyncio.get_running_loop()
        self.first_timer = loop.call_later(FIRST_FRAME_S, lambda: loop.create_task(self._no_first_frame()))

    async def _no_first_frame(self) -> None:
        if self.target is None and not self.opening:
            message = f"No first frame came within {FIRST_FRAME_S:g} s of the connection; connect again and send it."
            await self.refuse(ServiceError("first_frame_timeout", None, message, status=408))

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its per-message trip to the thread-sensitive thread (as the
        agent's consumer: every keystroke would wait there); the database is touched only by the
        :func:`~scheduler.gateway.agent_db` helpers, which close their connections."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:  # another kind of stream's (an agent's answer of the wrong kind): not ours
            logger.warning("%s: no handler for %s", type(self).__name__, message.get("type"))
            return
        await handler(message)

    async def refuse(self, exc: ServiceError) -> None:
        """Say why (the API's code and words) and close with 4000 + the API's status, the reason
        saying when to try again where the API's answer has a ``Retry-After``
        (:func:`refusal_close_reason`); a backing service's failure (5xx) is logged in one line,
        with its cause."""
        if self.ended:
            return
        self.ended = True
        self._release()
        if exc.status >= 500:
            cause = exc.__cause__
            why = f" ({type(cause).__name__}: {' '.join(str(cause).split())})" if cause is not None else ""
            logger.warning("%s refused, %s: %s%s", self.WHAT, exc.code, exc.message, why)
        with contextlib.suppress(Exception):
            await self.send(text_data=json.dumps({"type": "error", "code": exc.code, "message": exc.message}))
            await self.close(code=4000 + exc.status, reason=refusal_close_reason(exc))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.ended or self.user is None:
            return
        if self.target is None and not self.opening:
            await self._open(text_data)
            return
        if self.agent is None:
            return  # nothing is sent before the session started: the client waits for "started"
        await self.relay_in(text_data, bytes_data)

    async def _open(self, text_data: str | None) -> None:
        self.opening = True
        if self.first_timer is not None:
            self.first_timer.cancel()
        data = frame_json(text_data)
        try:
            target = await self.check(data)
        except ServiceError as exc:
            await self.refuse(exc)
            return
        if await self.checked_only(target):  # nothing opened: not counted, nothing to abandon
            return
        try:
            _take_session(self.user.pk)
        except ServiceError as exc:
            await self.refuse(exc)
            return
        self.counted = True
        self.target = target  # asked for from here on (a refused one has nothing to abandon)
        event = {**self.open_event(target), "reply_to": self.channel_name}
        try:
            await self.channel_layer.group_send(gateway.host_group(target.host_id), event)
        except gateway.LAYER_UNREACHABLE as exc:  # not sent: nothing to abandon
            self.taken = True
            await self._layer_lost(exc)
            return
        loop = asyncio.get_running_loop()
        self.open_timer = loop.call_later(OPEN_WAIT_S, lambda: loop.create_task(self._not_taken()))

    async def _not_taken(self) -> None:
        if self.agent is None and self.target is not None:
            await self._abandon()
            await self._end_with_agent_error("host_offline", "")

    def _release(self) -> None:
        if self.counted:
            self.counted = False
            _give_back_session(self.user.pk)

    async def _abandon(self) -> None:
        """The session asked for is not wanted any more, and its id is not known here yet: the
        agent's connection that takes it (the close follows the open in the host's group) closes
        the one of this reader (brk61: its command ran on to the idle timeout)."""
        if self.target is None or self.taken:
            return
        self.taken = True
        with contextlib.suppress(Exception):
            await self.channel_layer.group_send(
                gateway.host_group(self.target.host_id), {"type": "exec.tty.close", "reply_to": self.channel_name}
            )

    async def _end_with(self, code: str, message: str, status: int) -> None:
        await self._close_session()
        await self.refuse(ServiceError(code, None, message, status=status))

    async def _end_with_agent_error(self, error: str, message: str) -> None:
        await self.refuse(self.agent_refusal(error, message))

    async def _layer_lost(self, exc: BaseException) -> None:
        """The channel layer (Redis) cannot be reached: before the agent's connection took it, the
        one-shot exec's 503 ``exec_unavailable`` (nothing ran); after, the same code, the session
        ended (its input and output go through the layer)."""
        if self.ended:
            return
        why = gateway.layer_failed(exc)
        if self.agent is None:
            refusal = execs.layer_unavailable(why, port=self.PORT)
        else:
            self.agent = None  # nothing can reach it: its agent ends it when idle or when the link ends
            words = f"The server lost its link to the agents ({why}); the {self.NOUN} was ended. Try again shortly."
            refusal = ServiceError("exec_unavailable", None, words, status=503)
        refusal.__cause__ = exc
        await self.refuse(refusal)

    async def _to_agent(self, event: dict[str, Any]) -> None:
        """``event`` to the agent connection that holds the session; one that cannot be sent (its
        channel full: input faster than the agent's link takes it) ends the session."""
        if self.agent is None or self.ended:
            return
        try:
            await self.channel_layer.send(self.agent, {**event, "ref": self.ref})
        except Exception as exc:  # ChannelFull, Redis gone
            if event["type"] == "exec.tty.close":
                return
            if isinstance(exc, gateway.LAYER_UNREACHABLE):
                await self._layer_lost(exc)
            else:
                await self._end_with("input_overflow", "More input than the workload's host takes; session ended.", 409)

    async def _close_session(self) -> None:
        if self.agent is not None and not self.ended:
            await self._to_agent({"type": "exec.tty.close"})
            self.agent = None

    async def _recheck_token(self) -> None:
        """Check the session's token every :data:`TOKEN_RECHECK_S` while it lasts; one no longer
        valid ends it with the API's refusal (close 4401)."""
        while not self.ended:
            await asyncio.sleep(TOKEN_RECHECK_S)
            try:
                await _token_user(_authorization(self.scope))
            except ServiceError as exc:
                if exc.status >= 500:  # the database out of reach (gateway.run_in_db_thread): it goes on
                    logger.warning("%s: its token could not be checked again (%s)", self.WHAT, exc.code)
                    continue
                if not self.ended:
                    await self._end_with(exc.code, f"{exc.message} The {self.NOUN} was ended.", exc.status)
                return
            except Exception:  # noqa: BLE001 -- the database out of reach: the session goes on
                logger.warning("%s: its token could not be checked again", self.WHAT, exc_info=True)

    async def disconnect(self, code: int) -> None:
        if self.first_timer is not None:
            self.first_timer.cancel()
        if self.open_timer is not None:
            self.open_timer.cancel()
        if self.recheck is not None:
            self.recheck.cancel()
        self._release()  # first, as in _to_reader
        await self._close_session()  # the agent hangs the terminal up, kills its process tree
        await self._abandon()  # one whose id did not come yet
        self.ended = True

    # --- from the agent's connection (scheduler.consumers.AgentConsumer) ---

    async def exec_tty_opened(self, event: dict[str, Any]) -> None:
        if self.open_timer is not None:
            self.open_timer.cancel()
        self.agent, self.ref, self.taken = str(event["agent"]), int(event["ref"]), True
        if self.ended:  # the reader left meanwhile
            ended, self.ended = self.ended, False
            await self._close_session()
            self.ended = ended
            return
        if self.started_at_open():
            await self._started()

    def started_at_open(self) -> bool:
        """Whether the reader is told ``started`` once the agent's connection took it (else once the
        agent says its command runs: ``exec_started``, :meth:`ExecSessionConsumer.exec_started`)."""
        return True

    async def _started(self) -> None:
        assert self.target is not None  # noqa: S101 -- asked for by _open
        started = {
            "type": "started",
            "attempt": self.target.number,
            "host": self.target.host_name,
            **self.started_more(),
        }
        if await self._to_reader(text_data=json.dumps(started)):
            self.recheck = asyncio.get_running_loop().create_task(self._recheck_token())

    def started_more(self) -> dict[str, Any]:
        """What else the reader's ``started`` frame says."""
        return {}

    async def _to_reader(self, text_data: str | None = None, bytes_data: bytes | None = None) -> bool:
        """Send a frame to the reader (waiting while its socket's buffer is full); one whose socket
        went meanwhile (uvicorn raises ClientDisconnected before the consumer is told of it; brk61,
        exl61: the exception ended the consumer unclosed, the command ran on to the idle timeout)
        or that took nothing for :data:`READER_STALL_S` (a reader gone without a word, its buffers
        full) ends the session here and on its host."""
        try:
            await asyncio.wait_for(self.send(text_data=text_data, bytes_data=bytes_data), READER_STALL_S)
        except Exception as exc:
            why = f"took nothing for {READER_STALL_S:g} s" if isinstance(exc, TimeoutError) else "left"
            wire_id = self.target and self.target.wire_id
            logger.info("%s of attempt %s ended: its reader %s", self.WHAT, wire_id, why)
            self._release()  # before the agent is told: it may answer before this task runs again
            await self._close_session()
            self.ended = True
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.close(code=1011), 1)
            return False
        return True

    async def exec_tty_end(self, event: dict[str, Any]) -> None:
        if self.open_timer is not None:
            self.open_timer.cancel()
        self.agent, self.taken = None, True  # the agent's session is over: nothing more to close there
        if self.ended:
            return
        if event.get("error"):
            await self._end_with_agent_error(str(event["error"]), str(event.get("message") or ""))
            return
        if event.get("exit_code") is None:
            await self._end_with_agent_error("exec_failed", str(event.get("message") or "the command did not run"))
            return
        self.ended = True
        self._release()
        done = self.done_frame(event)
        if event.get("message"):  # why the agent ended it (brk61: a paste it did not read, unsaid)
            done["message"] = str(event["message"])
        with contextlib.suppress(Exception):
            await self.send(text_data=json.dumps(done))
            await self.close(code=1000)


class ExecSessionConsumer(AttemptStreamConsumer):
    """One interactive session's websocket at ``/ws/exec/`` (module docstring). pf63: its bytes go
    as they are (``exec_pipe``, ``exec_data``: binary-safe both ways, where text replaced bytes that
    are not UTF-8 with U+FFFD), on a terminal (``"tty": true``) or piped without one (``"tty":
    false``: ``fairway exec -i``); an agent older than that (``agent_too_old``) gets the terminal's
    ``exec_tty`` and text instead, its reader told ``started`` only then."""

    async def connect(self) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.binary = True  # exec_pipe; False: an older agent's exec_tty (text)
        self.opening_again = False  # opened again as exec_tty (an agent older than exec_pipe)
        self.tty = True
        self.unacked = 0  # bytes of input sent to the agent, not yet acknowledged (piped: written there)
        self.unacked_chunks = 0
        # flow49: the agent's connection acknowledges a terminal's input once relayed to the agent
        # (it says so at the open): the window then holds a terminal's input too
        self.acks_relayed = False
        self.resizing = False  # a resize on its way to the agent, not yet acknowledged (acks_relayed)
        self.next_size: tuple[int, int] | None = None  # the latest one asked for meanwhile
        await super().connect()

    async def check(self, data: Any) -> execs.TtyTarget:
        target = await _tty_target(self.user, data)
        self.tty = target.tty
        return target

    def open_event(self, target: execs.TtyTarget) -> dict[str, Any]:
        event = {
            "type": "exec.pipe.open" if self.binary else "exec.tty.open",
            "attempt_id": target.wire_id,
            "command": target.command,
            "rows": target.rows,
            "cols": target.cols,
            "idle_s": int(settings.FAIRWAY_EXEC_IDLE_TIMEOUT),
        }
        return {**event, "tty": target.tty} if self.binary else event

    def started_at_open(self) -> bool:
        return not self.binary

    def windowed(self) -> bool:
        """Whether the reader's input is held to the window: piped always (the agent acknowledges
        what the command took); on a terminal where the agent's connection acknowledges what it
        relayed (flow49: without a window a paste filled that connection's channel-layer buffer,
        where channels-redis drops the oldest messages past its capacity, the host's other pushes
        among them)."""
        return not self.tty or self.acks_relayed

    def started_more(self) -> dict[str, Any]:
        return {"window": True} if self.tty and self.acks_relayed else {}

    async def exec_tty_opened(self, event: dict[str, Any]) -> None:
        self.acks_relayed = bool(event.get("acks_relayed"))
        await super().exec_tty_opened(event)

    def done_frame(self, event: dict[str, Any]) -> dict[str, Any]:
        return {"type": "exit", "exit_code": int(event["exit_code"]), "timed_out": bool(event.get("timed_out"))}

    async def exec_started(self, event: dict[str, Any]) -> None:
        """The agent's ``exec_started``: the command runs, the reader may send its input."""
        if not self.ended and self.agent is not None:
            await self._started()

    async def exec_tty_end(self, event: dict[str, Any]) -> None:
        if (
            event.get("error") == "agent_too_old"
            and self.binary
            and self.tty
            and not self.ended
            and not self.opening_again
        ):
            # an agent older than exec_pipe: its terminal's session in text, as before pf63
            self.binary, self.opening_again = False, True
            self.agent, self.taken = None, False
            assert self.target is not None  # noqa: S101 -- asked for by _open
            event = {**self.open_event(self.target), "reply_to": self.channel_name}
            await self.channel_layer.group_send(gateway.host_group(self.target.host_id), event)
            loop = asyncio.get_running_loop()
            self.open_timer = loop.call_later(OPEN_WAIT_S, lambda: loop.create_task(self._not_taken()))
            return
        await super().exec_tty_end(event)

    async def relay_in(self, text_data: str | None, bytes_data: bytes | None) -> None:
        if bytes_data is not None:
            if len(bytes_data) > MAX_FRAME_BYTES:
                await self._end_with("input_too_large", f"An input frame is at most {MAX_FRAME_BYTES} bytes.", 400)
                return
            if not self.binary:
                text = self.decoder.decode(bytes_data)
                pieces = [text[at : at + EXEC_CHUNK_BYTES] for at in range(0, len(text), EXEC_CHUNK_BYTES)]
                sizes = [len(piece.encode()) for piece in pieces]
                if not await self._take_window(sizes):
                    return
                for piece, size in zip(pieces, sizes, strict=True):
                    await self._to_agent({"type": "exec.tty.input", "data": piece, **self._relay_ack(size)})
                return
            await self._input(bytes_data, eof=False)
            return
        try:
            control = frame_json(text_data)
            kind = control.get("type")
            if kind == "eof" and self.binary:  # the end of the input: a pipe's close, a terminal's ^D
                await self._input(b"", eof=True)
                return
            if kind != "resize":
                raise ValueError(kind)
            rows, cols = int(control["rows"]), int(control["cols"])
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):  # brk61: rows Infinity
            return  # not one we know: ignored, as a terminal ignores an unknown escape
        if 1 <= rows <= 4096 and 1 <= cols <= 4096:
            await self._resize(rows, cols)

    async def _resize(self, rows: int, cols: int) -> None:
        """A resize to the agent; where the agent's connection acknowledges what it relayed, one at a
        time, the latest asked for meanwhile sent once the one before was (flow49: a flood of resizes
        held no more of the host's channel than one)."""
        if not self.acks_relayed:
            await self._to_agent({"type": "exec.tty.resize", "rows": rows, "cols": cols})
        elif self.resizing:
            self.next_size = (rows, cols)
        else:
            self.resizing = True
            await self._to_agent({"type": "exec.tty.resize", "rows": rows, "cols": cols, "relay_ack": 0})

    async def _input(self, data: bytes, eof: bool) -> None:
        """Input bytes (or the end of it) to the agent, in ``exec_data``-sized pieces; piped, at
        most ``EXEC_TTY_WINDOW`` bytes (``EXEC_TTY_WINDOW_CHUNKS`` pieces) ahead of the agent's
        acknowledgements of what the command took (a client past it is ended, as a forward's)."""
        pieces = [data[at : at + EXEC_CHUNK_BYTES] for at in range(0, len(data), EXEC_CHUNK_BYTES)]
        if not await self._take_window([len(piece) for piece in pieces]):
            return
        for piece in pieces:
            event = {"type": "exec.data", "data": base64.b64encode(piece).decode(), "eof": False}
            await self._to_agent({**event, **self._relay_ack(len(piece))})
        if eof:
            await self._to_agent({"type": "exec.data", "data": "", "eof": True})

    async def _take_window(self, sizes: list[int]) -> bool:
        """Count input pieces of ``sizes`` bytes in the window (:meth:`windowed`); a reader past it
        (``EXEC_TTY_WINDOW`` bytes or ``EXEC_TTY_WINDOW_CHUNKS`` pieces ahead of the acks) is ended
        ``input_overflow`` (False)."""
        if not self.windowed():
            return True
        size = sum(sizes)
        if self.unacked + size > EXEC_TTY_WINDOW or self.unacked_chunks + len(sizes) > EXEC_TTY_WINDOW_CHUNKS:
            message = f"More than {EXEC_TTY_WINDOW} bytes (or {EXEC_TTY_WINDOW_CHUNKS} frames) sent ahead of the acks."
            await self._end_with("input_overflow", message, 409)
            return False
        self.unacked += size
        self.unacked_chunks += len(sizes)
        return True

    def _relay_ack(self, size: int) -> dict[str, Any]:
        """On a terminal with a window, the agent's connection is asked to acknowledge the piece
        (``size`` bytes) once relayed (``relay_ack``); piped, the agent acknowledges it once written."""
        return {"relay_ack": size} if self.tty and self.acks_relayed else {}

    async def exec_tty_output(self, event: dict[str, Any]) -> None:
        if self.ended:
            return
        data = str(event["data"]).encode()
        if not await self._to_reader(bytes_data=data):  # waits while the reader's socket buffer is full
            return
        await self._to_agent({"type": "exec.tty.ack", "bytes": len(data), "chunks": 1})

    async def exec_data(self, event: dict[str, Any]) -> None:
        """Output's bytes (base64, as the agent sent them): as they are on a terminal; piped, each
        frame's first byte its stream's (1 stdout, 2 stderr: kubectl's channels)."""
        if self.ended or event.get("eof"):
            return
        try:
            data = base64.b64decode(str(event["data"]), validate=True)
        except binascii.Error:
            await self._end_with("exec_failed", execs.NOT_BASE64, 409)
            return
        frame = data if self.tty else (b"\x02" if event.get("stream") == "stderr" else b"\x01") + data
        if not await self._to_reader(bytes_data=frame):  # waits while the reader's socket buffer is full
            return
        await self._to_agent({"type": "exec.tty.ack", "bytes": len(data), "chunks": 1})

    async def port_ack(self, event: dict[str, Any]) -> None:
        """The agent wrote that much input to the command's stdin (piped), or the agent's connection
        relayed it to the agent (a terminal's, flow49): the reader may send more."""
        if self.ended or not self.windowed():
            return
        if event.get("resized"):  # a resize relayed: the next one may go
            self.resizing, size, self.next_size = False, self.next_size, None
            if size is not None:
                await self._resize(*size)
            return
        done, chunks = int(event["bytes"]), int(event["chunks"])
        self.unacked, self.unacked_chunks = max(0, self.unacked - done), max(0, self.unacked_chunks - chunks)
        await self._to_reader(text_data=json.dumps({"type": "ack", "bytes": done, "chunks": chunks}))
