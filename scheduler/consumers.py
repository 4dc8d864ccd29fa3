"""The agent websocket (DESIGN.md §7): authenticate, decode, dispatch to lifecycle services, reconcile.

The consumer only dispatches: every database touch is a small helper
(:func:`scheduler.gateway.agent_db`: the process's agent-database threads, never
asgiref's one thread-sensitive thread) around a service of :mod:`scheduler.lifecycle`
or :mod:`scheduler.gateway`, except heartbeats: they are validated here and
buffered in the process's :class:`scheduler.gateway.AgentHub`, which writes all
of them in one flush every ``HEARTBEAT_FLUSH_S`` and hands each connection the
commands of its host (:meth:`AgentConsumer.deliver`); a ``desired.state`` push
is batched by the hub too. Attempt events are written in batches of every connection's
event of the moment (:class:`_EventWriter`), each answered once written. Hello and logs are
handled at once.
A message that touches no database (a heartbeat, a push, a log line) is handled on the
event loop alone: :meth:`AgentConsumer.dispatch` leaves out Channels' per-message trip to
the sync thread (while a message is being dispatched the connection's socket is not read,
its keepalive pongs neither; docs/benchmarks/api_load.md, "Fifth pass").
A malformed message is answered with ``error`` and logged; it never closes the
connection. A host may only speak of its own GPUs and attempts: the lifecycle
services ignore attempts that hold no GPU of the connection's host.

One live connection per host (docs/deploy.md, "The agent link"): each accepted connection
bumps ``Host.link_generation``; older connections of the host are closed with 4409
(``agent.superseded`` to the host's group) and, should that message be lost, are fenced: a
desired-state computation for a stale generation sends nothing and closes them. Rotating
or revoking the token bumps it too and closes the connections with 4401 (``agent.revoked``);
removing the host closes them with 4410 (``protocol.CLOSE_HOST_REMOVED``), as it refuses the
agent's every later connect: the agent then stops instead of reconnecting.
Attempt ids on the wire are ``Attempt.wire_id``s, translated to primary keys here.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import contextlib
import dataclasses
import logging
import math
import time
import weakref
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from channels.consumer import get_handler_name
from django.conf import settings
from django.db import connection
from django.utils import timezone

from agent import protocol
from config.errors import ServiceError
from scheduler import agent_auth_limit, execs, gateway, lifecycle
from scheduler.gateway import agent_db
from scheduler.layer_read import LayerReadConsumer
from scheduler.models import Attempt, Host

logger = logging.getLogger(__name__)

CLOSE_UNAUTHORIZED = 4401
MAX_CLOSE_REASON_BYTES = 123
"""A close frame's reason (RFC 6455 §5.5: a control frame's payload ≤ 125 bytes, 2 of them the code)."""


def _close_reason(why: str) -> str:
    """``why`` as a close frame's reason: at most 123 bytes of UTF-8, cut at a character."""
    return why.encode()[:MAX_CLOSE_REASON_BYTES].decode(errors="ignore")


CLOSE_SUPERSEDED = 4409
"""Close code of a connection replaced by a newer one with the same host token (docs/deploy.md)."""
MAX_PENDING_LOG_REQUESTS = 64
MAX_PENDING_EXECS = 16
"""One-shot commands (``exec``) one connection waits on at once; another is answered ``busy``."""
MAX_TTY_SESSIONS = 128
"""Interactive sessions (``exec_tty``) and forwarded connections (``port_open``) one connection
relays at once; another is answered ``busy`` (the agent holds 32 sessions and 64 connections)."""
INBOX_MAX = 256
"""Messages of one connection read and not yet handled; beyond, the socket is read no further
until one is (an agent sends a heartbeat every few seconds and an event per attempt change)."""
INBOX_DRAIN_S = 60.0
"""How long a disconnect waits for the messages its connection sent before closing to be handled."""
CLOSE_SERVICE_RESTART = 1012
"""Close code of uvicorn's graceful shutdown (SIGTERM): a disconnect with it flushes the hub."""
CLOSE_TRY_AGAIN_LATER = 1013
"""The close of a connection whose channel layer (Redis) cannot be reached (db61): the agent
connects again, as after any close but a removal's."""
LAYER_UNREACHABLE_REASON = "the server cannot reach its channel layer (Redis); connect again"
DATABASE_UNREACHABLE_REASON = "the server cannot reach its database; connect again"
"""The close reason of a connection whose database work failed for want of the database (ws63)."""


def _bearer_token(scope: dict[str, Any]) -> str:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            text = value.decode("latin-1").strip()
            if text[:7].lower() == "bearer ":
                return text[7:].strip()
    return ""


@agent_db
def _open_link(token: str) -> Host | None:
    return gateway.open_agent_link(token)


@agent_db
def _link_refusal(token: str) -> tuple[str, bool]:
    return gateway.link_refusal(token)


@agent_db
def _token_state(host: Host) -> str:
    """``same``: the host still has the token this connection was accepted with; ``removed``: an
    admin removed the host; ``changed``: its token was rotated or revoked."""
    row = Host.objects.filter(pk=host.pk).values_list("token_hash", "removed_at").first()
    if row is not None and row[1] is not None:
        return "removed"
    return "same" if row is not None and row[0] == host.token_hash else "changed"


@agent_db
def _hello(host: Host, generation: int, msg: protocol.Hello, received: datetime) -> set[int] | None:
    """Record a hello received at ``received``; None (nothing recorded) when this connection is no
    longer the host's live one, else the wire ids of the attempts it reports running that are still
    not confirmed started (:func:`scheduler.lifecycle.host_hello`: their ``start`` is sent again)."""
    if not Host.objects.filter(pk=host.pk, link_generation=generation, removed_at__isnull=True).exists():
        return None
    # Attempt ids on the wire are wire ids; ones the database does not know (from before a
    # restore, or never placed here) are left to the desired state: running ones are stopped.
    pks = lifecycle.attempt_pks(a.attempt_id for a in msg.attempts)
    running = [a for a in msg.attempts if a.state == "running" and a.attempt_id in pks]
    unconfirmed = lifecycle.host_hello(
        host,
        agent_version=msg.agent_version,
        gpus=[lifecycle.GpuReport(g.index, g.uuid, g.model, g.memory_mb, g.health) for g in msg.gpus],
        running=[pks[a.attempt_id] for a in running],
        started={pks[a.attempt_id]: a.age_s for a in running if a.age_s is not None},
        exited=[
            lifecycle.ExitReport(pks[a.attempt_id], a.exit_code, a.age_s or 0.0)
            for a in msg.attempts
            if a.state == "exited" and a.attempt_id in pks
        ],
        isolation=dataclasses.asdict(msg.isolation) if msg.isolation is not None else None,
        cpus=msg.cpus,
        memory=msg.memory,
        now=received,
    )
    return {wire for wire, pk in pks.items() if pk in unconfirmed}


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


def live_link_and_attempt(host_id: int, generation: int, wire_id: int) -> tuple[bool, int | None]:
    """(whether link ``generation`` is still the live one of host ``host_id``, the primary key of
    the attempt with ``wire_id`` or None), in one statement: an attempt event's two checks.
    :func:`live_link_and_attempt_plain` is its oracle."""
    sql = (
        f"SELECT (SELECT a.id FROM {Attempt._meta.db_table} a WHERE a.wire_id = %s)"  # noqa: S608 -- table names
        f" FROM {Host._meta.db_table} h WHERE h.id = %s AND h.link_generation = %s AND h.removed_at IS NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [wire_id, host_id, generation])
        row = cursor.fetchone()
    return (False, None) if row is None else (True, row[0])


def live_link_and_attempt_plain(host_id: int, generation: int, wire_id: int) -> tuple[bool, int | None]:
    """:func:`live_link_and_attempt` as two ORM queries (the oracle)."""
    if not Host.objects.filter(pk=host_id, link_generation=generation, removed_at__isnull=True).exists():
        return False, None
    return True, lifecycle.attempt_pks([wire_id]).get(wire_id)


def _attempt_event_plain(
    host: Host, generation: int, msg: protocol.AttemptEvent, received: datetime, alive_at: datetime | None = None
) -> bool:
    """Record an attempt event; False (nothing recorded) when this connection is stale: one event,
    in its own transaction (the readable path: :func:`record_attempt_events` is its batched form,
    ``tests/test_attempt_event_batch.py`` compares them).

    ``received`` is when the frame arrived: the agent's ``age_s`` counts back from it, so a report
    that waits for the database (a lock held by a cancel or the tick) is still stamped with the
    agent's time (docs/locking.md). ``alive_at``: when this connection last heard the attempt
    running (an exit is never dated before it: :func:`scheduler.lifecycle.exit_time`)."""
    live, pk = live_link_and_attempt(host.pk, generation, msg.attempt_id)
    if not live:
        return False
    if pk is None:  # not an attempt of this database (e.g. from before a restore): nothing to record
        logger.info("host %s spoke of unknown attempt %s; ignored", host.name, msg.attempt_id)
        return True
    _record_one(host, pk, msg, received, alive_at)
    return True


def _record_one(host: Host, pk: int, msg: protocol.AttemptEvent, received: datetime, alive_at: datetime | None) -> None:
    """The lifecycle service of one attempt event (attempt ``pk``, its link checked live)."""
    age = msg.age_s or 0.0
    if msg.state in ("started", "running"):
        lifecycle.attempt_started(host, pk, msg.age_s, now=received)
    elif msg.state == "exited":
        lifecycle.attempt_exited(host, pk, msg.exit_code, age, message=msg.message, now=received, alive_at=alive_at)
    elif msg.state == "failed_to_start":
        lifecycle.attempt_failed_to_start(host, pk, msg.message, age, now=received, alive_at=alive_at)
    elif msg.state == "stopped":
        lifecycle.attempt_stopped_unknown(host, pk)


@dataclasses.dataclass(frozen=True, slots=True)
class EventItem:
    """One attempt event for :func:`record_attempt_events`: :func:`_attempt_event_plain`'s arguments."""

    host: Host
    generation: int
    msg: protocol.AttemptEvent
    received: datetime
    alive_at: datetime | None = None


def live_links_and_attempts(items: Sequence[tuple[int, int, int]]) -> list[tuple[bool, int | None]]:
    """:func:`live_link_and_attempt` of each ``(host id, generation, wire id)``, in one statement
    whatever their number (its oracle: that function, item by item)."""
    if not items:
        return []
    rows = ", ".join(["(CAST(%s AS BIGINT), CAST(%s AS BIGINT), CAST(%s AS BIGINT), CAST(%s AS BIGINT))"] * len(items))
    sql = (
        f"WITH ev(i, host_id, gen, wire) AS (VALUES {rows}) "  # noqa: S608 -- table names and placeholders
        "SELECT ev.i, h.id, (SELECT a.id FROM "
        f"{Attempt._meta.db_table} a WHERE a.wire_id = ev.wire) FROM ev LEFT JOIN {Host._meta.db_table} h"
        " ON h.id = ev.host_id AND h.link_generation = ev.gen AND h.removed_at IS NULL"
    )
    params = [v for i, (host_id, gen, wire) in enumerate(items) for v in (i, host_id, gen, wire)]
    out: list[tuple[bool, int | None]] = [(False, None)] * len(items)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for i, host_id, pk in cursor.fetchall():
            out[i] = (False, None) if host_id is None else (True, pk)
    return out


def record_attempt_events(items: Sequence[EventItem]) -> list[bool | Exception]:
    """:func:`_attempt_event_plain` of each item (their results, or the exception one raised), the
    ``started`` (and ``running``) reports of distinct attempts written together, and the ``exited``
    ones: one statement checks every item's link and wire id, then
    :func:`scheduler.lifecycle.attempts_started` and :func:`scheduler.lifecycle.attempts_exited` write
    them, each kind in one transaction of set-based statements (per
    :data:`~scheduler.lifecycle.START_BATCH_MAX`). The other events (failed starts, stops, a report
    of an attempt named twice in the batch) follow one by one in their order of arrival, each in its
    own transaction, as before. The items come from different connections (each waits for its
    answer before its next message), whose events were never ordered among themselves (they ran on
    the threads at once); each touches another attempt than the rest (a workload has one open
    attempt), so this order (the batched starts, the batched exits, the rest) ends where the items
    one by one in their order of arrival end (``tests/test_attempt_event_batch.py``; one rule reads
    other attempts: a failed start's cordon, ``lifecycle._cordon_after_start_failures``, counts the
    host's ended attempts, which a gang's exit reported by another host of the gang, in the same
    batch, may join first).
    A batch that fails is written again one report at a time (one bad report loses only itself).
    Each connection has one event in a batch at most (it waits for its answer before its next message)."""
    checked = live_links_and_attempts([(it.host.pk, it.generation, it.msg.attempt_id) for it in items])
    results: list[bool | Exception] = [live for live, _pk in checked]
    known = [(n, pk) for n, (live, pk) in enumerate(checked) if live and pk is not None]
    for n, (live, pk) in enumerate(checked):
        if live and pk is None:
            logger.info("host %s spoke of unknown attempt %s; ignored", items[n].host.name, items[n].msg.attempt_id)
    named = collections.Counter(pk for _n, pk in known)
    done: set[int] = set()
    for states, write in ((("started", "running"), _write_starts), (("exited",), _write_exits)):
        batched = [(n, pk) for n, pk in known if items[n].msg.state in states and named[pk] == 1]
        if len(batched) < 2:
            continue  # one report alone: its own path is as short
        for at in range(0, len(batched), lifecycle.START_BATCH_MAX):
            chunk = batched[at : at + lifecycle.START_BATCH_MAX]
            try:
                write(items, chunk)
            except Exception as exc:
                if not gateway.is_database_refusal(gateway.database_failure(exc)):  # else said by each connection
                    logger.exception("batched write of %d attempt events failed; writing them one by one", len(chunk))
                for n, pk in chunk:
                    try:
                        _record_one(items[n].host, pk, items[n].msg, items[n].received, items[n].alive_at)
                    except Exception as exc:  # noqa: BLE001 -- handed to that event's connection
                        results[n] = gateway.database_failure(exc)
        done.update(n for n, _pk in batched)
    for n, pk in known:
        if n in done:
            continue
        it = items[n]
        try:
            _record_one(it.host, pk, it.msg, it.received, it.alive_at)
        except Exception as exc:  # noqa: BLE001 -- handed to that event's connection
            results[n] = gateway.database_failure(exc)
    return results


def _write_starts(items: Sequence[EventItem], chunk: Sequence[tuple[int, int]]) -> None:
    lifecycle.attempts_started(
        [lifecycle.StartReport(items[n].host, pk, items[n].msg.age_s, items[n].received) for n, pk in chunk]
    )


def _write_exits(items: Sequence[EventItem], chunk: Sequence[tuple[int, int]]) -> None:
    lifecycle.attempts_exited(
        [
            lifecycle.ExitEvent(
                items[n].host,
                pk,
                items[n].msg.exit_code,
                items[n].msg.age_s or 0.0,
                items[n].msg.message,
                items[n].received,
                items[n].alive_at,
            )
            for n, pk in chunk
        ]
    )


EVENT_BATCH_MAX = 256
"""Attempt events one batch of :class:`_EventWriter` takes at most."""


class _EventWriter:
    """The attempt events of this process's connections, written in batches (one per event loop).

    Each connection hands its event to :meth:`write` and waits for its result before its next
    message (so its events and its acknowledgements keep their order, and an ``ack`` is sent only
    once the event's write committed). A writer task gives every event waiting to one batch
    (:func:`record_attempt_events`) on the agent-database threads, up to one batch per thread at
    once: a tick's burst of ~125 ``started`` events is a few transactions, not 125 in a queue."""

    def __init__(self) -> None:
        self.pending: list[tuple[EventItem, asyncio.Future[bool]]] = []
        self.slots = asyncio.Semaphore(gateway.agent_db_threads())
        self.task: asyncio.Task[None] | None = None
        self.batches: set[asyncio.Task[None]] = set()

    async def write(self, item: EventItem) -> bool:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        self.pending.append((item, done))
        if self.task is None or self.task.done():
            self.task = loop.create_task(self._loop())
        return await done

    async def _loop(self) -> None:
        while self.pending:
            await self.slots.acquire()
            await asyncio.sleep(0)  # the events read in this turn of the loop join the batch
            batch, self.pending = self.pending[:EVENT_BATCH_MAX], self.pending[EVENT_BATCH_MAX:]
            task = asyncio.get_running_loop().create_task(self._write(batch))
            self.batches.add(task)
            task.add_done_callback(self.batches.discard)

    async def _write(self, batch: list[tuple[EventItem, asyncio.Future[bool]]]) -> None:
        try:
            results: list[bool | Exception] = await gateway.run_in_db_thread(
                gateway.agent_db_executor(), record_attempt_events, [item for item, _f in batch]
            )
        except asyncio.CancelledError:
            for _item, done in batch:
                done.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 -- handed to every connection of the batch
            results = [exc] * len(batch)
        finally:
            self.slots.release()
        for (_item, done), result in zip(batch, results, strict=True):
            if done.done():  # its connection gave up waiting (cancelled)
                continue
            if isinstance(result, Exception):
                done.set_exception(result)
            else:
                done.set_result(result)


_writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _EventWriter] = weakref.WeakKeyDictionary()


async def _attempt_event(
    host: Host, generation: int, msg: protocol.AttemptEvent, received: datetime, alive_at: datetime | None = None
) -> bool:
    """:func:`_attempt_event_plain`, written with the other connections' events of the moment
    (:class:`_EventWriter`); returns once the write committed."""
    loop = asyncio.get_running_loop()
    writer = _writers.get(loop)
    if writer is None:
        writer = _writers[loop] = _EventWriter()
    return await writer.write(EventItem(host, generation, msg, received, alive_at))


_attempt_event.func = _attempt_event_plain  # type: ignore[attr-defined] -- the one-event path (tests call it)


@dataclasses.dataclass(slots=True)
class _PendingExec:
    """An ``exec`` sent to the agent: where its answer goes, the request (asked again as ``exec``
    of an agent older than ``exec_bytes``), and its output so far, each stream kept to
    ``max_output`` bytes (an agent sending more is cut here too)."""

    reply_to: str
    max_output: int
    deadline: float = float("inf")  # time.monotonic() past which its requester no longer waits
    request: protocol.Exec | None = None
    stdout: bytearray = dataclasses.field(default_factory=bytearray)
    stderr: bytearray = dataclasses.field(default_factory=bytearray)
    cut: bool = False

    def add(self, stream: str, data: bytes) -> None:
        kept = self.stdout if stream == "stdout" else self.stderr
        room = self.max_output - len(kept)
        if len(data) > room:
            self.cut, data = True, data[: max(room, 0)]
        kept += data

    def reply(self, msg: protocol.ExecResult) -> dict[str, Any]:
        """The ``exec.reply``: its bytes in base64 (exec47; :func:`scheduler.execs.do_exec` reads them)."""
        if msg.exit_code is None:
            return {"type": "exec.reply", "error": "exec_failed", "message": msg.message or "the command did not run"}
        return {
            "type": "exec.reply",
            "exit_code": msg.exit_code,
            "stdout_base64": base64.b64encode(self.stdout).decode(),
            "stderr_base64": base64.b64encode(self.stderr).decode(),
            "truncated": msg.truncated or self.cut,
            "timed_out": msg.timed_out,
        }


def _exec_refusal(msg: protocol.Error) -> dict[str, Any]:
    """The reply to an ``exec`` the agent answered with ``error``: an agent older than ``exec``
    (``unknown_type``) must be upgraded; else the agent's code (``exec_not_running``, ...)."""
    code = "agent_too_old" if msg.code == protocol.ERR_UNKNOWN_TYPE else msg.code
    return {"type": "exec.reply", "error": code, "message": msg.message}


@agent_db
def _desired(view: gateway.AgentView) -> list[protocol.Message] | None:
    return gateway.desired_commands_many([view])[view.host_id]


class AgentConsumer(LayerReadConsumer):
    """One agent connection at ``/ws/agent/``, member of group ``host.<id>``; its channel-layer read
    is ended by a message, never cancelled (:mod:`scheduler.layer_read`, sig28)."""

    READ_OF = "agent connection"

    host: Host | None = None
    handler: asyncio.Task[None] | None = None
    in_hubs = False  # a member of gateway.HUBS_GROUP (the hub's delegate, now or before)
    socket_closed = False  # the disconnect began: nothing more is sent
    exec_as_text = False  # its agent is older than ``exec_bytes``: asked ``exec`` (exec47)

    async def connect(self) -> None:
        self.host = None
        self.seq = 0
        self.hello_done = False
        self.reported_running: set[int] | None = None
        # wire id -> when the agent last ran it by this connection's frames (the receipt of a
        # heartbeat listing it running or of a ``running``; the start a hello or a ``started``
        # dates): an exit report on this connection is never dated before it
        self.heard_running: dict[int, datetime] = {}
        self.sent_starts: set[int] = set()
        self.sent_stops: set[int] = set()
        # ``logs`` message id -> (attempt id, reply channel) of log tails asked for by the API
        self.log_requests: dict[int, tuple[int, str]] = {}
        # ``exec`` message id -> its output so far (stdout, stderr, bytes kept) and reply channel
        self.exec_requests: dict[int, _PendingExec] = {}
        self.exec_as_text = False
        # ``exec_tty`` message id -> the channel of its reader's session (scheduler.exec_session)
        self.tty_sessions: dict[int, str] = {}
        self.lock = asyncio.Lock()
        # messages read and not yet handled (_handle_inbox), with their receipt times
        self.inbox: asyncio.Queue[tuple[protocol.Message, datetime]] = asyncio.Queue(maxsize=INBOX_MAX)
        self.handler: asyncio.Task[None] | None = None
        self.live = False  # registered with the hub: after hello, until disconnect
        # The hello's GPU inventory waits for approval: its heartbeats' GPU indices may not be the
        # registered ones, and are mapped by UUID (lifecycle.record_heartbeat, brk39).
        self.inventory_held = False
        self.closing = False  # superseded, revoked or fenced: nothing more is handled or sent
        self.generation = 0
        gateway.remember_server_loop(asyncio.get_running_loop())
        token = _bearer_token(self.scope)
        # Failed authentications per client address (flood51): past the bound, refused before any
        # query; a place is taken before the token is checked and given back when it is good.
        limit = agent_auth_limit.AgentAuthLimit(self.scope)
        wait_s = await limit.take()
        if wait_s is not None:
            await self.accept()
            agent_auth_limit.REFUSALS.note(limit.address, limit.rate)
            why = f"too many failed agent authentications from this address; try again in {math.ceil(wait_s)} s"
            await self.close(code=CLOSE_TRY_AGAIN_LATER, reason=_close_reason(why))
            return
        try:
            host = await _open_link(token)
            # the host and the reason when known, never the token (the IP alone named nobody: ops35)
            why, removed = await _link_refusal(token) if host is None else ("", False)
        except ServiceError as exc:  # the database lost (gateway.run_in_db_thread): come back later
            await limit.give_back()  # not judged: counts nothing
            if not gateway.is_database_refusal(exc):
                raise
            await self.accept()
            await self._database_unreachable(exc)
            return
        if host is not None:
            await limit.give_back()  # a success counts nothing
        await self.accept()
        if host is None:
            logger.warning("agent connection refused: %s (from %s)", why, self.scope.get("client"))
            # and the agent is told it too (its log said "rotated or revoked?" to a removed host);
            # a removed host's with its own code, on which the agent stops (sec41: it retried for ever)
            code = protocol.CLOSE_HOST_REMOVED if removed else CLOSE_UNAUTHORIZED
            await self.close(code=code, reason=_close_reason(why))
            return
        self.host = host
        self.generation = host.link_generation
        # this connection's message ids start past those of the host's connections before it: an
        # agent older than brk61 answers a command of its previous connection (an exec runs up to
        # 600 s) on this one under its old id, which must name no request here (another person's)
        self.seq = (self.generation % (1 << 30)) << 32
        self.group = gateway.host_group(host.pk)
        try:
            async with gateway.hub().layer_slots:  # not hundreds of Redis connections opened at once
                await self.channel_layer.group_add(self.group, self.channel_name)
                # One live connection per host: the newest wins, older ones (in any web process) close.
                await self.channel_layer.group_send(
                    self.group, {"type": "agent.superseded", "generation": self.generation}
                )
        except gateway.LAYER_UNREACHABLE as exc:
            await self._layer_unreachable(exc)
            return
        logger.info("agent of host %s connected from %s", host.name, self.scope.get("client"))

    async def layer_read_failed(self, exc: BaseException) -> None:
        """The connection's channel-layer read failed (:class:`~scheduler.layer_read.LayerReadConsumer`):
        Redis went away (db61), the socket is closed (:meth:`_layer_unreachable`)."""
        await self._layer_unreachable(exc)

    async def _layer_unreachable(self, exc: BaseException) -> None:
        """The channel layer (Redis) cannot be reached (a restart; db61: a traceback, and the
        socket closed with 1011): one warning line, the connection closed with
        :data:`CLOSE_TRY_AGAIN_LATER`; the agent connects again. Once per connection."""
        if getattr(self, "layer_lost", False):
            return
        self.layer_lost = True
        host = self.host.name if getattr(self, "host", None) is not None else "?"
        logger.warning(
            "agent of host %s: the channel layer (Redis) cannot be reached (%s: %s); its connection is closed,"
            " it connects again",
            host,
            type(exc).__name__,
            exc,
        )
        self.closing = True
        self.live = False
        if getattr(self, "host", None) is not None:
            gateway.hub().unregister(self.host.pk, self)
        with contextlib.suppress(Exception):
            await self.close(code=CLOSE_TRY_AGAIN_LATER, reason=LAYER_UNREACHABLE_REASON)

    async def _database_unreachable(self, exc: ServiceError) -> None:
        """Its database work failed for want of the database (``exc``: 503 ``database_unavailable``
        or ``database_busy``, gateway.run_in_db_thread; ws63: a traceback per message, or at
        connect one and the socket closed 1011): one warning line, the connection closed with
        :data:`CLOSE_TRY_AGAIN_LATER`; the agent connects again, and its hello reports again what
        was not acknowledged. Once per connection."""
        if self.closing:
            return
        self.closing = True
        self.live = False
        host = self.host.name if getattr(self, "host", None) is not None else "?"
        cause = exc.__cause__ or exc
        logger.warning(
            "agent of host %s: %s (%s: %s); its connection is closed, it connects again",
            host,
            exc.message,
            type(cause).__name__,
            " ".join(str(cause).split()),
        )
        if self.host is not None:
            gateway.hub().unregister(self.host.pk, self)
        with contextlib.suppress(Exception):
            await self.close(code=CLOSE_TRY_AGAIN_LATER, reason=DATABASE_UNREACHABLE_REASON)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels' dispatch without its ``aclose_old_connections()`` before every message.

        That call is a trip to asgiref's one thread-sensitive thread per frame: every heartbeat of
        every connection of the process queued there behind all the consumers' database work,
        and while it waited Channels asked for no next message, so uvicorn stopped reading the
        socket (keepalive pongs included: agents were closed with 1011 after 20 s). No database
        connection is ever used on the event loop's thread here; the helpers that touch the
        database (:func:`scheduler.gateway.agent_db`) close theirs before and after."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message['type']}")
        await handler(message)

    async def disconnect(self, code: int) -> None:
        # The socket is closed: what is still queued is recorded, but nothing is sent (an ack sent
        # to it raised ClientDisconnected, logged with its traceback, once per queued event).
        self.socket_closed = True
        for waiting in self.exec_requests.values():  # the agent will never answer on this connection
            with contextlib.suppress(Exception):
                await self.channel_layer.send(waiting.reply_to, {"type": "exec.reply", "error": "host_offline"})
        self.exec_requests.clear()
        for reader in self.tty_sessions.values():  # the agent ends them when its connection ends
            with contextlib.suppress(Exception):
                await self.channel_layer.send(reader, {"type": "exec.tty.end", "error": "host_offline"})
        self.tty_sessions.clear()
        if code == CLOSE_SERVICE_RESTART:  # uvicorn's graceful shutdown (SIGTERM): the process stops
            gateway.hub().stop()
        await self._finish_inbox()
        if self.host is not None:
            self.live = False
            gateway.hub().unregister(self.host.pk, self)
            if code == CLOSE_SERVICE_RESTART:
                # uvicorn's graceful shutdown closed the socket (SIGTERM): the process stops, its
                # hub's flusher with it; the buffered heartbeats are written now, not lost.
                await gateway.hub().flush()
            try:
                async with gateway.hub().layer_slots:  # a SIGTERM ends them all at once (gateway.LAYER_SLOTS)
                    await self.channel_layer.group_discard(self.group, self.channel_name)
                    if self.in_hubs:
                        await self.channel_layer.group_discard(gateway.HUBS_GROUP, self.channel_name)
            except gateway.LAYER_UNREACHABLE:  # said once (_layer_unreachable); the membership expires
                pass
            logger.info("agent of host %s disconnected (%s)", self.host.name, code)

    async def _shut(self, code: int, why: str) -> None:
        """Close this connection for good: no message of it is handled, nothing more is sent."""
        if self.closing:
            return
        self.closing = True
        self.live = False
        if self.host is not None:
            gateway.hub().unregister(self.host.pk, self)
            logger.warning("closing the connection of host %s: %s", self.host.name, why)
        await self.close(code=code, reason=_close_reason(why))

    async def agent_superseded(self, event: dict[str, Any]) -> None:
        """Group event ``agent.superseded``: a newer connection of this host was accepted."""
        if int(event.get("generation", 0)) > self.generation:
            await self._shut(CLOSE_SUPERSEDED, "a newer connection with this host's token was accepted")

    async def agent_revoked(self, event: dict[str, Any]) -> None:
        """Group event ``agent.revoked`` (gateway.close_host_links): the host token was rotated or
        revoked; connections accepted since (with the new token) stay."""
        before = event.get("before")
        if before is None or self.generation < int(before):
            if event.get("reason") == "removed":  # services.do_remove_host
                await self._shut(protocol.CLOSE_HOST_REMOVED, protocol.HOST_REMOVED_REASON)
            else:
                await self._shut(CLOSE_UNAUTHORIZED, f"host token {event.get('reason') or 'changed'}")

    async def fenced(self) -> None:
        """The hub found this connection stale (a newer one, another token, or the host removed since)."""
        state = "same" if self.host is None else await _token_state(self.host)
        if state == "removed":
            await self._shut(protocol.CLOSE_HOST_REMOVED, protocol.HOST_REMOVED_REASON)
        elif state == "changed":
            await self._shut(CLOSE_UNAUTHORIZED, "host token changed")
        else:
            await self._shut(CLOSE_SUPERSEDED, "no longer the host's live connection")

    async def send_msg(self, msg: protocol.Message, seq: int | None = None) -> None:
        """Encode and send ``msg`` with this connection's next sequence number (or ``seq``, one
        taken before: :meth:`exec_tty_open`)."""
        if self.closing or self.socket_closed:
            return
        if seq is None:
            self.seq += 1
            seq = self.seq
        try:
            text = protocol.encode(type(msg)(**{**_fields(msg), "id": seq}))
        except protocol.ProtocolError as exc:
            logger.error("not sending invalid %s to %s: %s", msg.TYPE, self.host, exc)
            return
        await self.send(text_data=text)

    async def send_error(self, code: str, message: str, ref: int | None) -> None:
        await self.send_msg(protocol.Error(code=code, message=message[:2000], ref=ref))

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if self.host is None or self.closing:
            return
        try:
            msg = protocol.decode(
                text_data if text_data is not None else (bytes_data or b""), allowed=protocol.AGENT_MESSAGE_TYPES
            )
        except protocol.ProtocolError as exc:
            logger.warning("bad message from host %s: %s", self.host.name, exc)
            await self.send_error(exc.code, exc.message, exc.ref)
            return
        received = timezone.now()  # before any wait for this connection's earlier messages
        if self.hello_done and isinstance(msg, protocol.Heartbeat) and self.inbox.empty() and not self.lock.locked():
            # Nothing of this connection is queued or being handled (the handler takes a message
            # out of the inbox and the lock in one step): a heartbeat, which waits for nothing, is
            # handled here in its turn, without the inbox's hop to the handler task.
            try:
                self._heartbeat(msg, received)
            except Exception:
                logger.exception("handling heartbeat from host %s failed", self.host.name)
                await self.send_error("internal", "the server could not handle this heartbeat", msg.id)
            return
        if self.hello_done and isinstance(msg, protocol.Heartbeat):
            # It waits its turn behind this connection's earlier messages (an attempt event waiting
            # for the agent-database threads: seconds after a tick's burst of starts), but the host
            # is alive now: the hub's next flush refreshes its last_heartbeat meanwhile, so that
            # the sweep does not take a connected host offline (docs/benchmarks/api_load.md, hb34).
            gateway.hub().alive(self.host.pk, self, received)
        if self.handler is None or self.handler.done():
            self.handler = asyncio.get_running_loop().create_task(self._handle_inbox())
        await self.inbox.put((msg, received))  # waits (stops reading) only when INBOX_MAX are queued

    async def _handle_inbox(self) -> None:
        """Handle this connection's messages one at a time, in the order they arrived.

        Apart from :meth:`receive`, so that a message waiting for the database (a hello, an
        attempt event: a row lock held by the tick, a pool whose connections HTTP requests hold)
        does not stop the reading of the socket: Channels asks for the next message only once
        ``receive`` returned, and uvicorn reads nothing meanwhile, keepalive pongs included (it
        closes the connection with 1011 when a pong is 20 s late)."""
        while True:
            msg, received = await self.inbox.get()
            try:
                if self.closing or self.host is None:
                    continue
                async with self.lock:  # also held by deliver(): commands and events stay in order
                    try:
                        await self.dispatch_message(msg, received)
                    except Exception as exc:
                        if gateway.is_database_refusal(exc):  # the database lost
                            await self._database_unreachable(exc)
                            continue
                        logger.exception("handling %s from host %s failed", msg.TYPE, self.host.name)
                        with contextlib.suppress(Exception):  # the connection may be gone: go on with the rest
                            await self.send_error("internal", f"the server could not handle this {msg.TYPE}", msg.id)
            finally:
                self.inbox.task_done()

    async def _finish_inbox(self) -> None:
        """Handle what is still queued (an ``exited`` sent just before the agent closed counts),
        then end the handler; bounded by :data:`INBOX_DRAIN_S`, and cut short when the process
        stops (:meth:`scheduler.gateway.AgentHub.stop`): then only the message being handled
        finishes (the handler's cancel waits for its database call); the others were not
        acknowledged, and the agent reports them again in its next hello."""
        handler = self.handler
        if handler is None:
            return
        if not handler.done():
            stopping = gateway.hub().stopping
            drained = asyncio.ensure_future(self.inbox.join())
            stopped = asyncio.ensure_future(stopping.wait())
            try:
                await asyncio.wait([drained, stopped], timeout=INBOX_DRAIN_S, return_when=asyncio.FIRST_COMPLETED)
                handled = drained.done()
            finally:
                drained.cancel()
                stopped.cancel()
            if not handled:
                why = "the process stops" if stopping.is_set() else f"not handled within {INBOX_DRAIN_S:g}s"
                logger.warning(
                    "host %s: %d messages left unhandled at disconnect (%s)", self.host, self.inbox.qsize(), why
                )
        handler.cancel()
        try:
            await handler
        except asyncio.CancelledError:
            pass
        except Exception:  # it ends only by this cancel; anything else is logged, not raised here
            logger.warning("the message handler of host %s ended with an error", self.host, exc_info=True)

    async def dispatch_message(self, msg: protocol.Message, received: datetime | None = None) -> None:
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
            received = received or timezone.now()
            unconfirmed = await _hello(self.host, self.generation, msg, received)
            if unconfirmed is None:
                await self.fenced()
                return
            self.hello_done = True
            self.inventory_held = self.host.pending_inventory is not None  # set by _hello's host_hello
            # A running attempt whose start is still unconfirmed counts as not running for this
            # reconcile: its start is sent again, once, and the agent's answer confirms it.
            self.reported_running = {a.attempt_id for a in msg.attempts if a.state == "running"} - unconfirmed
            # A hello lists running an attempt whose start was never acknowledged even if it has
            # exited since (its exit follows): it says only that it ran at its start.
            self.heard_running = {
                a.attempt_id: received - timedelta(seconds=max(0.0, a.age_s))
                for a in msg.attempts
                if a.state == "running" and a.age_s is not None
            }
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
            self._heartbeat(msg, received or timezone.now())
        elif isinstance(msg, protocol.AttemptEvent):
            received = received or timezone.now()
            alive_at = self.heard_running.get(msg.attempt_id)
            if not await _attempt_event(self.host, self.generation, msg, received, alive_at):
                await self.fenced()
                return
            if msg.state == "running":  # a live answer: it runs now
                self.heard_running[msg.attempt_id] = received
            elif msg.state == "started":  # perhaps re-sent: it ran at its start
                self.heard_running[msg.attempt_id] = received - timedelta(seconds=max(0.0, msg.age_s or 0.0))
            else:
                self.heard_running.pop(msg.attempt_id, None)
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
        elif isinstance(msg, protocol.ExecOutput):
            waiting = self.exec_requests.get(msg.ref)
            if waiting is not None:  # an agent older than exec_bytes: text (exec47, one release)
                waiting.add(msg.stream, msg.data.encode())
            elif (reader := self.tty_sessions.get(msg.ref)) is not None:
                await self._to_reader(msg.ref, reader, {"type": "exec.tty.output", "data": msg.data})
        elif isinstance(msg, protocol.ExecStarted):  # an exec_pipe's command runs: its input may come
            if (reader := self.tty_sessions.get(msg.ref)) is not None:
                await self._to_reader(msg.ref, reader, {"type": "exec.started"})
        elif isinstance(msg, protocol.ExecData):
            if msg.ref in self.exec_requests:
                await self._exec_data(msg)
            elif (reader := self.tty_sessions.get(msg.ref)) is not None:
                data = {"stream": msg.stream, "data": msg.data, "eof": msg.eof}
                await self._to_reader(msg.ref, reader, {"type": "exec.data", **data})
        elif isinstance(msg, protocol.PortData):
            if (reader := self.tty_sessions.get(msg.ref)) is not None:
                await self._to_reader(msg.ref, reader, {"type": "port.data", "data": msg.data, "eof": msg.eof})
        elif isinstance(msg, protocol.ExecAck):  # of a forwarded connection: its reader may send more
            if (reader := self.tty_sessions.get(msg.ref)) is not None:
                await self._to_reader(msg.ref, reader, {"type": "port.ack", "bytes": msg.bytes, "chunks": msg.chunks})
        elif isinstance(msg, protocol.ExecResult):
            waiting = self.exec_requests.pop(msg.ref, None)
            if waiting is not None:
                await self.channel_layer.send(waiting.reply_to, waiting.reply(msg))
            elif (reader := self.tty_sessions.pop(msg.ref, None)) is not None:
                end = {"exit_code": msg.exit_code, "timed_out": msg.timed_out, "message": msg.message}
                await self._to_reader(msg.ref, reader, {"type": "exec.tty.end", **end})
        elif isinstance(msg, protocol.Error):
            reader = self.tty_sessions.pop(msg.ref, None) if msg.ref is not None else None
            if reader is not None:
                await self._to_reader(msg.ref, reader, {**_exec_refusal(msg), "type": "exec.tty.end"})
                return
            ran = self.exec_requests.pop(msg.ref, None) if msg.ref is not None else None
            if (
                ran is not None
                and msg.code == protocol.ERR_UNKNOWN_TYPE
                and isinstance(ran.request, protocol.ExecBytes)
            ):
                # an agent older than exec_bytes (exec47): asked exec, its output then text
                self.exec_as_text = True
                request = protocol.Exec(**{**_fields(ran.request), "id": 0})
                self.exec_requests[self.seq + 1] = dataclasses.replace(ran, request=request)
                await self.send_msg(request)
                return
            if ran is not None:
                await self.channel_layer.send(ran.reply_to, _exec_refusal(msg))
                return
            pending = self.log_requests.pop(msg.ref, None) if msg.ref is not None else None
            if pending is not None:
                await self.channel_layer.send(pending[1], {"type": "logs.reply", "error": f"agent: {msg.message}"})
                return
            logger.warning(
                "agent of host %s reports error %s: %s (ref %s)", self.host.name, msg.code, msg.message, msg.ref
            )

    def _heartbeat(self, msg: protocol.Heartbeat, received: datetime) -> None:
        """A heartbeat after the hello: buffered in the hub (waits for nothing)."""
        assert self.host is not None  # noqa: S101 -- receive() checks it
        self.reported_running = set(msg.running)
        # those no longer listed keep the last time they were (their exit report is on its way)
        self.heard_running.update(dict.fromkeys(msg.running, received))
        if len(self.heard_running) > 8192:  # ids that went without an exit report: forget them
            self.heard_running = {a: at for a, at in self.heard_running.items() if a in self.reported_running}
        # Level-triggered: a start the agent does not report running is sent again (the agent
        # answers a repeated start with what it knows); a stop is sent once per connection
        # while the attempt runs (a second SIGTERM would restart nothing) and again once it
        # no longer runs but is still open here (the agent answers with its exit). The hub's
        # next flush writes the heartbeat and reconciles (deliver()).
        self.sent_starts &= self.reported_running
        self.sent_stops &= self.reported_running
        gateway.hub().heartbeat(self.host.pk, self, received, _samples(msg))

    async def reconcile(self) -> None:
        """Send what the database wants on this host and the agent does not have yet (lock held)."""
        assert self.host is not None  # noqa: S101 -- only called on authenticated connections
        commands = await _desired(self.agent_view())
        if commands is None:
            await self.fenced()
            return
        await self._send_commands(commands)

    def agent_view(self) -> gateway.AgentView:
        """What this connection knows of its agent, for a desired-state computation (the hub's)."""
        assert self.host is not None  # noqa: S101 -- only called on authenticated connections
        running = None if self.reported_running is None else set(self.reported_running)
        return gateway.AgentView(
            self.host.pk, running, set(self.sent_starts), set(self.sent_stops), generation=self.generation
        )

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
        if self.host is None or not self.hello_done or self.closing:
            return
        if len(self.log_requests) >= MAX_PENDING_LOG_REQUESTS:
            self.log_requests.pop(min(self.log_requests))
        # send_msg gives the message the next id; the agent's error about it names that id
        self.log_requests[self.seq + 1] = (int(event["attempt_id"]), str(event["reply_to"]))
        await self.send_msg(protocol.Logs(attempt_id=int(event["attempt_id"]), tail_bytes=int(event["tail_bytes"])))

    async def exec_request(self, event: dict[str, Any]) -> None:
        """Group event ``exec.request`` (gateway.request_exec): ask the agent to run a one-shot
        command in an attempt; its ``exec_output`` and ``exec_result`` (or ``error``) are gathered
        here and answered to ``reply_to`` in one message, output capped at ``max_output`` per stream."""
        if self.host is None or not self.hello_done or self.closing:
            return
        reply_to = str(event["reply_to"])
        now = time.monotonic()
        for ref in [ref for ref, waiting in self.exec_requests.items() if waiting.deadline < now]:
            # its requester gave up (gateway.request_exec's wait): one the agent never answered
            # held a slot for the connection's life, and 16 made every exec here ``busy`` (brk59)
            del self.exec_requests[ref]
        if len(self.exec_requests) >= MAX_PENDING_EXECS:
            await self.channel_layer.send(reply_to, {"type": "exec.reply", "error": "busy"})
            return
        max_output = int(event["max_output"])
        ask = protocol.Exec if self.exec_as_text else protocol.ExecBytes
        msg = ask(
            attempt_id=int(event["attempt_id"]),
            command=[str(word) for word in event["command"]],
            timeout_s=int(event["timeout_s"]),
            max_output=max_output,
        )
        try:
            protocol.encode(msg)
        except protocol.ProtocolError as exc:  # the API checks it: answered at once, never left to time out
            await self.channel_layer.send(reply_to, {"type": "exec.reply", "error": "exec_failed", "message": str(exc)})
            return
        # send_msg gives the message the next id; the agent's answers name that id
        wait_s = int(event["timeout_s"]) + gateway.EXEC_REPLY_GRACE_S
        self.exec_requests[self.seq + 1] = _PendingExec(reply_to, max_output, deadline=now + wait_s, request=msg)
        await self.send_msg(msg)

    async def _exec_data(self, msg: protocol.ExecData) -> None:
        """The next bytes of an ``exec_bytes``'s output; a frame the command cannot have (not
        base64, its ``stdin``) ends it, answered ``exec_failed`` (its later frames go nowhere)."""
        waiting = self.exec_requests[msg.ref]
        why = execs.STDIN_AS_OUTPUT
        if msg.stream != "stdin":
            try:
                waiting.add(msg.stream, base64.b64decode(msg.data, validate=True))
                return
            except binascii.Error:
                why = execs.NOT_BASE64
        logger.warning("exec %s on host %s refused: %s", msg.ref, self.host, why)
        del self.exec_requests[msg.ref]
        await self.channel_layer.send(waiting.reply_to, {"type": "exec.reply", "error": "exec_failed", "message": why})

    # --- interactive sessions (``exec_tty``: scheduler.exec_session relays a reader's websocket) ---

    async def _to_reader(self, ref: int, reader: str, message: dict[str, Any]) -> None:
        """Send ``message`` to the session ``ref``'s reader; one whose channel is full (it reads
        nothing: the agent's window bounds what it is sent, so a reader that is gone) ends it."""
        try:
            await self.channel_layer.send(reader, message)
        except Exception:  # ChannelFull, Redis gone: the session cannot go on
            logger.warning("interactive session %s on host %s: its reader is unreachable", ref, self.host)
            if self.tty_sessions.pop(ref, None) is not None:
                await self.send_msg(protocol.ExecClose(ref=ref))

    async def exec_tty_open(self, event: dict[str, Any]) -> None:
        """Group event ``exec.tty.open`` (scheduler.exec_session): ask the agent to open an
        interactive session in an attempt; the reader is told this connection's channel and the
        session's id (``exec.tty.opened``), then gets its output and end from here."""
        msg = protocol.ExecTty(
            attempt_id=int(event["attempt_id"]),
            command=[str(word) for word in event["command"]],
            rows=int(event["rows"]),
            cols=int(event["cols"]),
            idle_s=int(event["idle_s"]),
        )
        await self._open_stream(str(event["reply_to"]), msg)

    async def exec_pipe_open(self, event: dict[str, Any]) -> None:
        """Group event ``exec.pipe.open`` (scheduler.exec_session, pf63): a session whose bytes go
        as they are (``exec_pipe``: on a terminal, or piped without one), as :meth:`exec_tty_open`."""
        msg = protocol.ExecPipe(
            attempt_id=int(event["attempt_id"]),
            command=[str(word) for word in event["command"]],
            tty=bool(event["tty"]),
            rows=int(event["rows"]),
            cols=int(event["cols"]),
            idle_s=int(event["idle_s"]),
        )
        await self._open_stream(str(event["reply_to"]), msg)

    async def exec_data(self, event: dict[str, Any]) -> None:
        """A reader's input (base64) or its end for an ``exec_pipe`` session."""
        if int(event["ref"]) in self.tty_sessions:
            msg = protocol.ExecData(
                ref=int(event["ref"]), stream="stdin", data=str(event["data"]), eof=bool(event["eof"])
            )
            await self.send_msg(msg)
            await self._relayed(event)

    async def port_open(self, event: dict[str, Any]) -> None:
        """Group event ``port.open`` (scheduler.port_forward): ask the agent to connect to a port in
        an attempt and relay that connection, as :meth:`exec_tty_open` does a session."""
        msg = protocol.PortOpen(
            attempt_id=int(event["attempt_id"]), port=int(event["port"]), idle_s=int(event["idle_s"])
        )
        await self._open_stream(str(event["reply_to"]), msg)

    async def port_data(self, event: dict[str, Any]) -> None:
        if int(event["ref"]) in self.tty_sessions:
            msg = protocol.PortData(ref=int(event["ref"]), data=str(event["data"]), eof=bool(event["eof"]))
            await self.send_msg(msg)

    async def _open_stream(self, reader: str, msg: protocol.ExecTty | protocol.ExecPipe | protocol.PortOpen) -> None:
        """Send the agent ``msg`` (a session's or a forwarded connection's open) for ``reader``,
        which is told this connection's channel and the stream's id (``exec.tty.opened``)."""
        if self.host is None or not self.hello_done or self.closing:
            return
        if len(self.tty_sessions) >= MAX_TTY_SESSIONS:
            await self.channel_layer.send(reader, {"type": "exec.tty.end", "error": "busy"})
            return
        try:
            protocol.encode(msg)
        except protocol.ProtocolError as exc:
            await self.channel_layer.send(reader, {"type": "exec.tty.end", "error": "exec_failed", "message": str(exc)})
            return
        # the message's id, the agent's answers name it: taken now, as the reader is told it before
        # it is sent (its output must not come first) and other tasks send meanwhile (brk61)
        self.seq += 1
        ref = self.seq
        self.tty_sessions[ref] = reader
        opened = {"type": "exec.tty.opened", "agent": self.channel_name, "ref": ref, "acks_relayed": True}
        await self.channel_layer.send(reader, opened)
        await self.send_msg(msg, seq=ref)

    async def exec_tty_input(self, event: dict[str, Any]) -> None:
        if int(event["ref"]) in self.tty_sessions:
            await self.send_msg(protocol.ExecInput(ref=int(event["ref"]), data=str(event["data"])))
            await self._relayed(event)

    async def _relayed(self, event: dict[str, Any]) -> None:
        """A terminal's input sent on to the agent (``relay_ack``: its bytes; flow49) is acknowledged
        to its reader, whose window moves on: so at most a window of each session's input waits in
        this connection's channel, whose buffer drops the oldest messages past its capacity (the
        host's pushes among them). A piped session's is acknowledged by the agent once written. A
        resize's (``resized``) lets the session send the next one."""
        if "relay_ack" in event and (reader := self.tty_sessions.get(int(event["ref"]))) is not None:
            if event["type"] == "exec.tty.resize":
                ack: dict[str, Any] = {"type": "port.ack", "bytes": 0, "chunks": 0, "resized": True}
            else:
                ack = {"type": "port.ack", "bytes": int(event["relay_ack"]), "chunks": 1}
            await self._to_reader(int(event["ref"]), reader, ack)

    async def exec_tty_resize(self, event: dict[str, Any]) -> None:
        if int(event["ref"]) in self.tty_sessions:
            msg = protocol.ExecResize(ref=int(event["ref"]), rows=int(event["rows"]), cols=int(event["cols"]))
            await self.send_msg(msg)
            await self._relayed(event)

    async def exec_tty_ack(self, event: dict[str, Any]) -> None:
        if int(event["ref"]) in self.tty_sessions:
            msg = protocol.ExecAck(ref=int(event["ref"]), bytes=int(event["bytes"]), chunks=int(event["chunks"]))
            await self.send_msg(msg)

    async def exec_tty_close(self, event: dict[str, Any]) -> None:
        """The reader left: the agent ends the session (its ``exec_result`` then goes nowhere).
        Without ``ref`` (to the host's group: the reader left before it was told the session's id),
        the session of the reader ``reply_to``, if this connection holds it (brk61)."""
        if "ref" in event:
            ref: int | None = int(event["ref"])
        else:
            ref = next((r for r, reader in self.tty_sessions.items() if reader == event.get("reply_to")), None)
        if ref is not None and self.tty_sessions.pop(ref, None) is not None:
            await self.send_msg(protocol.ExecClose(ref=ref))

    async def desired_state(self, event: dict[str, Any]) -> None:
        """Group event ``desired.state``: the database changed for the hosts it names
        (``hosts``: gateway.push_desired_state to :data:`~scheduler.gateway.HUBS_GROUP`, read by
        the hub's delegate for every connection of the process) or, without ``hosts``, for this
        connection's host (its own group).

        The hub batches the reconciles of all hosts pushed at about the same time."""
        hosts = event.get("hosts")
        if hosts is not None:
            gateway.hub().reconcile_hosts(hosts)
            return
        if self.host is None or not self.hello_done or not self.live:
            return
        gateway.hub().reconcile(self.host.pk, self)

    async def join_hubs(self) -> None:
        """Become the hub's member of :data:`~scheduler.gateway.HUBS_GROUP` (the hub's delegate:
        :meth:`scheduler.gateway.AgentHub.register`); :meth:`disconnect` leaves it."""
        layer = getattr(self, "channel_layer", None)
        if layer is None or self.closing or not self.live:
            return
        self.in_hubs = True  # group_add again (the hub's hourly call) renews the membership
        try:
            await layer.group_add(gateway.HUBS_GROUP, self.channel_name)
            if not self.live:  # ended meanwhile: its disconnect may have left the group already
                await layer.group_discard(gateway.HUBS_GROUP, self.channel_name)
        except Exception:  # the pushes then wait for the heartbeat flushes
            logger.warning("host %s: could not join the hubs' push group", self.host, exc_info=True)

    async def renew_host_group(self) -> None:
        """Join the host's group again (the hub's hourly call): channels-redis drops a member after
        its ``group_expiry`` (a day) unless re-added, and a connection older than that would miss
        its host's pushes, the close of a revoked token and the notice of a newer connection."""
        layer = getattr(self, "channel_layer", None)
        if layer is None or self.closing or not self.live or self.host is None:
            return
        try:
            async with gateway.hub().layer_slots:  # every connection of the process renews at once
                await layer.group_add(self.group, self.channel_name)
                if not self.live:  # ended meanwhile: its disconnect may have left the group already
                    await layer.group_discard(self.group, self.channel_name)
        except Exception:  # the flushes still fence it and send its host's starts
            logger.warning("host %s: could not renew its group membership", self.host, exc_info=True)


def _fields(msg: protocol.Message) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
