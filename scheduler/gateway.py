"""The server side of the agent link: desired state per host and the push that delivers it (DESIGN.md §2, §7).

Agents are level-triggered. :func:`desired_commands` compares what the database
wants on a host with what its agent last reported and returns the ``start`` and
``stop`` messages that close the gap; the consumer sends them after every
heartbeat and whenever :func:`push_desired_state` pokes its group. A lost push
therefore only delays a decision until the next heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from agent import protocol
from scheduler.models import AttemptGPU

logger = logging.getLogger(__name__)

NOT_WANTED = "not_wanted"
"""Stop reason sent for an attempt the agent runs but the server does not want there."""
MASTER_PORT_BASE = 29500

_server_loop: asyncio.AbstractEventLoop | None = None
_server_loop_guard = threading.Lock()


def host_group(host_id: int) -> str:
    """The channel-layer group of one host's agent connection(s)."""
    return f"host.{host_id}"


def remember_server_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Record the event loop the consumers run on (in-memory channel layer: pushes must run there)."""
    global _server_loop
    with _server_loop_guard:
        _server_loop = loop


def push_desired_state(host_ids: Iterable[int]) -> None:
    """Tell each host's consumer to (re)send its desired state. Call after commit; never raises.

    With the in-memory channel layer (embedded mode) the group send is scheduled
    on the web server's event loop, where the consumers' queues live; from any
    other thread it would not wake them.
    """
    ids = sorted(set(host_ids))
    if not ids:
        return
    layer = get_channel_layer()
    if layer is None:
        return

    async def send_all() -> None:
        for hid in ids:
            await layer.group_send(host_group(hid), {"type": "desired.state"})

    try:
        loop = _server_loop
        if _is_in_memory(layer) and loop is not None and loop.is_running():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                loop.create_task(send_all())
            else:
                asyncio.run_coroutine_threadsafe(send_all(), loop)
            return
        async_to_sync(send_all)()
    except Exception:  # a failed push is repaired by the next heartbeat
        logger.warning("push of desired state to hosts %s failed", ids, exc_info=True)


def _is_in_memory(layer: Any) -> bool:
    return type(layer).__name__ == "InMemoryChannelLayer"


@dataclass(slots=True)
class _Part:
    attempt_id: int
    workload_id: int
    stop_reason: str
    stopping: bool
    image: str
    command: list[str]
    env: dict[str, Any]
    rank: int
    gpus: list[tuple[int, str]]  # (index, uuid)


def plain_env(env: Any) -> dict[str, str]:
    """``{"NAME": {"value": v, "secret": b}}`` (or ``{"NAME": v}``) → ``{"NAME": str(v)}``."""
    out: dict[str, str] = {}
    if not isinstance(env, dict):
        return out
    for key, spec in env.items():
        value = spec.get("value", "") if isinstance(spec, dict) else spec
        out[str(key)] = "" if value is None else str(value)
    return out


def desired_commands(
    host_id: int,
    reported_running: Collection[int] | None,
    *,
    already_started: Collection[int] = (),
    already_stopped: Collection[int] = (),
) -> list[protocol.Message]:
    """The ``start``/``stop`` messages that move host ``host_id`` towards the database's wishes.

    ``reported_running``: attempt ids the agent last said it runs (None: unknown yet).
    - open attempt on this host, no stop issued, not reported running, not in
      ``already_started`` → ``start`` (this host's part only, with its GPUs);
    - open attempt with a stop issued, not in ``already_stopped`` → ``stop`` with the
      stop's reason (the agent answers a stop of an attempt it does not run with
      ``stopped``, and a repeated stop of an exited one with its exit);
    - reported running but not an open attempt on this host, not in ``already_stopped``
      → ``stop`` (``not_wanted``): attempt ids fence off stale copies (§4).
    Two queries whatever the number of attempts.
    """
    rows = AttemptGPU.objects.filter(open=True, gpu__host_id=host_id, attempt__ended_at__isnull=True).values_list(
        "attempt_id",
        "attempt__workload_id",
        "attempt__stop_requested_at",
        "attempt__stop_reason",
        "attempt__workload__image",
        "attempt__workload__command",
        "attempt__workload__env",
        "rank",
        "gpu__index",
        "gpu__uuid",
    )
    parts: dict[int, _Part] = {}
    for aid, wid, stop_at, stop_reason, image, command, env, rank, index, uuid in rows:
        part = parts.get(aid)
        if part is None:
            part = parts[aid] = _Part(
                attempt_id=aid,
                workload_id=wid,
                stop_reason=stop_reason or "stopped",
                stopping=stop_at is not None,
                image=image or "",
                command=[str(c) for c in (command or [])],
                env=env or {},
                rank=rank,
                gpus=[],
            )
        part.gpus.append((index, uuid))
    grace = int(settings.FAIRWAY["GRACE_PERIOD_S"])
    running = set(reported_running or ())
    messages: list[protocol.Message] = []

    to_start = [
        part
        for aid, part in sorted(parts.items())
        if not part.stopping and aid not in running and aid not in already_started
    ]
    gangs = _gang_layout([p.attempt_id for p in to_start]) if to_start else {}
    for part in to_start:
        env = plain_env(part.env)
        nodes, master, world = gangs.get(part.attempt_id, (1, "localhost", len(part.gpus)))
        env.update(
            {
                "MASTER_ADDR": master,
                "MASTER_PORT": str(MASTER_PORT_BASE + part.attempt_id % 1000),
                "NNODES": str(nodes),
                "NODE_RANK": str(part.rank),
                "WORLD_SIZE": str(world),
            }
        )
        gpus = sorted(part.gpus)
        messages.append(
            protocol.Start(
                attempt_id=part.attempt_id,
                workload_id=part.workload_id,
                image=part.image,
                command=part.command,
                env=env,
                gpu_uuids=[u for _i, u in gpus],
                gpu_indices=[i for i, _u in gpus],
                grace_s=grace,
            )
        )
    for aid, part in sorted(parts.items()):
        if part.stopping and aid not in already_stopped:
            messages.append(protocol.Stop(attempt_id=aid, reason=part.stop_reason, grace_s=grace))
    for aid in sorted(running - set(parts) - set(already_stopped)):
        messages.append(protocol.Stop(attempt_id=aid, reason=NOT_WANTED, grace_s=grace))
    return messages


def _gang_layout(attempt_ids: list[int]) -> dict[int, tuple[int, str, int]]:
    """attempt id → (number of hosts, rank-0 host address, total GPUs), for rendezvous variables."""
    hosts: dict[int, dict[int, tuple[str, dict[str, Any]]]] = defaultdict(dict)
    gpus: dict[int, int] = defaultdict(int)
    for aid, rank, name, labels in AttemptGPU.objects.filter(attempt_id__in=attempt_ids).values_list(
        "attempt_id", "rank", "gpu__host__name", "gpu__host__labels"
    ):
        hosts[aid][rank] = (name, labels or {})
        gpus[aid] += 1
    out: dict[int, tuple[int, str, int]] = {}
    for aid, ranks in hosts.items():
        name, labels = ranks[min(ranks)]
        out[aid] = (len(ranks), str(labels.get("address") or name), gpus[aid])
    return out


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
    """Ask the agent of ``host_id`` for the last ``tail_bytes`` of ``attempt_id``'s log; blocks up
    to ``timeout`` seconds. Returns the consumer's reply (``data``, ``offset``, ``eof``) or
    ``{"error": message}``. Call from a thread, never from the server's event loop."""
    layer = get_channel_layer()
    if layer is None:
        return {"error": "no channel layer"}

    async def ask() -> dict:
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
                return {"error": "the agent is not connected"}
            return asyncio.run_coroutine_threadsafe(ask(), loop).result(timeout + 2)
        return async_to_sync(ask)()
    except Exception as exc:  # a missing log must not fail the request
        logger.warning("log tail of attempt %s from host %s failed", attempt_id, host_id, exc_info=True)
        return {"error": f"log request failed: {type(exc).__name__}"}


def attempt_log_tails(attempt_id: int, tail_bytes: int) -> list[LogTail]:
    """The log tail of every host part of an attempt (rank order), asked of the agents in parallel.

    A part whose host is offline or removed gets an ``error`` without asking."""
    from concurrent.futures import ThreadPoolExecutor

    from scheduler.models import Host

    parts: dict[int, tuple[str, int, str, bool]] = {}
    for host_id, name, rank, state, removed in AttemptGPU.objects.filter(attempt_id=attempt_id).values_list(
        "gpu__host_id", "gpu__host__name", "rank", "gpu__host__state", "gpu__host__removed_at"
    ):
        if host_id not in parts or rank < parts[host_id][1]:
            parts[host_id] = (name, rank, state, removed is not None)
    ordered = sorted(parts.items(), key=lambda item: item[1][1])

    def fetch(item: tuple[int, tuple[str, int, str, bool]]) -> LogTail:
        host_id, (name, rank, state, removed) = item
        if removed or state == Host.State.OFFLINE:
            return LogTail(name, rank, error=f"host {name} is {'removed' if removed else 'offline'}")
        reply = request_log_tail(host_id, attempt_id, tail_bytes)
        if reply.get("error"):
            return LogTail(name, rank, error=str(reply["error"]))
        return LogTail(name, rank, str(reply.get("data", "")), int(reply.get("offset", 0)), bool(reply.get("eof")))

    if len(ordered) <= 1:
        return [fetch(item) for item in ordered]
    with ThreadPoolExecutor(max_workers=min(8, len(ordered))) as pool:
        return list(pool.map(fetch, ordered))
