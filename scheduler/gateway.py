"""The server side of the agent link: desired state per host and the push that delivers it (DESIGN.md §2, §7).

Agents are level-triggered. :func:`desired_commands` compares what the database
wants on a host with what its agent last reported and returns the ``start`` and
``stop`` messages that close the gap; the consumer sends them after every
heartbeat and whenever :func:`push_desired_state` pokes its group. A lost push
therefore only delays a decision until the next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import signal
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, Subquery

from agent import protocol
from config.errors import ServiceError
from scheduler.models import GPU, AttemptGPU
from scheduler.policy.resources import share

logger = logging.getLogger(__name__)
_T = TypeVar("_T")

NOT_WANTED = "not_wanted"
"""Stop reason sent for an attempt the agent runs but the server does not want there."""
MASTER_PORT_BASE = 29500

_server_loop: asyncio.AbstractEventLoop | None = None
_server_loop_guard = threading.Lock()


_agent_db_executor: ThreadPoolExecutor | None = None
_agent_db_guard = threading.Lock()


def agent_db_threads() -> int:
    """Threads per process for the agent connections' database work (:func:`agent_db`):
    ``FAIRWAY["AGENT_DB_THREADS"]``; one on SQLite, whose writers take turns anyway."""
    from django.db import connection

    if connection.vendor == "sqlite":
        return 1
    return max(1, int(settings.FAIRWAY.get("AGENT_DB_THREADS", 4)))


def agent_db_executor() -> ThreadPoolExecutor:
    """The process's threads for the agent consumers' database work (made on first use)."""
    global _agent_db_executor
    with _agent_db_guard:
        if _agent_db_executor is None:
            _agent_db_executor = ThreadPoolExecutor(
                max_workers=agent_db_threads(), thread_name_prefix="fairway-agent-db"
            )
        return _agent_db_executor


def _closing_connections(fn: Callable[..., _T]) -> Callable[..., _T]:
    """``fn`` with this thread's database connections closed before and after (pooled: given back),
    and the database lost or out of connections raised as its refusal, a
    :class:`~config.errors.ServiceError` (503 ``database_unavailable``, ``database_busy``:
    :func:`config.middleware.database_refusal`, judged here, on the thread whose connection failed;
    the driver's error is its ``__cause__``). ws63: the consumers answer it (a session's refusal
    frame, an agent's close 1013) instead of a traceback."""
    from django.db import DatabaseError, close_old_connections

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> _T:
        close_old_connections()
        try:
            return fn(*args, **kwargs)
        except DatabaseError as exc:
            if (refusal := database_failure(exc)) is exc:
                raise
            raise refusal from exc
        finally:
            close_old_connections()

    return call


def database_failure(exc: BaseException) -> BaseException:
    """``exc`` as its refusal (a :class:`~config.errors.ServiceError`, 503 ``database_unavailable``
    or ``database_busy``: :func:`config.middleware.database_refusal`, ``exc`` its ``__cause__``)
    when it is the database lost or out of connections, else ``exc`` itself. Call it on the
    thread whose connection failed (a connection error without a SQLSTATE is judged by it)."""
    from django.db import DatabaseError

    from config.middleware import database_refusal

    if isinstance(exc, DatabaseError) and (refusal := database_refusal(exc)) is not None:
        refusal.__cause__ = exc
        return refusal
    return exc


def is_database_refusal(exc: BaseException) -> bool:
    """Whether ``exc`` is :func:`database_failure`'s refusal (the database lost or out of connections)."""
    return isinstance(exc, ServiceError) and exc.code in ("database_unavailable", "database_busy")


async def run_in_db_thread(executor: ThreadPoolExecutor, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``fn(*args, **kwargs)`` (sync, touches the database) on a thread of ``executor``, that
    thread's old database connections closed before and after (with the pool: given back to it).

    ``channels.db.database_sync_to_async`` closes them too, but through the module global
    ``channels.db.close_old_connections``, which Channels' test communicator replaces with a no-op
    for the whole process while a test awaits it (``channels.testing.ApplicationCommunicator``).
    A call that ended meanwhile kept its pooled connection: the agent threads held one each between
    calls, and each test's hub threads (one event loop per test) one each for good, until the pool
    (10 connections) was empty and a hello waited for a connection until the test's end (the
    agent-link tests failed 2-3 times in 100 with four agent threads; docs/benchmarks/api_load.md,
    "Sixth pass"). Django's own ``close_old_connections`` is called here instead."""
    from asgiref.sync import sync_to_async

    call = sync_to_async(_closing_connections(fn), thread_sensitive=False, executor=executor)
    return await call(*args, **kwargs)


def agent_db(fn: Callable[..., _T]) -> Callable[..., Awaitable[_T]]:
    """``fn`` (sync, touches the database) as a coroutine function that runs it on the process's
    agent-database threads (:func:`agent_db_executor`) with :func:`run_in_db_thread`.

    Not on asgiref's one thread-sensitive thread: there the database work of every connection
    of the process (connects, hellos, attempt events) waited in one queue, and a row lock held
    by a tick stopped all of them. A connection's own messages stay in order: the consumer
    handles one at a time (its lock), whatever thread runs the work."""

    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> _T:
        return await run_in_db_thread(agent_db_executor(), fn, *args, **kwargs)

    run.func = fn  # type: ignore[attr-defined] -- the sync function, as SyncToAsync names it (tests call it)
    return run


def drain_agent_db_threads(timeout: float = 20.0) -> None:
    """Wait until the agent-database threads finished the work they were given, and close their
    database connections (tests: before a transactional test's flush)."""
    with _agent_db_guard:
        executor = _agent_db_executor
    if executor is None:
        return
    n = executor._max_workers  # noqa: SLF001 -- one task per thread: the barrier holds each
    barrier = threading.Barrier(n)

    def close_all() -> None:
        from django.db import connections

        connections.close_all()
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout)

    for future in [executor.submit(close_all) for _ in range(n)]:
        future.result(timeout=timeout + 5)


def host_group(host_id: int) -> str:
    """The channel-layer group of one host's agent connection(s)."""
    return f"host.{host_id}"


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Record the event loop the consumers run on (in-memory channel layer: pushes must run there)."""
    global _server_loop
    with _server_loop_guard:
        _server_loop = loop


def open_agent_link(token: str) -> Any:
    """Authenticate a new agent connection by its host token and make it the host's live one.

    Returns the host with ``link_generation`` set to this connection's generation (one more
    than the last), or None for a bad token. Every older connection of the host is stale from
    now on: the consumer tells them to close (``agent.superseded``), and whatever the channel
    layer loses of that message, :func:`stale_hosts` keeps commands away from them."""
    from django.db import transaction
    from django.db.models import F

    from scheduler.models import Host
    from scheduler.services import authenticate_host_token

    host = authenticate_host_token(token) if token else None
    if host is None:
        return None
    with transaction.atomic():
        mine = Host.objects.filter(pk=host.pk, token_hash=host.token_hash, removed_at__isnull=True)
        if not mine.update(link_generation=F("link_generation") + 1):
            return None  # rotated, revoked or removed meanwhile
        host.link_generation = mine.values_list("link_generation", flat=True).get()
    return host


def link_refusal(token: str) -> tuple[str, bool]:
    """Why :func:`open_agent_link` refused ``token``, for the server's log: the host it names
    when one does (a removed host's agent, or a token rotated, revoked or removed while it
    connected), and never the token itself; and whether that host was removed (the agent is
    told so with its own close code, ``protocol.CLOSE_HOST_REMOVED``). Read only on a refusal."""
    from scheduler.models import Host
    from scheduler.services import _is_text, hash_host_token

    if not token:
        return "no host token (no Authorization: Bearer header)", False
    if not _is_text(token):
        return "a host token that is not text", False
    host = Host.objects.filter(token_hash=hash_host_token(token)).only("name", "removed_at").first()
    if host is None:
        # deploy48: a host that joined after the dump a restore brought back has no row either
        return (
            f"{protocol.UNKNOWN_TOKEN_REASON} (mistyped, rotated or revoked since,"
            " or its host joined after a restore's dump)",
            False,
        )
    if host.removed_at is not None:
        return f"host {ascii(host.name)} was removed from the cluster", True
    return f"host {ascii(host.name)}: its token was rotated, revoked or removed while it connected", False


HUBS_GROUP = "agent.hubs"
"""Channel-layer group of every web process's :class:`AgentHub` (one connection of each, its
*delegate*, is a member): a push names all its hosts in one message to this group."""


PUSH_PER_HOST_MAX = 3
"""A push of at most this many hosts goes to each host's own group (one message, read by the one web
process holding its connection); a larger one to :data:`HUBS_GROUP` (one message, read once by each
web process: 2–4 in the usual layouts)."""


def _layer_unreachable_errors() -> tuple[type[BaseException], ...]:
    try:
        import redis.exceptions
    except ImportError:  # pragma: no cover -- redis is a dependency of channels-redis and dramatiq
        return (ConnectionError,)
    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError)


LAYER_UNREACHABLE = _layer_unreachable_errors()
"""What the channel layer raises when Redis cannot be reached (a restart, a failover): redis-py's
connection and timeout errors, and the OS's (db61)."""


def layer_failed(exc: BaseException) -> str:
    """The words of a channel layer's failure in a refusal (``exec_unavailable``'s parenthesis)."""
    return f"the channel layer failed: {type(exc).__name__}"


LAYER_SLOTS = 8
"""Group joins and leaves of the agent connections of one web process in flight at once
(:attr:`AgentHub.layer_slots`: at connect, at disconnect, the hourly renewals). Each takes a Redis
connection of channels-redis's pool for its round trip, and the pool opens a new one whenever none
is free (a TCP connect, a handshake and redis-py's driver-info lookup in the package metadata): 500
connections ending at once (a SIGTERM with its agents connected, closing them all with 1012) opened
hundreds of Redis connections together, and a web process still ran 8 s after its SIGTERM with 250
of its connections waiting in ``group_discard`` (docs/benchmarks/api_load.md, web30). Queued behind
a few slots they reuse a few pooled connections, one round trip each."""
LAYER_SEND_TIMEOUT_S = 5.0
"""How long a push (or a close of agent connections) from a thread waits for its channel-layer
sends on the process's own layer loop; a push not sent by then is repaired by the next heartbeat."""
HUBS_REJOIN_S = 3600.0
"""How often the hub joins :data:`HUBS_GROUP` (its delegate) and each connection its host's group again
(channels-redis drops a member after its group expiry: a day)."""


def push_desired_state(host_ids: Iterable[int]) -> None:
    """Tell the consumers of these hosts to (re)send their desired state. Call after commit; never
    raises.

    More than :data:`PUSH_PER_HOST_MAX` hosts (a tick's placements): one ``desired.state``
    message naming every host goes to :data:`HUBS_GROUP`: each web process's
    hub gets it once (through its delegate connection) and reconciles the hosts it holds
    (:meth:`AgentHub.reconcile_hosts`). It was one group message per host: four Redis round trips
    each in the tick's process and one channel-layer read each in the web process, on its event
    loop, which under load made a push of tens of hosts arrive seconds after the tick's commit,
    later than the hosts' next heartbeat flush (docs/benchmarks/api_load.md, web29). A push lost
    (no delegate yet) is repaired by the host's next heartbeat flush, as before.

    With the in-memory channel layer (embedded mode) the group send is scheduled
    on the web server's event loop, where the consumers' queues live; from any
    other thread it would not wake them.
    """
    ids = sorted(set(host_ids))
    if len(ids) > PUSH_PER_HOST_MAX:
        _group_sends([(HUBS_GROUP, {"type": "desired.state", "hosts": ids})], "push of desired state", ids)
    else:  # a message to each web process would be more messages than one per host
        _group_send_all(ids, {"type": "desired.state"}, "push of desired state")


def close_host_links(host_ids: Iterable[int], reason: str = "token", *, before: int | None = None) -> None:
    """Close the agent connections of these hosts at once (token rotated or revoked): those accepted
    before generation ``before`` (None: all). Call after commit; never raises. A connection the
    message misses is fenced anyway: its host's ``link_generation`` moved on, so it is sent no
    command and closed at its next flush."""
    message = {"type": "agent.revoked", "reason": reason, "before": before}
    _group_send_all(host_ids, message, "closing of agent connections")


def _group_send_all(host_ids: Iterable[int], message: dict[str, Any], what: str) -> None:
    ids = sorted(set(host_ids))
    if ids:
        _group_sends([(host_group(hid), message) for hid in ids], what, ids)


def _group_sends(sends: list[tuple[str, dict[str, Any]]], what: str, ids: list[int]) -> None:
    """Send each ``(group, message)`` in order (see :func:`push_desired_state`); never raises."""
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all(layer: Any = layer) -> None:
        for group, message in sends:
            await layer.group_send(group, dict(message))

    try:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = _server_loop
        if _is_in_memory(layer):
            if loop is not None and loop.is_running():
                if running is loop:
                    loop.create_task(send_all())
                else:
                    asyncio.run_coroutine_threadsafe(send_all(), loop)
                return
        elif running is None:
            # The process's own layer loop (:func:`_log_tail_runner`): ``async_to_sync`` made a thread,
            # an event loop and a Redis connection per push in the tick's process (its connect and
            # handshake ~4 ms of CPU, 26–89 ms of the tick's hooks under load), and in a web process
            # it waited for the server's event loop (docs/benchmarks/api_load.md, "push36").
            private, own = _log_tail_runner()
            asyncio.run_coroutine_threadsafe(send_all(own), private).result(LAYER_SEND_TIMEOUT_S)
            return
        async_to_sync(send_all)()
    except Exception:  # a failed push is repaired by the next heartbeat
        logger.warning("%s to hosts %s failed", what, ids, exc_info=True)


def _is_in_memory(layer: Any) -> bool:
    return type(layer).__name__ == "InMemoryChannelLayer"


@dataclass(slots=True)
class _Part:
    attempt_id: int  # the wire id (what the agent knows the attempt by)
    pk: int
    workload_id: int
    stop_reason: str
    stopping: bool
    image: str
    command: list[str]
    env: dict[str, Any]
    rank: int
    gpus: list[tuple[int, str]]  # (index, uuid)
    owner: protocol.Owner | None = None
    allow_root: bool = False  # the cluster's allow_root_workloads
    requests: tuple[int | None, int | None, int | None] = (None, None, None)  # CPUs, memory, shm
    host_res: tuple[int | None, int | None] = (None, None)  # the host's CPUs, memory
    host_gpus: int = 0  # the host's registered GPUs
    mounts: list[protocol.Mount] = field(default_factory=list)  # resolved at submission (docs/jobs.md)


def plain_env(env: Any) -> dict[str, str]:
    """``{"NAME": {"value": v, "secret": b}}`` (or ``{"NAME": v}``) → ``{"NAME": str(v)}``."""
    out: dict[str, str] = {}
    if not isinstance(env, dict):
        return out
    for key, spec in env.items():
        value = spec.get("value", "") if isinstance(spec, dict) else spec
        out[str(key)] = "" if value is None else str(value)
    return out


@dataclass(slots=True)
class AgentView:
    """What one connection knows of its agent when desired state is computed for it.

    Attempt ids are wire ids (``Attempt.wire_id``). ``generation``: the host's
    ``link_generation`` the connection was accepted with (None: not checked); a view whose
    host has moved on (a newer connection, a rotated or revoked token) is stale."""

    host_id: int
    reported_running: Collection[int] | None
    already_started: Collection[int] = ()
    already_stopped: Collection[int] = ()
    generation: int | None = None


def stale_hosts(views: Sequence[AgentView]) -> set[int]:
    """Host ids of ``views`` whose connection is no longer the host's live one (one query)."""
    from scheduler.models import Host

    checked = {v.host_id: v.generation for v in views if v.generation is not None}
    if not checked:
        return set()
    current = dict(
        _raw_rows(
            f"SELECT id, link_generation FROM {_table(Host)} "  # noqa: S608 -- our own table name
            "WHERE id = ANY(%s::bigint[]) AND removed_at IS NULL",
            sorted(checked),
        )
        if _postgresql()
        else Host.objects.filter(pk__in=sorted(checked), removed_at__isnull=True).values_list("pk", "link_generation")
    )
    return {hid for hid, gen in checked.items() if current.get(hid) != gen}


def _postgresql() -> bool:
    from django.db import connection

    return connection.vendor == "postgresql"


def _table(model: Any) -> str:
    from django.db import connection

    return str(connection.ops.quote_name(model._meta.db_table))


def _raw_rows(sql: str, ids: list[int]) -> list[tuple[Any, ...]]:
    """Rows of ``sql``, whose one parameter is an array of ids (PostgreSQL): the two queries of
    every heartbeat flush (:func:`stale_hosts`, :func:`_open_on`) spent more CPU in the ORM's
    building and compiling of the query than in the rest of it (docs/benchmarks/api_load.md,
    "Fifteenth pass")."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, [ids])
        return cursor.fetchall()


def _open_on(host_ids: list[int]) -> list[tuple[int, int, int, Any, str]]:
    """(host id, wire id, attempt pk, stop requested at, stop reason) of every open GPU row of an
    attempt not ended on ``host_ids``: the narrow read of :func:`desired_commands_many`.

    PostgreSQL: driven by the hosts, their GPUs by the ``host`` index, each GPU's open row by the
    ``one_open_attempt_per_gpu`` index and its attempt by key (``OFFSET 0`` keeps each lateral
    lookup a lookup): the plain join, planned on tables without statistics, read every open GPU
    row of the installation to keep the hosts' (0.1-0.6 s a flush at 1,000 busy hosts on the
    loaded box; "lat32" in docs/benchmarks/api_load.md)."""
    from scheduler.models import Attempt

    if not _postgresql():
        return list(
            AttemptGPU.objects.filter(open=True, gpu__host_id__in=host_ids, attempt__ended_at__isnull=True).values_list(
                "gpu__host_id", "attempt__wire_id", "attempt_id", "attempt__stop_requested_at", "attempt__stop_reason"
            )
        )
    return _raw_rows(
        f"SELECT g.host_id, a.wire_id, ag.attempt_id, a.stop_requested_at, a.stop_reason "  # noqa: S608 -- our tables
        "FROM unnest(%s::bigint[]) h(id) "
        f"CROSS JOIN LATERAL (SELECT id, host_id FROM {_table(GPU)} WHERE host_id = h.id OFFSET 0) g "
        f"CROSS JOIN LATERAL (SELECT attempt_id FROM {_table(AttemptGPU)} WHERE gpu_id = g.id AND open OFFSET 0) ag "
        f"CROSS JOIN LATERAL (SELECT wire_id, stop_requested_at, stop_reason FROM {_table(Attempt)} "
        "WHERE id = ag.attempt_id AND ended_at IS NULL OFFSET 0) a",
        host_ids,
    )


def desired_commands(
    host_id: int,
    reported_running: Collection[int] | None,
    *,
    already_started: Collection[int] = (),
    already_stopped: Collection[int] = (),
    generation: int | None = None,
) -> list[protocol.Message] | None:
    """The ``start``/``stop`` messages that move host ``host_id`` towards the database's wishes.

    Attempt ids are wire ids (``Attempt.wire_id``), never primary keys: after a restore of the
    database, primary keys repeat but the agents still know the old attempts.
    ``reported_running``: attempt ids the agent last said it runs (None: unknown yet).
    - open attempt on this host, no stop issued, not reported running, not in
      ``already_started`` → ``start`` (this host's part only, with its GPUs);
    - open attempt with a stop issued, not in ``already_stopped`` → ``stop`` with the
      stop's reason (the agent answers a stop of an attempt it does not run with
      ``stopped``, and a repeated stop of an exited one with its exit);
    - reported running but not an open attempt on this host, not in ``already_stopped``
      → ``stop`` (``not_wanted``): attempt ids fence off stale copies (§4).
    A fixed number of queries whatever the number of attempts (:func:`desired_commands_many`).
    None: ``generation`` is given and stale (the connection must be closed, nothing is sent on it).
    """
    view = AgentView(host_id, reported_running, already_started, already_stopped, generation)
    return desired_commands_many([view])[host_id]


def desired_commands_many(views: Sequence[AgentView]) -> dict[int, list[protocol.Message] | None]:
    """:func:`desired_commands` of many hosts at once: host id → messages (every host of ``views``),
    or None for a stale view (:func:`stale_hosts`): it gets nothing, its connection is closed.

    One narrow query of the open attempts on these hosts (wire id, stop); only the attempts to
    start are then read whole with their gang layout (:func:`_parts_and_layout`: workload, owner,
    GPUs, limits, every GPU row of the gang; then the GPU counts of their hosts): one query when
    nothing is to start (every heartbeat flush of busy hosts), three when something is, one more
    when views carry a generation. The same messages as
    :func:`desired_commands_many_plain` (its oracle, tests/test_gateway_batch.py) from the same
    database state: every flush used to decode each open GPU row's workload command, environment
    and mounts to send nothing (docs/benchmarks/api_load.md, "hb27")."""
    stale = stale_hosts(views)
    out: dict[int, list[protocol.Message] | None] = {v.host_id: None if v.host_id in stale else [] for v in views}
    views = [v for v in views if v.host_id not in stale]
    if not views:
        return out
    # host id → wire id → (attempt pk, stop issued, stop reason); one row per open GPU of an attempt
    open_on: dict[int, dict[int, tuple[int, bool, str]]] = defaultdict(dict)
    for host_id, aid, pk, stop_at, stop_reason in _open_on(sorted(v.host_id for v in views)):
        if aid not in open_on[host_id]:
            open_on[host_id][aid] = (pk, stop_at is not None, stop_reason or "stopped")
    wanted: dict[int, set[int]] = {}  # host id → wire ids to start there
    for view in views:
        running = set(view.reported_running or ())
        wanted[view.host_id] = {
            aid
            for aid, (_pk, stopping, _r) in open_on.get(view.host_id, {}).items()
            if not stopping and aid not in running and aid not in view.already_started
        }
    pks = {open_on[hid][aid][0] for hid, aids in wanted.items() for aid in aids}
    parts, gangs = _parts_and_layout([hid for hid, aids in wanted.items() if aids], pks) if pks else ({}, {})
    to_start: dict[int, list[_Part]] = {
        # read again: a stop issued (or the attempt ended) between the two queries is not started
        hid: [p for aid, p in sorted(parts.get(hid, {}).items()) if aid in aids and not p.stopping]
        for hid, aids in wanted.items()
    }
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    for view in views:
        opened = {aid: (stopping, reason) for aid, (_pk, stopping, reason) in open_on.get(view.host_id, {}).items()}
        out[view.host_id] = _host_messages(view, to_start[view.host_id], opened, gangs, grace)
    return out


def desired_commands_many_plain(views: Sequence[AgentView]) -> dict[int, list[protocol.Message] | None]:
    """:func:`desired_commands_many` read plainly: every open attempt of these hosts read whole
    in one query, then the same rules (the oracle of the fast path; tests only)."""
    stale = stale_hosts(views)
    out: dict[int, list[protocol.Message] | None] = {v.host_id: None if v.host_id in stale else [] for v in views}
    views = [v for v in views if v.host_id not in stale]
    if not views:
        return out
    by_host = _open_parts([v.host_id for v in views])
    to_start: dict[int, list[_Part]] = {}
    for view in views:
        running = set(view.reported_running or ())
        to_start[view.host_id] = [
            part
            for aid, part in sorted(by_host.get(view.host_id, {}).items())
            if not part.stopping and aid not in running and aid not in view.already_started
        ]
    starting = [p.pk for parts in to_start.values() for p in parts]
    gangs = _gang_layout(starting) if starting else {}
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    for view in views:
        opened = {aid: (part.stopping, part.stop_reason) for aid, part in by_host.get(view.host_id, {}).items()}
        out[view.host_id] = _host_messages(view, to_start[view.host_id], opened, gangs, grace)
    return out


def _host_messages(
    view: AgentView,
    starts: list[_Part],
    opened: dict[int, tuple[bool, str]],
    gangs: dict[int, tuple[int, str, int]],
    grace: int,
) -> list[protocol.Message]:
    """One host's messages, in order (the rules of :func:`desired_commands`): its starts, a stop
    of each open attempt whose stop was issued (``opened``: wire id → (stop issued, reason)) and
    not yet sent, then ``not_wanted`` stops of attempts it runs that are not open on it."""
    messages: list[protocol.Message] = [_start_message(part, gangs, grace) for part in starts]
    for aid, (stopping, reason) in sorted(opened.items()):
        if stopping and aid not in view.already_stopped:
            messages.append(protocol.Stop(attempt_id=aid, reason=reason, grace_s=grace))
    running = set(view.reported_running or ())
    for aid in sorted(running - set(opened) - set(view.already_stopped)):
        messages.append(protocol.Stop(attempt_id=aid, reason=NOT_WANTED, grace_s=grace))
    return messages


_OWNER_FIELDS = (
    "attempt__workload__owner__username",
    "attempt__workload__owner__posix_uid",
    "attempt__workload__owner__posix_gid",
    "attempt__workload__owner__posix_groups",
)


_PART_FIELDS = (
    "gpu__host_id",
    "attempt__wire_id",
    "attempt_id",
    "attempt__workload_id",
    "attempt__stop_requested_at",
    "attempt__stop_reason",
    "attempt__workload__image",
    "attempt__workload__command",
    "attempt__workload__env",
    "attempt__workload__mounts",
    "rank",
    "gpu__index",
    "gpu__uuid",
    "gpu__host__cluster__allow_root_workloads",
    "attempt__workload__cpus",
    "attempt__workload__memory_bytes",
    "attempt__workload__shared_memory_bytes",
    "gpu__host__cpus",
    "gpu__host__memory_bytes",
    *_OWNER_FIELDS,
)
"""One GPU row of an attempt read whole (:func:`_parts_of_rows`, the plain reading :func:`_open_parts`)."""
_LAYOUT_FIELDS = ("attempt_id", "rank", "gpu__host__name", "gpu__host__labels")
"""One GPU row of an attempt for its gang layout (:func:`_layout_of_rows`)."""


def _with_host_gpus(rows: Any) -> Any:
    """``rows`` (AttemptGPU) annotated with ``host_gpus``: the registered GPUs of the row's host, in
    the same query (a correlated count per row: the plain reading, :func:`_open_parts`)."""
    host_gpus = Subquery(
        GPU.objects.registered()
        .filter(host_id=OuterRef("gpu__host_id"))
        .values("host_id")
        .annotate(n=Count("id"))
        .values("n"),
        output_field=IntegerField(),
    )
    return rows.annotate(host_gpus=host_gpus)


def _open_parts(host_ids: Collection[int], attempt_pks: Collection[int] | None = None) -> dict[int, dict[int, _Part]]:
    """host id → wire id → the open attempt's part on that host, read whole (one query, the host's
    GPU count in it): of every open attempt of ``host_ids``, or only of ``attempt_pks``."""
    rows = list(
        _with_host_gpus(
            AttemptGPU.objects.filter(
                open=True, gpu__host_id__in=sorted(host_ids), attempt__ended_at__isnull=True
            ).filter(**({} if attempt_pks is None else {"attempt_id__in": sorted(attempt_pks)}))
        ).values_list(*_PART_FIELDS, "host_gpus")
    )
    return _parts_of_rows((row[:-1] for row in rows), {row[0]: row[-1] or 0 for row in rows})


def _parts_and_layout(
    host_ids: Collection[int], attempt_pks: Collection[int]
) -> tuple[dict[int, dict[int, _Part]], dict[int, tuple[int, str, int]]]:
    """``(_open_parts(host_ids, attempt_pks), _gang_layout(attempt_pks))`` in two queries: every GPU
    row of those attempts (any host, open or not, as the layout counts them) with its host's name,
    ``address`` label, CPUs, memory, GPU count and its cluster's ``allow_root_workloads``
    (:func:`_gang_rows`); then each attempt once with its workload and owner (:func:`_attempt_rows`).
    The parts are the open rows on ``host_ids`` of attempts not ended.

    The workload's command, environment and mounts are decoded once per attempt and no host's
    labels at all: read with every GPU row (the plain join), a push of ~70 hosts decoded ~1,300
    JSON values for ~75 starts, ⅖ of its CPU, on a thread sharing its process's GIL with the
    HTTP threads (docs/benchmarks/api_load.md, "push36")."""
    hosts = set(host_ids)
    pks = sorted(attempt_pks)
    gang = _gang_rows(pks)
    attempts = _attempt_rows(pks)
    by_host: dict[int, dict[int, _Part]] = defaultdict(dict)
    layout: list[tuple[int, int, str, dict[str, Any]]] = []
    for pk, rank, is_open, host_id, index, uuid, name, address, host_c, host_m, root, host_gpus in gang:
        layout.append((pk, rank, name, {"address": address}))
        a = attempts.get(pk)
        if a is None or not is_open or a[4] or host_id not in hosts:
            continue
        aid = a[0]
        part = by_host[host_id].get(aid)
        if part is None:
            _aid, wid, stop_at, stop_reason, _ended, image, command, env, mounts, req_c, req_m, req_shm, *owner = a
            part = by_host[host_id][aid] = _new_part(
                (aid, pk, wid, stop_at, stop_reason, image, command, env, mounts, rank, root),
                (req_c, req_m, req_shm),
                (host_c, host_m, host_gpus or 0),
                owner,
            )
        part.gpus.append((index, uuid))
    return by_host, _layout_of_rows(layout)


def _gang_rows(attempt_pks: list[int]) -> list[tuple[Any, ...]]:
    """(attempt pk, rank, open, host id, GPU index, GPU uuid, host name, host's ``address`` label or
    None, host CPUs, host memory, cluster's ``allow_root_workloads``, host's registered GPUs) of every
    GPU row of ``attempt_pks`` (one query). PostgreSQL: each lookup by index (``OFFSET 0``, as
    :func:`_open_on`), each distinct host's GPU count by the GPUs' ``host`` index; the connections
    run with ``jit=off`` (config/settings.py), so the estimate of those counts on tables without
    statistics compiles nothing (it did in "lat32", docs/benchmarks/api_load.md)."""
    from scheduler.models import Cluster, Host

    if not _postgresql():
        rows = _with_host_gpus(AttemptGPU.objects.filter(attempt_id__in=attempt_pks)).values_list(
            "attempt_id",
            "rank",
            "open",
            "gpu__host_id",
            "gpu__index",
            "gpu__uuid",
            "gpu__host__name",
            "gpu__host__labels__address",
            "gpu__host__cpus",
            "gpu__host__memory_bytes",
            "gpu__host__cluster__allow_root_workloads",
            "host_gpus",
        )
        return list(rows)
    rows = _raw_rows(
        "WITH r AS MATERIALIZED (SELECT ag.attempt_id, ag.rank, ag.open, g.host_id, g.index, g.uuid "  # noqa: S608 -- our tables
        "FROM unnest(%s::bigint[]) x(id) "
        f"CROSS JOIN LATERAL (SELECT attempt_id, gpu_id, rank, open FROM {_table(AttemptGPU)} "
        "WHERE attempt_id = x.id OFFSET 0) ag "
        f"CROSS JOIN LATERAL (SELECT host_id, index, uuid FROM {_table(GPU)} WHERE id = ag.gpu_id OFFSET 0) g), "
        "hs AS (SELECT h.id, h.name, h.labels -> 'address' AS address, h.cpus, h.memory_bytes, "
        f"c.allow_root_workloads, (SELECT count(*) FROM {_table(GPU)} "
        "WHERE host_id = h.id AND removed_at IS NULL) AS n "
        "FROM (SELECT DISTINCT host_id FROM r) d "
        f"CROSS JOIN LATERAL (SELECT id, name, labels, cpus, memory_bytes, cluster_id FROM {_table(Host)} "
        "WHERE id = d.host_id OFFSET 0) h "
        f"CROSS JOIN LATERAL (SELECT allow_root_workloads FROM {_table(Cluster)} WHERE id = h.cluster_id OFFSET 0) c) "
        "SELECT r.attempt_id, r.rank, r.open, r.host_id, r.index, r.uuid, hs.name, hs.address, hs.cpus, "
        "hs.memory_bytes, hs.allow_root_workloads, hs.n FROM r JOIN hs ON hs.id = r.host_id",
        attempt_pks,
    )
    return [(*r[:7], None if r[7] is None else json.loads(r[7]), *r[8:]) for r in rows]


def _attempt_rows(attempt_pks: list[int]) -> dict[int, tuple[Any, ...]]:
    """attempt pk → (wire id, workload id, stop requested at, stop reason, ended, image, command,
    env, mounts, requested CPUs, memory, shared memory, owner's user name, uid, gid, groups), one
    row per attempt (one query): its JSON decoded once, whatever its number of GPUs."""
    from django.contrib.auth import get_user_model

    from scheduler.models import Attempt, Workload

    if not _postgresql():
        rows = Attempt.objects.filter(pk__in=attempt_pks).values_list(
            "pk",
            "wire_id",
            "workload_id",
            "stop_requested_at",
            "stop_reason",
            "ended_at",
            "workload__image",
            "workload__command",
            "workload__env",
            "workload__mounts",
            "workload__cpus",
            "workload__memory_bytes",
            "workload__shared_memory_bytes",
            "workload__owner__username",
            "workload__owner__posix_uid",
            "workload__owner__posix_gid",
            "workload__owner__posix_groups",
        )
        return {r[0]: (*r[1:5], r[5] is not None, *r[6:]) for r in rows}
    rows = _raw_rows(
        "SELECT a.id, a.wire_id, a.workload_id, a.stop_requested_at, a.stop_reason, a.ended_at IS NOT NULL, "  # noqa: S608 -- our tables
        "w.image, w.command, w.env, w.mounts, w.cpus, w.memory_bytes, w.shared_memory_bytes, "
        "u.username, u.posix_uid, u.posix_gid, u.posix_groups "
        "FROM unnest(%s::bigint[]) x(id) "
        f"CROSS JOIN LATERAL (SELECT id, wire_id, workload_id, stop_requested_at, stop_reason, ended_at "
        f"FROM {_table(Attempt)} WHERE id = x.id OFFSET 0) a "
        f"CROSS JOIN LATERAL (SELECT image, command, env, mounts, cpus, memory_bytes, shared_memory_bytes, owner_id "
        f"FROM {_table(Workload)} WHERE id = a.workload_id OFFSET 0) w "
        f"CROSS JOIN LATERAL (SELECT username, posix_uid, posix_gid, posix_groups FROM {_table(get_user_model())} "
        "WHERE id = w.owner_id OFFSET 0) u",
        attempt_pks,
    )
    loads = _json_value
    return {r[0]: (*r[1:7], loads(r[7]), loads(r[8]), loads(r[9]), *r[10:16], loads(r[16])) for r in rows}


def _json_value(raw: Any) -> Any:
    """A JSON column as a raw cursor returns it (text; None for SQL NULL) decoded."""
    return json.loads(raw) if isinstance(raw, str) else raw


def _parts_of_rows(rows: Iterable[Sequence[Any]], host_gpus: dict[int, int]) -> dict[int, dict[int, _Part]]:
    """host id → wire id → part, of rows of :data:`_PART_FIELDS` (one per GPU of a part);
    ``host_gpus``: host id → its registered GPUs."""
    by_host: dict[int, dict[int, _Part]] = defaultdict(dict)
    for row in rows:
        host_id, aid, pk, wid, stop_at, stop_reason, image, command, env, mounts, rank, index, uuid, root, *rest = row
        req_c, req_m, req_shm, host_c, host_m, *owner = rest
        parts = by_host[host_id]
        part = parts.get(aid)
        if part is None:
            part = parts[aid] = _new_part(
                (aid, pk, wid, stop_at, stop_reason, image, command, env, mounts, rank, root),
                (req_c, req_m, req_shm),
                (host_c, host_m, host_gpus.get(host_id, 0)),
                owner,
            )
        part.gpus.append((index, uuid))
    return by_host


def _new_part(
    attempt: Sequence[Any], requests: tuple[Any, Any, Any], host: tuple[Any, Any, int], owner: Sequence[Any]
) -> _Part:
    """One part, no GPU yet, from an attempt's fields as both readings have them (:func:`_parts_and_layout`,
    the plain :func:`_parts_of_rows`): ``attempt`` (wire id, pk, workload id, stop requested at, stop
    reason, image, command, env, mounts, rank, cluster's ``allow_root_workloads``), the workload's
    ``requests`` (CPUs, memory, shared memory), the ``host``'s (CPUs, memory, registered GPUs) and
    the ``owner``'s fields (:func:`owner_of`)."""
    aid, pk, wid, stop_at, stop_reason, image, command, env, mounts, rank, root = attempt
    return _Part(
        attempt_id=aid,
        pk=pk,
        workload_id=wid,
        stop_reason=stop_reason or "stopped",
        stopping=stop_at is not None,
        image=image or "",
        command=[str(c) for c in (command or [])],
        env=env or {},
        rank=rank,
        gpus=[],
        owner=owner_of(*owner),
        allow_root=bool(root),
        requests=requests,
        host_res=host[:2],
        host_gpus=host[2],
        mounts=[protocol.Mount(**m) for m in (mounts or [])],
    )


def limits_of(part: _Part) -> protocol.Limits | None:
    """The limits the runtime enforces for ``part`` (DESIGN.md §3.3): its workload's requests, a
    request left out being the host's per-GPU share of the GPUs it holds here
    (:func:`scheduler.policy.resources.share`); a host of unknown capacity limits only what was asked.

    A memory share below ``protocol.MIN_MEMORY_BYTES`` (many GPUs, little memory) is raised to it:
    Docker refuses a smaller limit and a cgroup that small kills the command before it runs, so every
    start failed (brk37); a request is never below it (refused at submission). The policy still
    counts the share itself (its shares never sum past the host; docs/resources.md). Shared memory is
    at most the memory limit: submission held it to the smallest share of the hosts then
    (``admission.infeasible_resources``), a host registered since may give less (docs/resources.md)."""
    (cpus, memory, shm), (host_c, host_m) = part.requests, part.host_res
    n, size = len(part.gpus), part.host_gpus
    cpus = cpus if cpus is not None else (share(host_c, n, size) if host_c is not None else None)
    if memory is None and host_m is not None:
        memory = max(share(host_m, n, size), protocol.MIN_MEMORY_BYTES)
    if shm is not None and memory is not None and shm > memory:  # a host registered after the submission's check
        shm = memory  # tmpfs pages count in the memory limit: more was a /dev/shm the limit broke (brk46)
    if not any((cpus, memory, shm)):
        return None
    return protocol.Limits(cpus=cpus or None, memory=memory or None, shared_memory=shm or None)


def _start_message(part: _Part, gangs: dict[int, tuple[int, str, int]], grace: int) -> protocol.Start:
    env = plain_env(part.env)
    nodes, master, world = gangs.get(part.pk, (1, "localhost", len(part.gpus)))
    env.update(
        {
            "MASTER_ADDR": master,
            "MASTER_PORT": str(MASTER_PORT_BASE + part.pk % 1000),
            "NNODES": str(nodes),
            "NODE_RANK": str(part.rank),
            "WORLD_SIZE": str(world),
        }
    )
    gpus = sorted(part.gpus)
    return protocol.Start(
        attempt_id=part.attempt_id,
        workload_id=part.workload_id,
        image=part.image,
        command=part.command,
        env=env,
        gpu_uuids=[u for _i, u in gpus],
        gpu_indices=[i for i, _u in gpus],
        grace_s=grace,
        owner=part.owner,
        allow_root=part.allow_root,
        limits=limits_of(part),
        mounts=part.mounts or None,  # none: as on the wire (left out, read back as null)
    )


def owner_of(username: str | None, uid: int | None, gid: int | None, groups: Any) -> protocol.Owner | None:
    """The ``start.owner`` of a workload's owner: the user name, and the POSIX identity an admin
    set (docs/isolation.md); the agent maps the name on its host when no uid is set."""
    if not username:
        return None
    return protocol.Owner(
        name=username[:256],
        uid=uid,
        gid=gid if uid is not None else None,
        groups=[int(g) for g in (groups or [])] if uid is not None else [],
    )


def _gang_layout(attempt_ids: list[int]) -> dict[int, tuple[int, str, int]]:
    """attempt id → (number of hosts, rank-0 host address, total GPUs), for rendezvous variables."""
    return _layout_of_rows(AttemptGPU.objects.filter(attempt_id__in=attempt_ids).values_list(*_LAYOUT_FIELDS))


def _layout_of_rows(rows: Iterable[Sequence[Any]]) -> dict[int, tuple[int, str, int]]:
    """:func:`_gang_layout` of rows of :data:`_LAYOUT_FIELDS` (every GPU row of the attempts)."""
    hosts: dict[int, dict[int, tuple[str, dict[str, Any]]]] = defaultdict(dict)
    gpus: dict[int, int] = defaultdict(int)
    for aid, rank, name, labels in rows:
        hosts[aid][rank] = (name, labels or {})
        gpus[aid] += 1
    out: dict[int, tuple[int, str, int]] = {}
    for aid, ranks in hosts.items():
        name, labels = ranks[min(ranks)]
        out[aid] = (len(ranks), str(labels.get("address") or name), gpus[aid])
    return out


# --- the per-process hub: coalesced heartbeats and batched reconciles -----------------------------


def flush_interval() -> float:
    """Seconds between two heartbeat flushes: ``FAIRWAY["HEARTBEAT_FLUSH_S"]`` (default 0.5 s), and
    never more than a quarter of the heartbeat period (short test heartbeats flush sooner)."""
    cfg = settings.FAIRWAY
    return max(0.005, min(float(cfg.get("HEARTBEAT_FLUSH_S", 0.5)), float(cfg["HEARTBEAT_S"]) / 4))


def sample_interval() -> float:
    """Seconds between two stored GPU samples (``GPU.last_sample`` and a per-minute roll-up
    sample) of one host: 3 heartbeats, at most 15 s. The heartbeats in between only refresh
    ``last_heartbeat``; a health change or a fatal XID is stored at once whatever this says."""
    return min(SAMPLE_INTERVAL_MAX_S, 3 * float(settings.FAIRWAY["HEARTBEAT_S"]))


SAMPLE_INTERVAL_MAX_S = 15.0


def flush_heartbeats(
    reports: Sequence[Any], views: Sequence[AgentView], alive: Sequence[tuple[Any, AgentView]] = ()
) -> dict[int, list[protocol.Message] | None]:
    """One flush, in a worker thread: store every buffered heartbeat, then compute the desired
    state of every host in ``views``. A fixed number of queries whatever the number of hosts.
    A stale view (:func:`stale_hosts`) gets None and its heartbeat is not stored.

    ``alive``: (report without samples, view) of hosts whose heartbeat still waits in its
    connection's inbox (:meth:`AgentHub.alive`): only their ``last_heartbeat`` is written (an
    offline one comes back), if their connection is still the live one; no desired state."""
    from scheduler import lifecycle
    from scheduler.models import Host

    stale = stale_hosts([*views, *(view for _report, view in alive)])
    reports = [*reports, *(report for report, _view in alive)]
    if stale:  # a superseded or revoked connection's heartbeats keep no host alive
        reports = [r for r in reports if r.host_id not in stale]
        views = [v for v in views if v.host_id not in stale]
    try:
        lifecycle.record_heartbeats(reports)
    except Exception:  # e.g. one malformed row: the others must not be lost with it
        logger.exception("bulk heartbeat write of %d hosts failed; writing them one by one", len(reports))
        for report in reports:
            try:
                host = Host.objects.get(pk=report.host_id)
                lifecycle.record_heartbeat(host, report.samples, now=report.received_at)
            except Exception:
                logger.warning("heartbeat of host %s lost", report.host_id, exc_info=True)
    import dataclasses

    # checked above: no second generation query
    commands = desired_commands_many([dataclasses.replace(v, generation=None) for v in views])
    commands.update(dict.fromkeys(stale))
    return commands


class AgentLink(Protocol):
    """What the hub needs of a connection (scheduler.consumers.AgentConsumer)."""

    live: bool
    inventory_held: bool  # its hello's GPU inventory waits for approval (HeartbeatReport.inventory_held)

    def agent_view(self) -> AgentView: ...

    async def deliver(self, commands: list[protocol.Message]) -> None: ...

    async def fenced(self) -> None:
        """The host has a newer connection, or its token changed: close this one."""

    async def join_hubs(self) -> None:
        """Receive :data:`HUBS_GROUP`'s pushes for the hub (its channel joins the group; it
        leaves it when it ends) and hand them to :meth:`AgentHub.reconcile_hosts`."""


@dataclass(slots=True)
class _Buffered:
    link: AgentLink
    received_at: Any  # datetime
    samples: list[Any]  # lifecycle.GpuSample


class AgentHub:
    """The agent connections of this process on one event loop (DESIGN.md §2, heartbeats).

    Heartbeats are not written one by one: the consumer hands each to :meth:`heartbeat`, which
    keeps the latest per host (XIDs of replaced ones are kept), and one flusher task writes
    the whole buffer every :func:`flush_interval` seconds in one worker-thread call
    (:func:`flush_heartbeats`), then hands each connection the commands of its host. Every
    heartbeat refreshes ``last_heartbeat`` and is checked for health changes and fatal XIDs;
    its GPU samples are stored once per :func:`sample_interval` per host.
    :meth:`reconcile` (a ``desired.state`` push) is batched the same way by a second task
    that runs at once: a push never waits for a flush. Both run in this hub's own threads,
    not in the thread-sensitive sync thread of the consumers' other database work. Both
    tasks start with the first connection and end when none is left. A process that stops
    gracefully (SIGTERM: uvicorn closes the agents' sockets with 1012) writes the heartbeats
    still buffered: each connection's disconnect calls :meth:`flush` (scheduler/consumers.py);
    one killed loses them, at most one flush interval of them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.loop = weakref.ref(loop)  # the hub lives as long as its loop (_hubs is keyed by it)
        self.links: dict[int, AgentLink] = {}
        self.buffer: dict[int, _Buffered] = {}
        self.waiting: dict[int, tuple[AgentLink, Any]] = {}  # host id → (link, receipt): :meth:`alive`
        self.pushed: dict[int, AgentLink] = {}
        self.sampled: dict[int, float] = {}  # host id → monotonic time its samples were last stored
        self.flusher: asyncio.Task[None] | None = None
        self.pusher: asyncio.Task[None] | None = None
        self.deliveries: set[asyncio.Task[None]] = set()
        self.delegate: AgentLink | None = None  # the link that is this hub's member of HUBS_GROUP
        self.flush_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fairway-heartbeats")
        self.push_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fairway-pushes")
        self.stopping = asyncio.Event()  # the process stops (:meth:`stop`)
        # the connections' group joins and leaves at connect and disconnect (LAYER_SLOTS at a time)
        self.layer_slots = asyncio.Semaphore(LAYER_SLOTS)
        self.database_lost = False  # its flushes or pushes failed for want of the database (said once)

    def _database_failed(self, what: str, exc: BaseException) -> bool:
        """True when ``exc`` is the database lost or out of connections (:func:`is_database_refusal`):
        said in one warning line at the first failure of an outage, none after it until
        :meth:`_database_back` (ws63: a traceback at every flush, twice a second)."""
        if not is_database_refusal(exc):
            return False
        if not self.database_lost:
            self.database_lost = True
            cause = exc.__cause__ or exc
            logger.warning(
                "%s failed: %s (%s: %s); the flushes and pushes go on failing silently until it is back",
                what,
                exc,
                type(cause).__name__,
                " ".join(str(cause).split()),
            )
        return True

    def _database_back(self) -> None:
        if self.database_lost:
            self.database_lost = False
            logger.info("the heartbeat flushes and pushes reach the database again")

    def stop(self) -> None:
        """The process stops (SIGTERM, SIGINT: :func:`_chain_stop_signals`; or uvicorn closed a
        connection with 1012): the connections' messages read and not yet handled are left
        unhandled (their disconnects stop waiting for them, :data:`scheduler.consumers.INBOX_DRAIN_S`);
        the one being handled finishes. None of them was acknowledged, so the agent reports them
        again in its next hello (its attempts with their ages, to another web process) and the
        level-triggered starts and stops are sent again from the database."""
        self.stopping.set()

    def register(self, host_id: int, link: AgentLink) -> None:
        """``link`` speaks for ``host_id`` from now on (after its hello)."""
        self.links[host_id] = link
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        if self.delegate is None:
            self._delegate_from([link])

    def unregister(self, host_id: int, link: AgentLink) -> None:
        if self.links.get(host_id) is link:
            del self.links[host_id]
            self.sampled.pop(host_id, None)
        if self.delegate is link:
            self._delegate_from(self.links.values())

    def heartbeat(self, host_id: int, link: AgentLink, received_at: Any, samples: list[Any]) -> None:
        """Buffer a validated heartbeat; the next flush writes it."""
        import dataclasses

        old = self.buffer.get(host_id)
        if old is not None and any(s.xids for s in old.samples):
            xids = {s.index: s.xids for s in old.samples if s.xids}
            samples = [dataclasses.replace(s, xids=tuple(sorted({*s.xids, *xids.get(s.index, ())}))) for s in samples]
        self.buffer[host_id] = _Buffered(link, received_at, samples)
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    def alive(self, host_id: int, link: AgentLink, received_at: Any) -> None:
        """A heartbeat received at ``received_at`` waits in its connection's inbox: the next flush
        refreshes the host's ``last_heartbeat`` only (:func:`flush_heartbeats`' ``alive``); the
        heartbeat itself (samples, health, the agent's view) is handled in its turn."""
        self.waiting[host_id] = (link, received_at)
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    def reconcile(self, host_id: int, link: AgentLink) -> None:
        """Send ``link`` what its host lacks, as soon as possible (batched with other pushes)."""
        self.pushed[host_id] = link
        if self.pusher is None or self.pusher.done():
            self.pusher = asyncio.get_running_loop().create_task(self._push_loop())

    def reconcile_hosts(self, host_ids: Iterable[int]) -> None:
        """A push (:func:`push_desired_state`): reconcile those of ``host_ids`` this hub holds."""
        for hid in host_ids:
            link = self.links.get(int(hid))
            if link is not None and link.live:
                self.reconcile(int(hid), link)

    def _delegate_from(self, candidates: Iterable[AgentLink]) -> None:
        """Make the first live link of ``candidates`` this hub's member of :data:`HUBS_GROUP` (none
        left: no member until the next registration; pushes meanwhile wait for a flush)."""
        link = next((c for c in candidates if c.live), None)
        self.delegate = link
        if link is not None:
            self._spawn(link.join_hubs())

    def _spawn(self, coro: Any) -> None:
        """Run ``coro`` as a task of this hub's deliveries (kept referenced until it ends)."""
        task = asyncio.get_running_loop().create_task(coro)
        self.deliveries.add(task)
        task.add_done_callback(self.deliveries.discard)

    async def _flush_loop(self) -> None:
        began = joined = time.monotonic()
        while self.links or self.buffer or self.waiting:
            await asyncio.sleep(max(0.0, began + flush_interval() - time.monotonic()))  # a period, not a gap
            began = time.monotonic()
            if self.buffer or self.waiting:
                await self.flush()
            if began - joined >= HUBS_REJOIN_S and self.delegate is not None:
                # channels-redis drops a group member after its group_expiry (a day) unless re-added
                joined = began
                self._delegate_from([self.delegate, *self.links.values()])
                for link in list(self.links.values()):  # and each connection of its host's group
                    self._spawn(link.renew_host_group())

    async def flush(self) -> None:
        """Write the buffered heartbeats now and deliver the resulting commands."""
        from scheduler import lifecycle

        batch, self.buffer = self.buffer, {}
        waiting, self.waiting = self.waiting, {}
        alive = []
        for hid, (link, received_at) in waiting.items():
            if hid in batch:  # the heartbeat itself is written now; a later one waits for the next flush
                if received_at > batch[hid].received_at:
                    self.waiting[hid] = (link, received_at)
            elif link.live:
                alive.append((lifecycle.HeartbeatReport(hid, received_at, [], store_samples=False), link.agent_view()))
        if not batch and not alive:
            return
        now, every = time.monotonic(), sample_interval()
        reports = []
        for hid, b in batch.items():
            store = now - self.sampled.get(hid, -every) >= every
            if store:
                self.sampled[hid] = now
            held = bool(getattr(b.link, "inventory_held", False))
            reports.append(
                lifecycle.HeartbeatReport(hid, b.received_at, b.samples, store_samples=store, inventory_held=held)
            )
        live = {hid: b.link for hid, b in batch.items() if b.link.live}
        views = [link.agent_view() for link in live.values()]
        try:
            commands = await run_in_db_thread(self.flush_executor, flush_heartbeats, reports, views, alive)
        except Exception as exc:
            if not self._database_failed(f"heartbeat flush of {len(reports)} hosts", exc):
                logger.exception("heartbeat flush of %d hosts failed", len(reports))
            return
        self._database_back()
        self._deliver(live, commands)

    async def _push_loop(self) -> None:
        while self.pushed:
            batch, self.pushed = self.pushed, {}
            live = {hid: link for hid, link in batch.items() if link.live}
            try:
                commands = await run_in_db_thread(
                    self.push_executor, desired_commands_many, [link.agent_view() for link in live.values()]
                )
            except Exception as exc:  # repaired by the next heartbeat flush
                if not self._database_failed(f"pushing desired state to {len(live)} hosts", exc):
                    logger.exception("pushing desired state to %d hosts failed", len(live))
                continue
            self._database_back()
            self._deliver(live, commands)

    def _deliver(self, links: dict[int, AgentLink], commands: dict[int, list[protocol.Message] | None]) -> None:
        for hid, cmds in commands.items():
            link = links.get(hid)
            if link is None or not link.live:
                continue
            if cmds is None:  # stale connection: closed, sent nothing
                link.live = False
                self.unregister(hid, link)
                self._spawn(link.fenced())
            elif cmds:
                self._spawn(link.deliver(cmds))


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AgentHub] = weakref.WeakKeyDictionary()


def hub() -> AgentHub:
    """The :class:`AgentHub` of the running event loop (one per server loop, made on first use)."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = AgentHub(loop)
        _chain_stop_signals()
    return found


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _run_of(handler: Any) -> tuple[asyncio.Runner, asyncio.Future[Any] | None] | None:
    """``asyncio.run``'s own SIGINT handler for its run (``asyncio.Runner``'s: a partial of its
    ``_on_sigint`` with its main task): the runner and that task; None for any other handler."""
    if isinstance(handler, functools.partial):
        runner = getattr(handler.func, "__self__", None)
        if isinstance(runner, asyncio.Runner):
            task = handler.keywords.get("main_task")
            return runner, task if isinstance(task, asyncio.Future) else None
    return None


def _of_closed_loop(handler: Any) -> bool:
    """Whether signal ``handler`` belongs to an event loop that is closed (or gone): ``asyncio.run``'s
    handler once its run ended (:func:`_run_of`), or a closed loop's own method."""
    run = _run_of(handler)
    if run is not None:
        loop = getattr(run[0], "_loop", None)
        return loop is None or loop.is_closed()
    owner = getattr(handler, "__self__", None)
    return isinstance(owner, asyncio.AbstractEventLoop) and owner.is_closed()


def _unless_closed(sig: int, handler: Any) -> Any:
    """``handler``, or where it belongs to a closed loop (:func:`_of_closed_loop`) what
    ``asyncio.run`` puts back once its loop ends: Python's default for SIGINT, none for another
    (ws47: a closed run's handler raised ``KeyboardInterrupt`` wherever the main thread was)."""
    if not _of_closed_loop(handler):
        return handler
    return signal.default_int_handler if sig == signal.SIGINT else None


def _chain_stop_signals() -> None:
    """Have SIGTERM and SIGINT also :meth:`~AgentHub.stop` every hub of this process, then call the
    handler installed before (uvicorn's, which starts its graceful shutdown); only where a Python
    handler is installed (uvicorn installs its own before it imports the application) and from the
    main thread (where signal handlers live). Once per handler: a handler already chained stays.

    Without it a SIGTERM'd web process waited for every agent connection that had ended shortly
    before (agents leaving, or closed by the shutdown) to handle the attempt events it had read:
    with the database busy, hundreds of them queued behind the agent-database threads kept the
    process running past a process manager's stop timeout (10 s for podman and docker) and
    uvicorn's own 30 s (docs/benchmarks/api_load.md, web30).

    ws47: a handler of one event loop's run (``asyncio.run``'s SIGINT handler, :func:`_run_of`)
    is chained only for that run: when its main task ends the handler before is put back (and
    ``asyncio.run`` then puts Python's default back, as without a hub), and a handler whose loop
    closed is never called (:func:`_unless_closed`). The chain kept it for good: every later
    SIGINT of the process raised ``KeyboardInterrupt`` wherever the main thread was (in a finalizer
    or a callback Python prints ``Exception ignored ... KeyboardInterrupt``), and no later
    ``asyncio.run`` installed its own."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _STOP_SIGNALS:
        previous = _unless_closed(sig, signal.getsignal(sig))
        if not callable(previous) or getattr(previous, "stops_agent_hubs", False):
            continue

        def on_stop(signum: int, frame: Any, previous: Callable[..., Any] = previous) -> None:
            for loop, found in list(_hubs.items()):
                with contextlib.suppress(RuntimeError):  # a loop closed meanwhile
                    loop.call_soon_threadsafe(found.stop)
            handler = _unless_closed(signum, previous)
            if callable(handler):
                handler(signum, frame)

        on_stop.stops_agent_hubs = True  # type: ignore[attr-defined]
        signal.signal(sig, on_stop)
        run = _run_of(previous)
        if run is not None and run[1] is not None:
            run[1].add_done_callback(functools.partial(_unchain, sig, on_stop, previous))


def _unchain(sig: int, on_stop: Any, previous: Any, _task: Any) -> None:
    """The run whose handler ``previous`` is ended (its main task is done, on its loop's thread:
    the main thread): ``previous`` installed again in place of ``on_stop``, where that is still the
    one installed, so ``asyncio.run`` puts Python's default back (:func:`_chain_stop_signals`)."""
    if signal.getsignal(sig) is on_stop:
        signal.signal(sig, previous)


# --- log tails (the agent keeps each attempt's log; the UI and CLI ask for its tail) ----------

LOG_TAIL_TIMEOUT_S = 5.0


@dataclass(slots=True)
class LogTail:
    """One host's part of an attempt's log: ``data`` starts at byte ``offset`` of its log;
    ``eof``: the part no longer runs; ``error``: why there is no data (host offline, ...)."""

    host: str
    rank: int
    data: str = ""
    offset: int = 0
    eof: bool = False
    error: str | None = None


def request_log_tail(host_id: int, attempt_id: int, tail_bytes: int, timeout: float = LOG_TAIL_TIMEOUT_S) -> dict:
    """Ask the agent of ``host_id`` for the last ``tail_bytes`` of the log of the attempt whose
    wire id is ``attempt_id``; blocks up to ``timeout`` seconds. Returns the consumer's reply
    (``data``, ``offset``, ``eof``) or ``{"error": message}``. Call from a thread, never from the
    server's event loop."""
    return request_log_tails([host_id], attempt_id, tail_bytes, timeout)[host_id]


def request_log_tails(
    host_ids: Sequence[int], attempt_id: int, tail_bytes: int, timeout: float = LOG_TAIL_TIMEOUT_S
) -> dict[int, dict]:
    """:func:`request_log_tail` of several hosts at once (the parts of a gang), asked in parallel
    in one coroutine: host id → reply.

    The channel layer receives on one event loop at a time (channels-redis raises "Two event
    loops are trying to receive() on one channel layer" otherwise). With the in-memory layer
    the requests run on the server's loop, where the consumers are; with any other layer on
    this process's private log-tail loop with its own layer instance (:func:`_log_tail_runner`),
    never on a loop made per request thread."""
    ids = list(dict.fromkeys(host_ids))
    layer = get_channel_layer()
    if layer is None:
        return {hid: {"error": "no channel layer"} for hid in ids}

    async def ask_all(layer: Any) -> dict[int, dict]:
        replies = await asyncio.gather(*(ask(layer, hid) for hid in ids), return_exceptions=True)
        out: dict[int, dict] = {}
        for hid, reply in zip(ids, replies, strict=True):
            if isinstance(reply, BaseException):
                logger.warning("log tail of attempt %s from host %s failed: %r", attempt_id, hid, reply)
                reply = {"error": f"log request failed: {type(reply).__name__}"}
            out[hid] = reply
        return out

    async def ask(layer: Any, host_id: int) -> dict:
        channel = await layer.new_channel()
        await layer.group_send(
            host_group(host_id),
            {"type": "logs.request", "attempt_id": attempt_id, "tail_bytes": tail_bytes, "reply_to": channel},
        )
        try:
            return dict(await asyncio.wait_for(layer.receive(channel), timeout))
        except TimeoutError:
            return {"error": f"no answer from the agent within {timeout:g} s"}

    try:
        if _is_in_memory(layer):
            loop = _server_loop
            if loop is None or not loop.is_running():
                return {hid: {"error": "the agent is not connected"} for hid in ids}
            return asyncio.run_coroutine_threadsafe(ask_all(layer), loop).result(timeout + 2)
        loop, own_layer = _log_tail_runner()
        return asyncio.run_coroutine_threadsafe(ask_all(own_layer), loop).result(timeout + 5)
    except Exception as exc:  # a missing log must not fail the request
        logger.warning("log tail of attempt %s from hosts %s failed", attempt_id, ids, exc_info=True)
        return {hid: {"error": f"log request failed: {type(exc).__name__}"} for hid in ids}


_log_tail_guard = threading.Lock()
_log_tail_loop: tuple[str, asyncio.AbstractEventLoop, Any] | None = None


def _log_tail_runner() -> tuple[asyncio.AbstractEventLoop, Any]:
    """This process's own channel-layer event loop (a daemon thread) and its own channel layer
    instance, made on first use (again when ``CHANNEL_LAYERS`` changed): log tails are asked, and
    the pushes of threads sent (:func:`_group_sends`), there. Only that loop ever receives on that
    layer instance, whatever thread asks for a log tail."""
    global _log_tail_loop
    from channels import DEFAULT_CHANNEL_LAYER
    from channels.layers import channel_layers

    key = repr(getattr(settings, "CHANNEL_LAYERS", None))
    with _log_tail_guard:
        found = _log_tail_loop
        if found is not None and found[0] == key and found[1].is_running():
            return found[1], found[2]
        loop = asyncio.new_event_loop()
        threading.Thread(target=_run_log_tails, args=(loop,), name="fairway-log-tails", daemon=True).start()
        layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
        if found is not None:  # settings changed (tests): the old loop stops, closes and drops its layer
            found[1].call_soon_threadsafe(found[1].stop)
        _log_tail_loop = (key, loop, layer)
        return loop, layer


def _run_log_tails(loop: asyncio.AbstractEventLoop) -> None:
    """The log-tail thread: ``loop`` until it is stopped, then closed here. channels-redis wraps a
    loop's ``close`` to flush the layer's connections on that loop; a loop stopped but never closed
    was closed by its ``__del__`` in whatever thread collected it, where another loop could be
    running (the server's, Playwright's): the flush could not run ("coroutine
    'RedisLoopLayer.flush' was never awaited") and its Redis connections were left open."""
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def attempt_log_tails(attempt_id: int, tail_bytes: int) -> list[LogTail]:
    """The log tail of every host part of an attempt (rank order; ``attempt_id`` is its primary
    key), asked of the agents in parallel.

    A part whose host is offline or removed gets an ``error`` without asking."""
    from scheduler.models import Attempt, Host

    row = Attempt.objects.filter(pk=attempt_id).values_list("wire_id", "number", "started_at", "ended_at").first()
    wire_id, number, started_at, ended_at = row if row is not None else (None, 0, None, None)
    # placed, not yet confirmed by its agent: its agent may not know it yet ("no attempt … here",
    # which `fairway logs -f` printed and stopped at, try50)
    starting = started_at is None and ended_at is None
    parts: dict[int, tuple[str, int, str, bool]] = {}
    for host_id, name, rank, state, removed in AttemptGPU.objects.filter(attempt_id=attempt_id).values_list(
        "gpu__host_id", "gpu__host__name", "rank", "gpu__host__state", "gpu__host__removed_at"
    ):
        if host_id not in parts or rank < parts[host_id][1]:
            parts[host_id] = (name, rank, state, removed is not None)
    ordered = sorted(parts.items(), key=lambda item: item[1][1])
    online = [hid for hid, (_n, _r, state, removed) in ordered if not removed and state != Host.State.OFFLINE]
    replies = request_log_tails(online, wire_id, tail_bytes) if online and wire_id is not None else {}
    out = []
    for host_id, (name, rank, state, removed) in ordered:
        if removed or state == Host.State.OFFLINE:
            out.append(LogTail(name, rank, error=f"host {name} is {'removed' if removed else 'offline'}"))
            continue
        reply = replies.get(host_id, {"error": "no such attempt"})
        if reply.get("error") and starting:
            out.append(LogTail(name, rank, error=f"attempt {number} is starting on {name}: no log yet"))
        elif reply.get("error"):
            out.append(LogTail(name, rank, error=str(reply["error"])))
        else:
            out.append(
                LogTail(name, rank, str(reply.get("data", "")), int(reply.get("offset", 0)), bool(reply.get("eof")))
            )
    return out


# --- one-shot commands in a running attempt (``exec``: docs/jobs.md) -----------------------------

EXEC_REPLY_GRACE_S = 5.0
"""How much longer than the command's own timeout the server waits for the agent's answer."""


def request_exec(host_id: int, wire_id: int, command: list[str], timeout_s: int, max_output: int) -> dict:
    """Ask the agent of ``host_id`` to run ``command`` in the attempt whose wire id is ``wire_id``
    (the consumer's ``exec.request``); blocks at most ``timeout_s`` + :data:`EXEC_REPLY_GRACE_S`
    seconds. Returns the consumer's reply (``exit_code``, ``stdout``, ``stderr``, ``truncated``,
    ``timed_out``) or ``{"error": code, "message": words}`` (``exec_timeout``: no answer in time;
    ``unavailable``: the channel layer failed before the request was sent, so nothing ran;
    ``answer_lost``: it failed after, so the command may have run).
    Call from a thread, never from the server's event loop; asked as log tails are
    (:func:`request_log_tails`: the server's loop with the in-memory layer, else this process's own)."""
    layer = get_channel_layer()
    if layer is None:
        return {"error": "host_offline", "message": "no channel layer"}
    wait_s = timeout_s + EXEC_REPLY_GRACE_S

    async def ask(layer: Any) -> dict:
        try:
            channel = await layer.new_channel()
            await layer.group_send(
                host_group(host_id),
                {
                    "type": "exec.request",
                    "attempt_id": wire_id,
                    "command": list(command),
                    "timeout_s": timeout_s,
                    "max_output": max_output,
                    "reply_to": channel,
                },
            )
        except Exception as exc:  # Redis down: nothing was sent, nothing ran (brk59: read "no answer in time")
            logger.warning(  # one line, no traceback (db61)
                "exec in attempt %s on host %s not sent: the channel layer failed (%s: %s)",
                wire_id, host_id, type(exc).__name__, exc,
            )  # fmt: skip
            return {"error": "unavailable", "message": layer_failed(exc)}
        try:
            return dict(await asyncio.wait_for(layer.receive(channel), wait_s))
        except TimeoutError:
            return {"error": "exec_timeout", "message": f"no answer from the agent within {wait_s:g} s"}
        except LAYER_UNREACHABLE as exc:  # sent, then Redis went away (db61: read "no answer in time")
            logger.warning(
                "exec in attempt %s on host %s: its answer was lost, the channel layer failed (%s: %s)",
                wire_id, host_id, type(exc).__name__, exc,
            )  # fmt: skip
            return {"error": "answer_lost", "message": layer_failed(exc)}

    try:
        if _is_in_memory(layer):
            loop = _server_loop
            if loop is None or not loop.is_running():
                return {"error": "host_offline", "message": "the agent is not connected"}
            return asyncio.run_coroutine_threadsafe(ask(layer), loop).result(wait_s + 2)
        loop, own_layer = _log_tail_runner()
        return asyncio.run_coroutine_threadsafe(ask(own_layer), loop).result(wait_s + 5)
    except Exception as exc:
        logger.warning("exec in attempt %s on host %s failed", wire_id, host_id, exc_info=True)
        return {"error": "exec_timeout", "message": f"the request failed: {type(exc).__name__}"}
