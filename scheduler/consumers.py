"""The agent websocket (DESIGN.md §7): authenticate, decode, dispatch to lifecycle services, reconcile.

The consumer only dispatches: every database touch is a small
``database_sync_to_async`` helper around a service of :mod:`scheduler.lifecycle`
or :mod:`scheduler.gateway`, except heartbeats: they are validated here and
buffered in the process's :class:`scheduler.gateway.AgentHub`, which writes all
of them in one flush every ``HEARTBEAT_FLUSH_S`` and hands each connection the
commands of its host (:meth:`AgentConsumer.deliver`); a ``desired.state`` push
is batched by the hub too. Hello, attempt events and logs are handled at once.
A malformed message is answered with ``error`` and logged; it never closes the
connection. A host may only speak of its own GPUs and attempts: the lifecycle
services ignore attempts that hold no GPU of the connection's host.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.utils import timezone

from agent import protocol
from scheduler import gateway, lifecycle
from scheduler.models import Host

logger = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED = 4401
MAX_PENDING_LOG_REQUESTS = 64


def _bearer_token(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            text = value.decode("latin-1").strip()
            if text[:7].lower() == "bearer ":
                return text[7:].strip()
    return ""


@database_sync_to_async
def _authenticate(token: str) -> Host | None:
    from scheduler.services import authenticate_host_token

    return authenticate_host_token(token) if token else None


@database_sync_to_async
def _hello(host: Host, msg: protocol.Hello) -> None:
    lifecycle.host_hello(
        host,
        agent_version=msg.agent_version,
        gpus=[lifecycle.GpuReport(g.index, g.uuid, g.model, g.memory_mb, g.health) for g in msg.gpus],
        running=[a.attempt_id for a in msg.attempts if a.state == "running"],
        exited=[
            lifecycle.ExitReport(a.attempt_id, a.exit_code, a.age_s or 0.0) for a in msg.attempts if a.state == "exited"
        ],
    )


def _samples(msg: protocol.Heartbeat) -> list[lifecycle.GpuSample]:
    return [
        lifecycle.GpuSample(
            index=s.index,
            health=s.health,
            xids=tuple(s.xids),
            sample={
                "utilization_pct": s.utilization_pct,
                "memory_used_mb": s.memory_used_mb,
                "temperature_c": s.temperature_c,
                "power_w": s.power_w,
                "ecc_uncorrected": s.ecc_uncorrected,
                "xids": list(s.xids),
            },
        )
        for s in msg.gpus
    ]


@database_sync_to_async
def _attempt_event(host: Host, msg: protocol.AttemptEvent) -> None:
    age = msg.age_s or 0.0
    if msg.state in ("started", "running"):
        lifecycle.attempt_started(host, msg.attempt_id)
    elif msg.state == "exited":
        lifecycle.attempt_exited(host, msg.attempt_id, msg.exit_code, age, message=msg.message)
    elif msg.state == "failed_to_start":
        lifecycle.attempt_failed_to_start(host, msg.attempt_id, msg.message, age)
    elif msg.state == "stopped":
        lifecycle.attempt_stopped_unknown(host, msg.attempt_id)


@database_sync_to_async
def _desired(host_id: int, running: set[int] | None, started: set[int], stopped: set[int]) -> list[protocol.Message]:
    return gateway.desired_commands(host_id, running, already_started=started, already_stopped=stopped)


class AgentConsumer(AsyncWebsocketConsumer):
    """One agent connection at ``/ws/agent/``, member of group ``host.<id>``."""

    host: Host | None = None

    async def connect(self) -> None:
        self.host = None
        self.seq = 0
        self.hello_done = False
        self.reported_running: set[int] | None = None
        self.sent_starts: set[int] = set()
        self.sent_stops: set[int] = set()
        # ``logs`` message id -> (attempt id, reply channel) of log tails asked for by the API
        self.log_requests: dict[int, tuple[int, str]] = {}
        self.lock = asyncio.Lock()
        self.live = False  # registered with the hub: after hello, until disconnect
        gateway.remember_server_loop(asyncio.get_running_loop())
        host = await _authenticate(_bearer_token(self.scope))
        await self.accept()
        if host is None:
            logger.warning("agent connection refused: bad or missing host token (%s)", self.scope.get("client"))
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.host = host
        self.group = gateway.host_group(host.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        logger.info("agent of host %s connected from %s", host.name, self.scope.get("client"))

    async def disconnect(self, code: int) -> None:
        if self.host is not None:
            self.live = False
            gateway.hub().unregister(self.host.pk, self)
            await self.channel_layer.group_discard(self.group, self.channel_name)
            logger.info("agent of host %s disconnected (%s)", self.host.name, code)

    async def send_msg(self, msg: protocol.Message) -> None:
        """Encode and send ``msg`` with this connection's next sequence number."""
        self.seq += 1
        try:
            text = protocol.encode(type(msg)(**{**_fields(msg), "id": self.seq}))
        except protocol.ProtocolError as exc:
            logger.error("not sending invalid %s to %s: %s", msg.TYPE, self.host, exc)
            return
        await self.send(text_data=text)

    async def send_error(self, code: str, message: str, ref: int | None) -> None:
        await self.send_msg(protocol.Error(code=code, message=message[:2000], ref=ref))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.host is None:
            return
        try:
            msg = protocol.decode(
                text_data if text_data is not None else (bytes_data or b""), allowed=protocol.AGENT_MESSAGE_TYPES
            )
        except protocol.ProtocolError as exc:
            logger.warning("bad message from host %s: %s", self.host.name, exc)
            await self.send_error(exc.code, exc.message, exc.ref)
            return
        async with self.lock:  # one message at a time per connection: events stay in order
            try:
                await self.dispatch_message(msg)
            except Exception:
                logger.exception("handling %s from host %s failed", msg.TYPE, self.host.name)
                await self.send_error("internal", f"the server could not handle this {msg.TYPE}", msg.id)

    async def dispatch_message(self, msg: protocol.Message) -> None:
        assert self.host is not None  # noqa: S101 -- receive() checks it
        if isinstance(msg, protocol.Hello):
            if msg.host != self.host.name:
                await self.send_error(
                    protocol.ERR_INVALID, f"this token belongs to host {self.host.name}, not {msg.host}", msg.id
                )
                return
            problem = lifecycle.hello_gpu_problem(
                [lifecycle.GpuReport(g.index, g.uuid, g.model, g.memory_mb, g.health) for g in msg.gpus]
            )
            if problem is not None:
                await self.send_error(protocol.ERR_INVALID, f"hello.gpus: {problem}", msg.id)
                return
            await _hello(self.host, msg)
            self.hello_done = True
            self.reported_running = {a.attempt_id for a in msg.attempts if a.state == "running"}
            self.sent_starts.clear()
            self.sent_stops.clear()
            self.live = True
            gateway.hub().register(self.host.pk, self)
            await self.send_msg(
                protocol.Welcome(host=self.host.name, heartbeat_s=float(settings.FAIRWAY["HEARTBEAT_S"]))
            )
            await self.reconcile()
            return
        if not self.hello_done:
            if not isinstance(msg, protocol.Error):
                await self.send_error(protocol.ERR_UNEXPECTED_TYPE, "send hello first", msg.id)
            return
        if isinstance(msg, protocol.Heartbeat):
            self.reported_running = set(msg.running)
            # Level-triggered: a start the agent does not report running is sent again (the agent
            # answers a repeated start with what it knows); a stop is sent once per connection
            # while the attempt runs (a second SIGTERM would restart nothing) and again once it
            # no longer runs but is still open here (the agent answers with its exit). The hub's
            # next flush writes the heartbeat and reconciles (deliver()).
            self.sent_starts &= self.reported_running
            self.sent_stops &= self.reported_running
            gateway.hub().heartbeat(self.host.pk, self, timezone.now(), _samples(msg))
        elif isinstance(msg, protocol.AttemptEvent):
            await _attempt_event(self.host, msg)
            if self.reported_running is not None:
                if msg.state in ("started", "running"):
                    self.reported_running.add(msg.attempt_id)
                elif msg.state in ("exited", "failed_to_start", "stopped"):
                    self.reported_running.discard(msg.attempt_id)
            await self.send_msg(protocol.Ack(ack=msg.id))
        elif isinstance(msg, protocol.Log):
            await self.send_msg(protocol.Ack(ack=msg.id))
            # answers come in request order: the oldest request for this attempt gets it
            for seq, (attempt_id, reply_to) in sorted(self.log_requests.items()):
                if attempt_id == msg.attempt_id:
                    del self.log_requests[seq]
                    await self.channel_layer.send(
                        reply_to, {"type": "logs.reply", "data": msg.data, "offset": msg.offset, "eof": msg.eof}
                    )
                    break
        elif isinstance(msg, protocol.Error):
            pending = self.log_requests.pop(msg.ref, None) if msg.ref is not None else None
            if pending is not None:
                await self.channel_layer.send(pending[1], {"type": "logs.reply", "error": f"agent: {msg.message}"})
                return
            logger.warning(
                "agent of host %s reports error %s: %s (ref %s)", self.host.name, msg.code, msg.message, msg.ref
            )

    async def reconcile(self) -> None:
        """Send what the database wants on this host and the agent does not have yet (lock held)."""
        assert self.host is not None  # noqa: S101 -- only called on authenticated connections
        view = self.agent_view()
        commands = await _desired(self.host.pk, view.reported_running, view.already_started, view.already_stopped)
        await self._send_commands(commands)

    def agent_view(self) -> gateway.AgentView:
        """What this connection knows of its agent, for a desired-state computation (the hub's)."""
        assert self.host is not None  # noqa: S101 -- only called on authenticated connections
        running = None if self.reported_running is None else set(self.reported_running)
        return gateway.AgentView(self.host.pk, running, set(self.sent_starts), set(self.sent_stops))

    async def deliver(self, commands: list[protocol.Message]) -> None:
        """Commands the hub computed for this host (heartbeat flush or push)."""
        if not self.live:
            return
        async with self.lock:
            try:
                await self._send_commands(commands)
            except Exception:
                logger.exception("sending desired state to host %s failed", self.host)

    async def _send_commands(self, commands: list[protocol.Message]) -> None:
        # Computed from a snapshot: what was sent or reported since then is not sent again, and
        # a start computed before a stop of the same attempt was sent is stale.
        for cmd in commands:
            if isinstance(cmd, protocol.Start):
                aid = cmd.attempt_id
                if aid in self.sent_starts or aid in self.sent_stops or aid in (self.reported_running or ()):
                    continue
                self.sent_starts.add(aid)
            elif isinstance(cmd, protocol.Stop):
                if cmd.attempt_id in self.sent_stops:
                    continue
                self.sent_stops.add(cmd.attempt_id)
            await self.send_msg(cmd)

    async def logs_request(self, event: dict[str, Any]) -> None:
        """Group event ``logs.request`` (gateway.request_log_tail): ask the agent for a log tail."""
        if self.host is None or not self.hello_done:
            return
        if len(self.log_requests) >= MAX_PENDING_LOG_REQUESTS:
            self.log_requests.pop(min(self.log_requests))
        # send_msg gives the message the next id; the agent's error about it names that id
        self.log_requests[self.seq + 1] = (int(event["attempt_id"]), str(event["reply_to"]))
        await self.send_msg(protocol.Logs(attempt_id=int(event["attempt_id"]), tail_bytes=int(event["tail_bytes"])))

    async def desired_state(self, event: dict[str, Any]) -> None:
        """Group event ``desired.state``: the database changed for this host (gateway.push_desired_state).

        The hub batches the reconciles of all hosts pushed at about the same time."""
        if self.host is None or not self.hello_done or not self.live:
            return
        gateway.hub().reconcile(self.host.pk, self)


def _fields(msg: protocol.Message) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
