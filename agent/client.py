"""The agent's connection to the server: one reconnect loop, a ``hello`` with the full local state
on every connection, heartbeats, and the handlers for ``start``, ``stop`` and ``logs``
(DESIGN.md §5, §7).

The agent is level-triggered like the server: it keeps no command queue. Attempts keep running
while the server is away; exits are kept on disk until the server acknowledges them (an ``ack``
of the ``attempt`` message, or the ``welcome`` that answers a ``hello`` listing them), and so are
starts (the server charges an attempt from its confirmed start, DESIGN.md §4): a ``hello`` lists
every running attempt with the age of its start, and an attempt whose start was never
acknowledged and that has exited since is listed as running with that age, its exit following
the hello as an ``attempt`` message, so that the server learns the start before the end.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import codecs
import contextlib
import dataclasses
import logging
import random
import signal
import time
from collections.abc import Coroutine, Generator
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import websockets
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI

from agent import AGENT_VERSION
from agent.config import AgentConfig
from agent.gpu.base import GpuBackend
from agent.health import HealthFile
from agent.protocol import (
    CLOSE_HOST_REMOVED,
    EXEC_CHUNK_BYTES,
    EXEC_TTY_WINDOW,
    EXEC_TTY_WINDOW_CHUNKS,
    MAX_MESSAGE_BYTES,
    PORT_CHUNK_BYTES,
    SERVER_MESSAGE_TYPES,
    UNKNOWN_TOKEN_REASON,
    Ack,
    AttemptEvent,
    AttemptStatus,
    Error,
    Exec,
    ExecAck,
    ExecBytes,
    ExecClose,
    ExecData,
    ExecInput,
    ExecOutput,
    ExecPipe,
    ExecResize,
    ExecResult,
    ExecStarted,
    ExecTty,
    Heartbeat,
    Hello,
    HostIsolation,
    Log,
    Logs,
    Message,
    PortData,
    PortOpen,
    ProtocolError,
    Start,
    Stop,
    Welcome,
    decode,
    encode,
    one_persons_share,
)
from agent.runtime.base import AttemptSpec, ExecError, Runtime, StartError
from agent.runtime.pipe import PipeSession
from agent.runtime.tty import InputOverflow, TtySession
from agent.state import AttemptRecord, current_boot_id, monotonic_s
from fairway_common.limits import MAX_LOG_TAIL_BYTES

log = logging.getLogger(__name__)
_ws_log = logging.getLogger("agent.websocket")
# websockets logs frames at DEBUG; a start frame carries the attempt's secrets, which never go to
# a log (docs/isolation.md): connection events only, even with log_level DEBUG.
_ws_log.setLevel(logging.INFO)

MAX_EXECS = 8
"""One-shot commands (``exec``) one agent runs at once; another is answered ``error`` ``busy``. Of
them one owner's at most :func:`agent.protocol.one_persons_share` (``owner_busy`` past it, left60)."""
MAX_TTYS = 32
"""Interactive sessions (``exec_tty``) one agent holds at once; another is answered ``error`` ``busy``.
Of them one owner's at most :func:`agent.protocol.one_persons_share` (``owner_busy``), as of ``exec``."""
MAX_PORTS = 64
"""Forwarded connections (``port_open``: ``fairway port-forward``) one agent holds at once; another is
answered ``busy``. Of them one owner's at most :func:`agent.protocol.one_persons_share` (``owner_busy``)."""


def _slot_refusal(held: int, mine: int, cap: int, what: str, verb: str, ref: int) -> Error | None:
    """The refusal of one more of ``what`` (commands, sessions, forwarded connections) past the
    agent's ``cap`` of them (``busy``) or, of them, past one owner's share (``owner_busy``, left60:
    one owner's ``sleep 600`` held every slot); None where it is taken."""
    if held >= cap:
        return Error(code="busy", message=f"{cap} {what} run here already", ref=ref)
    if mine >= one_persons_share(cap):
        return Error(code="owner_busy", message=f"{mine} {what} (half of the {cap} a host {verb} at once)", ref=ref)
    return None


TTY_EXIT_DRAIN_S = 0.2
"""After an interactive command ends, how long its terminal's last output is waited for (a
background process it left may hold the terminal open for ever: it is killed then)."""


@dataclasses.dataclass(slots=True, eq=False)
class _Stream:
    """What an interactive session (``exec_tty``) and a forwarded connection (``port_open``) of this
    connection share: their attempt, what they sent and was not yet acknowledged (at most
    :data:`EXEC_TTY_WINDOW` bytes), when anything last went in or out, whether it is being closed."""

    attempt_id: int
    idle_s: float
    last: float
    unacked: int = 0
    unacked_chunks: int = 0
    credit: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    closing: bool = False
    idle: bool = False

    async def window_open(self) -> None:
        """Wait while as much output as the window allows is unacknowledged (and the stream is not
        being closed): sessions, piped sessions and forwarded connections alike."""
        while (self.unacked >= EXEC_TTY_WINDOW or self.unacked_chunks >= EXEC_TTY_WINDOW_CHUNKS) and not self.closing:
            self.credit.clear()
            await self.credit.wait()


@dataclasses.dataclass(slots=True, eq=False)
class _Tty(_Stream):
    """An interactive session (``exec_tty``): its terminal once started, input that came before it
    started, a resize that came before it started, and why the agent ended it (told with its
    ``exec_result``; brk61: a paste too long, unsaid)."""

    session: TtySession | PipeSession | None = None
    early: bytearray = dataclasses.field(default_factory=bytearray)
    early_eof: bool = False
    binary: bool = False  # an ``exec_pipe``'s: bytes as ``exec_data``
    piped: bool = False  # an ``exec_pipe``'s without a terminal: its input acknowledged once written
    size: tuple[int, int] | None = None
    why: str = ""


@dataclasses.dataclass(slots=True, eq=False)
class _Port(_Stream):
    """A forwarded connection (``port_open``): what came for it and is not written yet (``b""``: the
    end of it; at most :data:`EXEC_TTY_WINDOW` bytes and :data:`EXEC_TTY_WINDOW_CHUNKS` pieces),
    and why it ended when its attempt did."""

    inbox: asyncio.Queue[bytes] = dataclasses.field(default_factory=asyncio.Queue)
    queued: int = 0
    queued_chunks: int = 0
    closed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    attempt_ended: bool = False


CLOSE_UNAUTHORIZED = 4401
"""Close code of a connection whose host token is unknown, rotated or revoked."""
CLOSE_SUPERSEDED = 4409
"""Close code of a connection the server replaced by a newer one with the same host token."""
EXIT_HOST_REMOVED = 77
"""Exit status of ``fairway-agent run`` whose host an admin removed (the server closed with
:data:`agent.protocol.CLOSE_HOST_REMOVED`): the install script's systemd unit names it in
``RestartPreventExitStatus=``, so the agent is not restarted against a server that refuses it
for good (sec41: it reconnected every ``backoff_max`` seconds, logging an error each time).
77 is sysexits' ``EX_NOPERM``; the agent's other statuses are 0, 1 (a backend or runtime
unavailable) and 2 (bad usage or config)."""
HOST_REMOVED_LOG = (
    "host removed from Fairway by an admin; stopping. To rejoin: the install script with --uninstall,"
    " then again with a new join token and --host-name NEW (this name stays taken)"
)
"""try43: it said "re-run the install script to rejoin", but a rerun keeps the config holding the
refused token ("already joined") and the agent exits 77 again; a join under the old name is refused."""
HOST_REMOVED_FILE = "removed"
"""The note a removed host's agent leaves in its state directory ("removed from Fairway by an admin;
told at TIME"): the install script's ``--uninstall`` reads it (try56: it said the host "is still
registered on the server" after an admin removed it), a new join drops it."""

HOST_UNKNOWN_FILE = "unknown"
"""The note an agent leaves in its state directory when the server refused its token as unknown
("the server does not know this host's token; told at TIME"), as after a database restore older
than the join (docs/deploy.md §7): ``--uninstall`` reads it (ops48: it said the host "is still
registered on the server", which had no such host); a link the server takes, or a new join, drops it."""


def told_at_text() -> str:
    """Now, as every message reads an instant (``fairway_common.instants.instant_text``, the
    absolute form of text stored and read later: ``Dec 7 2026 18:17:52 UTC``): the TIME of the notes
    ``--uninstall`` repeats (:data:`HOST_REMOVED_FILE`, :data:`HOST_UNKNOWN_FILE`; small49: it
    said ``2026-12-07T18:17:52Z`` there)."""
    import datetime

    from fairway_common.instants import instant_text

    return instant_text(datetime.datetime.now(datetime.UTC), absolute=True)


def note_link_closed(state_dir: Path, code: int | None, reason: str) -> None:
    """Leave :data:`HOST_UNKNOWN_FILE` when the server closed the link refusing the token as
    unknown; nothing on any other close (a host whose token changed under it is still there). Best effort."""
    if code != CLOSE_UNAUTHORIZED or not reason.startswith(UNKNOWN_TOKEN_REASON):
        return
    told = told_at_text()
    try:
        (state_dir / HOST_UNKNOWN_FILE).write_text(f"the server does not know this host's token; told at {told}\n")
    except OSError as exc:
        log.warning("cannot write %s: %s", state_dir / HOST_UNKNOWN_FILE, exc)


def note_link_open(state_dir: Path) -> None:
    """The server took the link: drop :data:`HOST_UNKNOWN_FILE`. Best effort."""
    try:
        (state_dir / HOST_UNKNOWN_FILE).unlink(missing_ok=True)
    except OSError as exc:
        log.warning("cannot remove %s: %s", state_dir / HOST_UNKNOWN_FILE, exc)


REFUSED_LINK_HINT = (
    "an admin's new host token (Hosts admin: Rotate the host token) goes in the agent's config,"
    " token:, then restart the agent; a host the server no longer has (its database restored from a dump"
    " older than the join) joins again: the install script with --uninstall, then with a new join token"
)
"""try43: on 4401 the agent said only that the token was refused; the way out was in the admin's message alone.
deploy48: after a restore the host may not exist at all, so there is nothing to rotate: join again."""


class HostRemoved(Exception):
    """The server closed the link with :data:`CLOSE_HOST_REMOVED`: :meth:`Agent.run` ends with it."""


PING_INTERVAL_S = 20.0
PING_TIMEOUT_S = 20.0
"""The agent's keepalive pings (websockets'): one every 20 s, a pong later than 20 s closes the
connection and the agent reconnects (``backoff_delays``), so a dead server or link is noticed
within 40 s. The agent is the side that pings (docs/deploy.md, "The agent link"): the web
processes ping only every ``WS_PING_INTERVAL_S`` of scheduler/management/commands/serve.py, to
close the sockets of agents gone without a word."""

CLOSE_TIMEOUT_S = 5.0
"""The longest wait of a close of the agent's link for the server's side of it (websockets'
``close_timeout``): a dead server or link never answers, and the agent reconnects after it."""

HOUSEKEEPING_S = 5.0
"""Period of log capping and pruning, in seconds."""

GPU_WAIT_S = 600.0
"""Longest wait of a ``start`` for its GPUs held by another attempt of this host (one still in its
stop's grace period), seconds; then it fails to start. The server's own bound on a start
(``FAIRWAY_START_TIMEOUT_S``, 600 s) ends it there too."""
GPU_WAIT_POLL_S = 0.1

MAX_HELLO_EXITS = 1024
"""Most unacknowledged exits listed in one ``hello`` (the rest follow after they are acked)."""


def backoff_delays(initial_s: float = 1.0, cap_s: float = 60.0, factor: float = 2.0) -> Generator[float]:
    """Reconnect delays in seconds: exponential from ``initial_s``, capped at ``cap_s``, each
    drawn uniformly from [d/2, d] so that agents restarted together do not reconnect together."""
    delay = min(initial_s, cap_s)
    while True:
        yield random.uniform(delay / 2, delay)  # noqa: S311 -- jitter, not crypto
        delay = min(cap_s, delay * factor)


def _retry_or_raise(exc: Exception) -> Exception | None:
    """websockets ``process_exception``: retry every connection failure except a bad URI.

    A rejected token (401/403) is retried too, at the capped delay: the admin may re-issue it,
    and a service manager would restart a dead agent anyway.
    """
    if isinstance(exc, InvalidURI):
        return exc
    if isinstance(exc, InvalidStatus) and exc.response.status_code in (401, 403):
        log.error("server refused the host token (HTTP %d)", exc.response.status_code)
    return None


def _env_problem(msg: Start) -> str | None:
    """Why the start's environment cannot be given to a process: a name with ``=`` (brk41: the
    process runtime reported the start, then its exec refused the name, exit 126; the docker
    runtime handed the engine ``CUDA_VISIBLE_DEVICES=0,1,2,3=x``, an entry for the variable the
    agent sets itself). The server refuses such names at submission; a server that sends one
    anyway gets ``failed_to_start``, nothing started."""
    bad = sorted(name for name in msg.env if "=" in name)
    return f"environment variable names cannot contain '=': {bad[0][:100]!r}" if bad else None


class Agent:
    """One host agent: connects to ``config.server`` and runs what the server asks for."""

    def __init__(self, config: AgentConfig, gpu: GpuBackend, runtime: Runtime) -> None:
        self.config = config
        self.gpu = gpu
        self.runtime = runtime
        self.heartbeat_s = config.heartbeat
        self._stopping = asyncio.Event()
        self._new_period = asyncio.Event()
        self._boot_id = current_boot_id()
        self._delays = self._new_backoff()
        self._ws: ClientConnection | None = None
        self._seq = 0
        # message id -> attempt ids whose end state that message reported (per connection)
        self._unacked: dict[int, list[int]] = {}
        # message id -> attempt ids whose start that message reported (per connection)
        self._unacked_starts: dict[int, list[int]] = {}
        self._tasks: set[asyncio.Task[object]] = set()
        self._gpu_uuids: list[str] = []
        self._starting: set[int] = set()  # attempts whose runtime start is in progress
        self._stop_after_start: dict[int, Stop] = {}
        self._gpu_claims: dict[int, frozenset[int]] = {}  # attempts starting → the GPUs they hold
        self._execs = 0  # one-shot commands running (``exec``)
        self._ttys: dict[int, _Tty] = {}  # ``exec_tty`` id -> its session (this connection's)
        self._ports: dict[int, _Port] = {}  # ``port_open`` id -> its connection (this connection's)
        self._execs_by_owner: dict[str, int] = {}  # of them, each owner's (left60)
        self._exec_owners: dict[int, str] = {}  # attempts started by this process → their owner's name
        self.health = HealthFile(config.state_dir, server=config.server, host=config.host_name)
        runtime.on_exit = self._on_exit

    def _new_backoff(self) -> Generator[float]:
        return backoff_delays(initial_s=1.0, cap_s=self.config.backoff_max)

    def request_stop(self) -> None:
        """Ask :meth:`run` to close the connection and return; attempts keep running."""
        self._stopping.set()

    async def run(self, install_signal_handlers: bool = False) -> None:
        """Recover local state, then stay connected (reconnecting with backoff) until
        :meth:`request_stop`, or SIGTERM/SIGINT with ``install_signal_handlers``.

        Raises:
            websockets.exceptions.InvalidURI: the server URL is unusable.
            HostRemoved: the server closed the link because an admin removed the host.
        """
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
        self.health.update()
        await self.runtime.recover()
        self.gpu.note_busy(self.runtime.busy_gpu_indices())
        connector = asyncio.create_task(self._connect_forever(), name="agent-connect")
        self._spawn(self._housekeeping())
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({connector, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if connector.done():
                connector.result()
            elif self._ws is not None:
                # The session closes itself with 1001; give it the close handshake's time.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(connector), timeout=6)
        finally:
            for task in (connector, stopping, *self._tasks):
                task.cancel()
            await asyncio.gather(connector, stopping, *self._tasks, return_exceptions=True)
            await self.runtime.close()
            self.health.update(running=False, connected=False)
            if install_signal_handlers:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            log.info("agent stopped; %d attempt(s) left running", len(self.runtime.running_ids()))

    async def _housekeeping(self) -> None:
        """Connected or not: cap attempt logs and forget old ended attempts, every few seconds."""
        while True:
            try:
                self.runtime.cap_logs()
                self.runtime.prune()
            except Exception:  # noqa: BLE001 -- housekeeping must never stop the agent
                log.exception("housekeeping failed")
            await asyncio.sleep(HOUSEKEEPING_S)

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("%s received: disconnecting, leaving attempts running", sig.name)
        self.request_stop()

    async def _connect_forever(self) -> None:
        connect = websockets.connect(
            self.config.server,
            additional_headers={"Authorization": f"Bearer {self.config.token}"},
            user_agent_header=f"fairway-agent/{AGENT_VERSION}",
            process_exception=_retry_or_raise,
            reconnect_delays=lambda: self._delays,
            open_timeout=10,
            ping_interval=PING_INTERVAL_S,
            ping_timeout=PING_TIMEOUT_S,
            close_timeout=CLOSE_TIMEOUT_S,
            # Above the protocol limit, so that an oversized message is answered, not fatal.
            max_size=4 * MAX_MESSAGE_BYTES,
            logger=_ws_log,
        )
        async for ws in connect:
            try:
                await self._session(ws)
            except ConnectionClosed:
                pass  # logged below, like a clean close
            except Exception:  # noqa: BLE001 -- the agent outlives any one session
                log.exception("session failed")
            finally:
                self._ws = None
                for stream in [*self._ttys.values(), *self._ports.values()]:  # their reader was on it
                    self._close_stream(stream)
                self._unacked.clear()
                self._unacked_starts.clear()
                self.health.update(connected=False, last_disconnect=f"{time.time():.0f}: close code {ws.close_code}")
            if self._stopping.is_set():
                return
            if ws.close_code == CLOSE_HOST_REMOVED:
                log.error(HOST_REMOVED_LOG)  # one line, then the agent exits (EXIT_HOST_REMOVED)
                raise HostRemoved(ws.close_reason or "")
            log.warning("disconnected from the server (close code %s %s)", ws.close_code, ws.close_reason or "")
            note_link_closed(self.config.state_dir, ws.close_code, ws.close_reason or "")
            if ws.close_code == CLOSE_SUPERSEDED:
                log.error("the server accepted a newer connection with this host's token: does another agent use it?")
            elif ws.close_code == CLOSE_UNAUTHORIZED:
                log.error(
                    "the server refused the host token: %s; %s",
                    ws.close_reason or "rotated or revoked?",
                    REFUSED_LINK_HINT,
                )
            delay = next(self._delays)
            log.info("reconnecting in %.1f s", delay)
            await asyncio.sleep(delay)

    def _host_resources(self) -> tuple[int | None, int | None]:
        """The CPUs and memory the hello reports (DESIGN.md §3.3): the GPU backend's, where the
        agent's config (``cpus``, ``memory``) does not set them; None where unknown."""
        try:
            cpus, memory = self.gpu.host_resources()
        except Exception:  # noqa: BLE001 -- the hello goes out without them rather than not at all
            log.exception("cannot read the host's CPUs and memory")
            cpus, memory = None, None
        cpus = self.config.cpus if self.config.cpus is not None else cpus
        memory = self.config.memory if self.config.memory is not None else memory
        return cpus, memory

    def _isolation_state(self) -> HostIsolation | None:
        """How attempts run here, for the hello (docs/isolation.md); None for a runtime without isolation."""
        isolation = getattr(self.runtime, "isolation", None)
        if isolation is None:
            return None
        try:
            status = isolation.status()
            return HostIsolation(
                mode=status["mode"],
                identity=status["identity"],
                cgroup=str(status["cgroup"])[:16],
                warnings=[str(w)[:1024] for w in status["warnings"][:16]],
            )
        except Exception:  # noqa: BLE001 -- the hello goes out without it rather than not at all
            log.exception("cannot read the isolation state")
            return None

    async def _session(self, ws: ClientConnection) -> None:
        log.info("connected to %s", self.config.server)
        gpus = await asyncio.to_thread(self.gpu.inventory)
        cpus, memory = await asyncio.to_thread(self._host_resources)
        self._gpu_uuids = [g.uuid for g in gpus]
        self.health.update(connected=True, connected_since=time.time(), gpus=len(gpus), last_heartbeat_at=None)
        note_link_open(self.config.state_dir)
        # No await between the snapshot and the hello's id: an exit is either in the hello or
        # reported after it, never before it nor lost.
        statuses, reported, starts, late_exits = self._attempt_statuses()
        self._ws, self._seq = ws, 0
        hello_id = await self._send(
            Hello(
                host=self.config.host_name,
                agent_version=AGENT_VERSION,
                gpus=gpus,
                attempts=statuses,
                isolation=self._isolation_state(),
                cpus=cpus,
                memory=memory,
            )
        )
        if hello_id is None:
            return  # closed meanwhile (or unencodable): reconnect with backoff
        if reported:
            self._unacked[hello_id] = reported
        if starts:
            self._unacked_starts[hello_id] = starts
        for record in late_exits:  # listed running with their start: their exits come after it
            await self._send_exit(record, record.age_s(monotonic_s(), self._boot_id))
        log.info("hello sent: %d GPU(s), %d attempt(s)", len(gpus), len(statuses))
        tasks = [
            asyncio.create_task(self._receive(ws, hello_id), name="agent-receive"),
            asyncio.create_task(self._heartbeats(), name="agent-heartbeat"),
            asyncio.create_task(self._stopping.wait(), name="agent-stopping"),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._stopping.is_set():
            await ws.close(code=1001, reason="agent shutting down")
            return
        for task in done:
            task.result()  # re-raise ConnectionClosed; a clean end falls through

    def _attempt_statuses(self) -> tuple[list[AttemptStatus], list[int], list[int], list[AttemptRecord]]:
        """The hello's attempts, the ids of the exits and of the starts it reports (acknowledged by
        the ``welcome``), and the exits to send right after it.

        A running attempt carries the seconds since its start (``age_s``; None while a start is in
        progress, e.g. an image pull), so that a server that never got its ``started`` dates the
        start (DESIGN.md §4: charged from the agent-confirmed start). An exited attempt not yet
        acknowledged is listed with the seconds since its exit, unless its start was never
        acknowledged either: then it is listed as running with the age of its start, and its exit
        is returned to be sent after the hello (one entry cannot carry both ages).
        """
        now = monotonic_s()
        statuses: list[AttemptStatus] = []
        ended: list[int] = []
        starts: list[int] = []
        late_exits: list[AttemptRecord] = []
        for record in self.runtime.records():
            start_age = record.start_age_s(now, self._boot_id)
            if record.state == "running":
                statuses.append(AttemptStatus(record.attempt_id, "running", age_s=start_age))
                if start_age is not None:
                    starts.append(record.attempt_id)
            elif record.state == "exited" and not record.reported and len(ended) + len(late_exits) < MAX_HELLO_EXITS:
                if not record.start_reported and start_age is not None:
                    statuses.append(AttemptStatus(record.attempt_id, "running", age_s=start_age))
                    starts.append(record.attempt_id)
                    late_exits.append(record)
                    continue
                age = record.age_s(now, self._boot_id)
                statuses.append(AttemptStatus(record.attempt_id, "exited", record.exit_code, age))
                ended.append(record.attempt_id)
        return statuses, ended, starts, late_exits

    async def _send(self, msg: Message, on: Any = None) -> int | None:
        """Send ``msg`` with the next sequence number; returns that id, or None if not sent. With
        ``on`` (the connection a request came on), only on that connection: the server numbers
        each connection's messages anew, so an answer's ``ref`` on the next one could name another
        person's request (brk61)."""
        ws = self._ws
        if ws is None or (on is not None and ws is not on):
            return None
        self._seq += 1
        msg = replace(msg, id=self._seq)
        try:
            text = encode(msg)
        except ProtocolError as exc:
            log.error("not sending invalid %s message: %s", msg.TYPE, exc)
            return None
        try:
            await ws.send(text)
        except ConnectionClosed:
            log.debug("not sent (connection closed): %s", msg.TYPE)
            return None
        return msg.id

    async def _heartbeats(self) -> None:
        while True:
            self._new_period.clear()
            try:
                await asyncio.wait_for(self._new_period.wait(), timeout=self.heartbeat_s)
                continue  # the welcome set another period: start it now
            except TimeoutError:
                pass
            self.gpu.note_busy(self.runtime.busy_gpu_indices())
            try:
                samples = await asyncio.to_thread(self.gpu.sample)
                sampled = True
            except Exception:  # noqa: BLE001 -- a failing GPU query must not silence the host
                log.exception("GPU sampling failed; heartbeat without GPU samples")
                samples, sampled = [], False
            running = self.runtime.running_ids()
            if await self._send(Heartbeat(gpus=samples, running=running)) is not None:
                self.health.update(
                    last_heartbeat_at=time.time(),
                    heartbeat_s=self.heartbeat_s,
                    gpu_sampling_ok=sampled,
                    unhealthy_gpus=sum(1 for g in samples if g.health == "unhealthy"),
                    running_attempts=len(running),
                )

    async def _receive(self, ws: ClientConnection, hello_id: int | None) -> None:
        async for frame in ws:
            try:
                msg = decode(frame, allowed=SERVER_MESSAGE_TYPES)
            except ProtocolError as exc:
                log.warning("bad message from server (%s): %s", exc.code, exc.message)
                await self._send(Error(code=exc.code, message=exc.message, ref=exc.ref))
                continue
            try:
                await self._dispatch(msg, hello_id)
            except ConnectionClosed:
                raise
            except Exception as exc:  # noqa: BLE001 -- one bad command must not kill the agent
                log.exception("failed to handle %s %d", msg.TYPE, msg.id)
                await self._send(Error(code="internal", message=f"{type(exc).__name__}: {exc}"[:1000], ref=msg.id))

    async def _dispatch(self, msg: Message, hello_id: int | None) -> None:
        if isinstance(msg, Start):
            await self._on_start(msg)
        elif isinstance(msg, Stop):
            await self._on_stop(msg)
        elif isinstance(msg, Logs):
            await self._on_logs(msg)
        elif isinstance(msg, Exec):
            owner = self._exec_owners.get(msg.attempt_id, "")
            mine = self._execs_by_owner.get(owner, 0)
            if refused := _slot_refusal(self._execs, mine, MAX_EXECS, "commands", "runs", msg.id):
                await self._send(refused)
                return
            self._execs += 1
            self._execs_by_owner[owner] = mine + 1
            # not awaited: the receive loop goes on meanwhile; answered on this connection only
            self._spawn(self._on_exec(msg, owner, self._ws))
        elif isinstance(msg, (ExecAck, ExecClose)) and msg.ref in self._ports:
            await self._on_port_message(msg)
        elif isinstance(msg, (ExecTty, ExecPipe, ExecInput, ExecData, ExecResize, ExecAck, ExecClose)):
            await self._on_tty_message(msg)
        elif isinstance(msg, (PortOpen, PortData)):
            await self._on_port_message(msg)
        elif isinstance(msg, Ack):
            self.runtime.mark_start_reported(self._unacked_starts.pop(msg.ack, []))
            self.runtime.mark_reported(self._unacked.pop(msg.ack, []))
        elif isinstance(msg, Welcome):
            if msg.host != self.config.host_name:
                log.warning("server welcomed host %r, this agent is %r", msg.host, self.config.host_name)
            self.heartbeat_s = msg.heartbeat_s
            self.health.update(welcomed_at=time.time(), heartbeat_s=msg.heartbeat_s)
            self._new_period.set()
            self._delays = self._new_backoff()
            if hello_id is not None:
                self.runtime.mark_start_reported(self._unacked_starts.pop(hello_id, []))
                self.runtime.mark_reported(self._unacked.pop(hello_id, []))
            log.info("welcomed by the server; heartbeat every %g s", msg.heartbeat_s)
        elif isinstance(msg, Error):
            log.warning("server error %s (about message %s): %s", msg.code, msg.ref, msg.message)

    async def _on_start(self, msg: Start) -> None:
        if msg.attempt_id in self._starting:
            # Before the record: a runtime may keep one while its start is in progress (docker,
            # during an image pull), and answering ``running`` then would date the start too early.
            log.info("start of attempt %d: already starting", msg.attempt_id)
            return  # the first start answers when the runtime is done (an image pull takes minutes)
        known = self.runtime.get(msg.attempt_id)
        if known is not None:
            log.info("start of attempt %d: already %s", msg.attempt_id, known.state)
            await self._report(known)
            return
        problem = self._check_gpus(msg) or _env_problem(msg)
        if problem:
            log.warning("refusing start of attempt %d: %s", msg.attempt_id, problem)
            await self._send(AttemptEvent(msg.attempt_id, "failed_to_start", message=problem))
            return
        spec = AttemptSpec(
            attempt_id=msg.attempt_id,
            workload_id=msg.workload_id,
            command=msg.command,
            gpu_indices=msg.gpu_indices,
            gpu_uuids=msg.gpu_uuids,
            env=msg.env,
            image=msg.image,
            grace_s=msg.grace_s,
            owner=msg.owner.name if msg.owner else "",
            owner_uid=msg.owner.uid if msg.owner else None,
            owner_gid=msg.owner.gid if msg.owner else None,
            owner_groups=tuple(msg.owner.groups) if msg.owner else (),
            allow_root=msg.allow_root,
            cpus=msg.limits.cpus if msg.limits else None,
            memory=msg.limits.memory if msg.limits else None,
            shared_memory=msg.limits.shared_memory if msg.limits else None,
            mounts=tuple(msg.mounts or ()),
        )
        running = set(self.runtime.running_ids())  # the owners of attempts gone are forgotten
        self._exec_owners = {a: o for a, o in self._exec_owners.items() if a in running or a in self._starting}
        self._exec_owners[msg.attempt_id] = spec.owner
        self._starting.add(msg.attempt_id)
        # Not awaited: the receive loop must go on (stops, log tails) while a container image is pulled.
        self._spawn(self._start(spec))

    def _gpu_holders(self, spec: AttemptSpec) -> dict[int, int]:
        """The GPUs of ``spec`` that another attempt of this host holds → that attempt: one running
        (a stop's grace period, an attempt the server took for lost and placed anew) or starting."""
        held: dict[int, int] = {}
        for record in self.runtime.records():
            if record.state == "running" and record.attempt_id != spec.attempt_id:
                held.update(dict.fromkeys(record.gpu_indices, record.attempt_id))
        for attempt_id, gpus in self._gpu_claims.items():
            if attempt_id != spec.attempt_id:
                held.update(dict.fromkeys(gpus, attempt_id))
        return {i: held[i] for i in spec.gpu_indices if i in held}

    async def _claim_gpus(self, spec: AttemptSpec) -> str | None:
        """Wait until no other attempt holds ``spec``'s GPUs, then hold them; or why not (a stop came,
        or :data:`GPU_WAIT_S` passed). brk41: a start for a GPU another attempt still held (the
        server ended that one as lost and placed a new one there while its process was in its
        grace period) ran both on one device, two owners' work sharing its memory."""
        deadline = time.monotonic() + GPU_WAIT_S
        held = self._gpu_holders(spec)
        if held:
            log.info("start of attempt %d: waiting for GPUs held by other attempts %s", spec.attempt_id, held)
        while held:
            if spec.attempt_id in self._stop_after_start:
                return "stopped while it waited for its GPUs"
            if time.monotonic() >= deadline:
                words = ", ".join(f"GPU {i} by attempt {a}" for i, a in sorted(held.items()))
                return f"its GPUs are still held by other attempts here ({words})"
            await asyncio.sleep(GPU_WAIT_POLL_S)
            held = self._gpu_holders(spec)
        self._gpu_claims[spec.attempt_id] = frozenset(spec.gpu_indices)
        return None

    async def _start(self, spec: AttemptSpec) -> None:
        try:
            problem = await self._claim_gpus(spec)
            if problem is not None:
                log.warning("attempt %d not started: %s", spec.attempt_id, problem)
                stop = self._stop_after_start.pop(spec.attempt_id, None)
                state: Literal["stopped", "failed_to_start"] = "stopped" if stop else "failed_to_start"
                await self._send(AttemptEvent(spec.attempt_id, state, message=problem))
                return
            await self.runtime.start(spec)
        except StartError as exc:
            await self._send(AttemptEvent(spec.attempt_id, "failed_to_start", message=str(exc)))
            return
        finally:
            self._starting.discard(spec.attempt_id)
            self._gpu_claims.pop(spec.attempt_id, None)
        self.gpu.note_busy(self.runtime.busy_gpu_indices())
        # Not sent while disconnected: the next hello lists the attempt with the age of its start.
        await self._send_start(spec.attempt_id, "started", None)
        stop = self._stop_after_start.pop(spec.attempt_id, None)
        if stop is not None:
            log.info("attempt %d: stopping it, as asked while it was starting", spec.attempt_id)
            await self.runtime.stop(spec.attempt_id, stop.grace_s, stop.reason)

    def _check_gpus(self, msg: Start) -> str | None:
        """Why the start names GPUs this host does not have (a host speaks only of its own)."""
        uuids = self._gpu_uuids
        if len(msg.gpu_uuids) != len(msg.gpu_indices) or len(set(msg.gpu_indices)) != len(msg.gpu_indices):
            return "gpu_uuids and gpu_indices do not match"
        for index, uuid in zip(msg.gpu_indices, msg.gpu_uuids, strict=True):
            if index >= len(uuids) or uuids[index] != uuid:
                return f"GPU {index} ({uuid}) is not on host {self.config.host_name}"
        return None

    async def _on_stop(self, msg: Stop) -> None:
        record = self.runtime.get(msg.attempt_id)
        if record is None and msg.attempt_id in self._starting:
            self._stop_after_start[msg.attempt_id] = msg  # its exit is reported once it has started
        elif record is None:
            log.info("stop of attempt %d: not known here", msg.attempt_id)
            await self._send(AttemptEvent(msg.attempt_id, "stopped", message="attempt not known on this host"))
        elif record.state != "running":
            await self._report(record)
        else:
            log.info("stopping attempt %d (%s), grace %d s", msg.attempt_id, msg.reason, msg.grace_s)
            # Not awaited: the grace period must not block the receive loop, and the stop goes
            # on across reconnects. The exit is reported by _on_exit.
            self._spawn(self.runtime.stop(msg.attempt_id, msg.grace_s, msg.reason))

    async def _on_logs(self, msg: Logs) -> None:
        record = self.runtime.get(msg.attempt_id)
        if record is None:
            await self._send(Error(code="unknown_attempt", message=f"no attempt {msg.attempt_id} here", ref=msg.id))
            return
        data, offset = self.runtime.read_log(msg.attempt_id, min(msg.tail_bytes, MAX_LOG_TAIL_BYTES))
        eof = record.state != "running"
        while True:
            reply = Log(msg.attempt_id, data.decode("utf-8", errors="replace"), offset, eof)
            try:
                encode(reply)
                break
            except ProtocolError:  # escapes can blow the tail up past the message limit
                cut = len(data) // 2
                data, offset = data[cut:], offset + cut
        await self._send(reply)

    async def _on_exec(self, msg: Exec, owner: str = "", conn: Any = None) -> None:
        """Run an ``exec`` in its attempt (the runtime's containment), then send its output in
        chunks (an ``exec_bytes``'s as it is, ``exec_data``; an older server's ``exec``'s as text,
        ``exec_output``) and its ``exec_result``; an ``error`` naming it when it cannot run.
        Answered on ``conn``, the connection it came on, only: one that ended meanwhile answers
        nothing (its requester was told ``host_offline``), and on the next one its id could be
        another request's (brk61)."""
        try:
            try:
                outcome = await self.runtime.exec(msg.attempt_id, list(msg.command), msg.timeout_s, msg.max_output)
            except ExecError as exc:
                await self._send(Error(code=f"exec_{exc.code}", message=str(exc)[:4000], ref=msg.id), on=conn)
                return
            except Exception as exc:  # answered all the same: else the server waits out its timeout (brk59)
                log.exception("exec in attempt %d failed", msg.attempt_id)
                why = f"the agent could not run it: {type(exc).__name__}: {exc}"
                await self._send(Error(code="exec_failed", message=why[:4000], ref=msg.id), on=conn)
                return
            for stream, data in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
                if isinstance(msg, ExecBytes):  # exec47: its bytes as they are
                    for at in range(0, len(data), EXEC_CHUNK_BYTES):
                        piece = base64.b64encode(data[at : at + EXEC_CHUNK_BYTES]).decode()
                        await self._send(ExecData(ref=msg.id, stream=stream, data=piece, eof=False), on=conn)  # type: ignore[arg-type]
                    continue
                decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                step = EXEC_CHUNK_BYTES - 4  # a character held back from the last chunk fits
                for at in range(0, len(data), step):
                    text = decoder.decode(data[at : at + step], final=at + step >= len(data))
                    if text:
                        await self._send(ExecOutput(ref=msg.id, stream=stream, data=text), on=conn)  # type: ignore[arg-type]
            await self._send(
                ExecResult(
                    ref=msg.id, exit_code=outcome.exit_code, timed_out=outcome.timed_out, truncated=outcome.truncated
                ),
                on=conn,
            )
        finally:
            self._execs -= 1
            if (left := self._execs_by_owner.pop(owner, 1) - 1) > 0:
                self._execs_by_owner[owner] = left

    async def _report(self, record: AttemptRecord) -> None:
        """Answer a repeated start/stop with what is known of an attempt."""
        if record.state == "running":
            await self._send_start(record.attempt_id, "running", record.start_age_s(monotonic_s(), self._boot_id))
        elif record.state == "failed_to_start":
            await self._send(AttemptEvent(record.attempt_id, "failed_to_start", message=record.message))
        else:
            await self._send_exit(record, record.age_s(monotonic_s(), self._boot_id))

    async def _send_start(self, attempt_id: int, state: Literal["started", "running"], age_s: float | None) -> None:
        sent = await self._send(AttemptEvent(attempt_id, state, age_s=age_s))
        if sent is not None:
            self._unacked_starts[sent] = [attempt_id]

    async def _send_exit(self, record: AttemptRecord, age_s: float | None) -> None:
        event = AttemptEvent(
            record.attempt_id, "exited", exit_code=record.exit_code, age_s=age_s, message=record.message
        )
        sent = await self._send(event)
        if sent is not None:
            self._unacked[sent] = [record.attempt_id]

    async def _on_tty_message(
        self, msg: ExecTty | ExecPipe | ExecInput | ExecData | ExecResize | ExecAck | ExecClose
    ) -> None:
        """An interactive session's messages (``fairway exec -it``, ``-i``: docs/jobs.md)."""
        if isinstance(msg, (ExecTty, ExecPipe)):
            owner = self._exec_owners.get(msg.attempt_id, "")
            mine = sum(1 for t in self._ttys.values() if self._exec_owners.get(t.attempt_id, "") == owner)
            if refused := _slot_refusal(len(self._ttys), mine, MAX_TTYS, "sessions", "holds", msg.id):
                await self._send(refused)
                return
            piped = isinstance(msg, ExecPipe) and not msg.tty
            new = _Tty(msg.attempt_id, float(msg.idle_s), monotonic_s(), binary=isinstance(msg, ExecPipe), piped=piped)
            self._ttys[msg.id] = new
            run = self._run_pipe(msg, new, self._ws) if isinstance(msg, ExecPipe) else self._run_tty(msg, new, self._ws)
            self._spawn(run)  # answered on this connection only
            return
        tty = self._ttys.get(msg.ref)
        if tty is None:
            return  # ended meanwhile: its exec_result is on its way
        if isinstance(msg, (ExecInput, ExecData)):
            if tty.closing:
                return  # the command is being ended: its input goes nowhere
            tty.last = monotonic_s()
            if isinstance(msg, ExecData):
                try:
                    data = base64.b64decode(msg.data, validate=True)
                except binascii.Error:
                    data = b"\0" * (EXEC_TTY_WINDOW + 1)  # not base64: ended below
            else:
                data = msg.data.encode()
            conn, ref = self._ws, msg.ref

            def written(size: int) -> None:  # its window moves on (piped input only)
                self._spawn(self._send(ExecAck(ref=ref, bytes=size, chunks=1), on=conn))

            acked = written if tty.piped and data else None
            try:
                if tty.session is None:
                    if len(tty.early) + len(data) > EXEC_TTY_WINDOW:
                        raise InputOverflow("too much input before the command started")
                    tty.early += data
                    if acked is not None:
                        acked(len(data))
                    tty.early_eof |= isinstance(msg, ExecData) and msg.eof
                else:
                    if data:
                        tty.session.write(data, acked)
                    if isinstance(msg, ExecData) and msg.eof:
                        tty.session.close_stdin()
            except InputOverflow as exc:
                log.warning("attempt %d: interactive session %d closed: %s", tty.attempt_id, msg.ref, exc)
                tty.why = f"the session was ended: {exc}"
                self._close_stream(tty)
        elif isinstance(msg, ExecResize):
            if tty.session is not None:
                tty.session.resize(msg.rows, msg.cols)
            else:  # set once it starts
                tty.size = (msg.rows, msg.cols)
        elif isinstance(msg, ExecAck):
            tty.unacked = max(0, tty.unacked - msg.bytes)
            tty.unacked_chunks = max(0, tty.unacked_chunks - msg.chunks)
            tty.credit.set()
        else:
            self._close_stream(tty)

    def _close_stream(self, stream: _Stream) -> None:
        """End a session or a forwarded connection: its reader left, its attempt ended, it was idle,
        or the connection ended."""
        if stream.closing:
            return
        stream.closing = True
        stream.credit.set()
        if isinstance(stream, _Port):
            stream.closed.set()
        elif isinstance(stream, _Tty) and stream.session is not None:
            self._spawn(stream.session.close())

    async def _run_tty(self, msg: ExecTty, tty: _Tty, conn: Any = None) -> None:
        """Run an ``exec_tty``: start its command on a terminal in the attempt's containment (the
        runtime's), send its output as ``exec_output`` (at most :data:`EXEC_TTY_WINDOW` bytes and
        :data:`EXEC_TTY_WINDOW_CHUNKS` messages ahead of the server's ``exec_ack``s), end it when
        idle for ``idle_s``, then ``exec_result``."""
        session: TtySession | None = None
        try:
            try:
                session = await self.runtime.exec_tty(msg.attempt_id, list(msg.command), msg.rows, msg.cols)
            except ExecError as exc:
                await self._send(Error(code=f"exec_{exc.code}", message=str(exc)[:4000], ref=msg.id), on=conn)
                return
            tty.session = session
            tty.last = monotonic_s()  # idle from the command's start: a slow start is not idleness
            if tty.size is not None:
                session.resize(*tty.size)
            if tty.closing:
                self._spawn(session.close())
            elif tty.early:
                try:
                    session.write(bytes(tty.early))
                except InputOverflow as exc:
                    tty.why = f"the session was ended: {exc}"
                    self._close_stream(tty)
                tty.early.clear()
            self._spawn(self._idle(msg.id, tty))
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            exited = asyncio.ensure_future(session.proc.wait())
            while True:
                await tty.window_open()
                reading = asyncio.ensure_future(session.read())
                await asyncio.wait([reading, exited], return_when=asyncio.FIRST_COMPLETED)
                try:
                    data = reading.result() if reading.done() else await asyncio.wait_for(reading, TTY_EXIT_DRAIN_S)
                except TimeoutError:
                    data = b""
                if not data:
                    break
                tty.last = monotonic_s()
                text = decoder.decode(data)
                if text:
                    tty.unacked += len(text.encode())
                    tty.unacked_chunks += 1
                    await self._send(ExecOutput(ref=msg.id, stream="stdout", data=text), on=conn)
            await session.close()  # what it left behind (a background job holding the terminal)
            code = await exited
            if text := decoder.decode(b"", final=True):
                await self._send(ExecOutput(ref=msg.id, stream="stdout", data=text), on=conn)
            log.info("attempt %d: interactive exec exited %d%s", msg.attempt_id, code, " (idle)" if tty.idle else "")
            await self._send(
                ExecResult(
                    ref=msg.id,
                    exit_code=128 - code if code < 0 else code,
                    timed_out=tty.idle,
                    truncated=False,
                    message=tty.why,
                ),
                on=conn,
            )
        except Exception as exc:  # answered all the same, as exec's (brk61: its reader waited for ever)
            await self._exec_failed("interactive", msg.attempt_id, msg.id, session, exc, conn)
        finally:
            self._exec_done(msg.id, tty, session)

    async def _run_pipe(self, msg: ExecPipe, tty: _Tty, conn: Any = None) -> None:
        """Run an ``exec_pipe``: start its command in the attempt's containment (the runtime's), on a
        terminal where ``tty``, else with pipes; ``exec_started`` once it runs; its output's bytes as
        ``exec_data`` (``stdout``, ``stderr``) within the windows of :meth:`_run_tty`'s; ended as a
        session is; then ``exec_result`` (pf63: bytes as they are, not text)."""
        session: TtySession | PipeSession | None = None
        try:
            try:
                if msg.tty:
                    session = await self.runtime.exec_tty(msg.attempt_id, list(msg.command), msg.rows, msg.cols)
                else:
                    session = await self.runtime.exec_pipe(msg.attempt_id, list(msg.command))
            except ExecError as exc:
                await self._send(Error(code=f"exec_{exc.code}", message=str(exc)[:4000], ref=msg.id), on=conn)
                return
            tty.session = session
            tty.last = monotonic_s()  # as exec_tty's: idle from the command's start
            await self._send(ExecStarted(ref=msg.id), on=conn)
            if tty.size is not None:
                session.resize(*tty.size)
            if tty.closing:
                self._spawn(session.close())
            else:
                try:
                    if tty.early:
                        session.write(bytes(tty.early))
                    if tty.early_eof:
                        session.close_stdin()
                except InputOverflow as exc:
                    tty.why = f"the session was ended: {exc}"
                    self._close_stream(tty)
                tty.early.clear()
            self._spawn(self._idle(msg.id, tty))
            exited = asyncio.ensure_future(session.proc.wait())
            while True:
                await tty.window_open()
                reading = asyncio.ensure_future(session.read_stream())
                await asyncio.wait([reading, exited], return_when=asyncio.FIRST_COMPLETED)
                try:
                    stream, data = (
                        reading.result() if reading.done() else await asyncio.wait_for(reading, TTY_EXIT_DRAIN_S)
                    )
                except TimeoutError:
                    stream, data = "", b""
                if not data:
                    break
                tty.last = monotonic_s()
                for at in range(0, len(data), EXEC_CHUNK_BYTES):
                    piece = data[at : at + EXEC_CHUNK_BYTES]
                    tty.unacked += len(piece)
                    tty.unacked_chunks += 1
                    out = ExecData(ref=msg.id, stream=stream, data=base64.b64encode(piece).decode(), eof=False)  # type: ignore[arg-type]
                    await self._send(out, on=conn)
            if not msg.tty:  # its output ended: it ends by itself (else a close, or at the idle timeout)
                await asyncio.wait([exited])
            await session.close()  # what it left behind (a background job holding the terminal, its pipes)
            code = await exited
            log.info("attempt %d: piped exec exited %d%s", msg.attempt_id, code, " (idle)" if tty.idle else "")
            result = ExecResult(
                ref=msg.id,
                exit_code=128 - code if code < 0 else code,
                timed_out=tty.idle,
                truncated=False,
                message=tty.why,
            )
            await self._send(result, on=conn)
        except Exception as exc:  # answered all the same, as a session's
            await self._exec_failed("piped", msg.attempt_id, msg.id, session, exc, conn)
        finally:
            self._exec_done(msg.id, tty, session)

    async def _exec_failed(
        self, what: str, attempt_id: int, ref: int, session: TtySession | PipeSession | None, exc: Exception, conn: Any
    ) -> None:
        """Answer the session ``ref`` that failed with ``exc`` (``what``: its kind, for the log): the
        error logged, its session closed, ``error exec_failed`` sent (one ending for :meth:`_run_tty`'s
        and :meth:`_run_pipe`'s)."""
        log.exception("%s exec in attempt %d failed", what, attempt_id)
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()
        why = f"the agent could not run it: {type(exc).__name__}: {exc}"
        await self._send(Error(code="exec_failed", message=why[:4000], ref=ref), on=conn)

    def _exec_done(self, ref: int, tty: _Tty, session: TtySession | PipeSession | None) -> None:
        """The session ``ref`` ended, however: ``tty`` closing, its session finished, ``ref`` forgotten
        (the last step of :meth:`_run_tty`'s and :meth:`_run_pipe`'s)."""
        tty.closing = True
        if session is not None:
            session.finish()
        if self._ttys.get(ref) is tty:
            del self._ttys[ref]

    async def _idle(self, ref: int, stream: _Stream) -> None:
        """Close the session or forwarded connection ``ref`` once nothing went in or out for its ``idle_s``."""
        while not stream.closing:
            left = stream.last + stream.idle_s - monotonic_s()
            if left <= 0:
                log.info("attempt %d: stream %d idle for %g s: closed", stream.attempt_id, ref, stream.idle_s)
                stream.idle = True
                self._close_stream(stream)
                return
            await asyncio.sleep(min(left, 5.0))

    # --- forwarded connections (``port_open``: ``fairway port-forward``, docs/jobs.md) ---

    async def _on_port_message(self, msg: PortOpen | PortData | ExecAck | ExecClose) -> None:
        if isinstance(msg, PortOpen):
            owner = self._exec_owners.get(msg.attempt_id, "")
            mine = sum(1 for p in self._ports.values() if self._exec_owners.get(p.attempt_id, "") == owner)
            if refused := _slot_refusal(len(self._ports), mine, MAX_PORTS, "forwarded connections", "holds", msg.id):
                await self._send(refused)
                return
            new = _Port(msg.attempt_id, float(msg.idle_s), monotonic_s())
            self._ports[msg.id] = new
            self._spawn(self._run_port(msg, new, self._ws))  # answered on this connection only
            return
        port = self._ports.get(msg.ref)
        if port is None:
            return  # ended meanwhile: its end is on its way
        if isinstance(msg, ExecAck):
            port.unacked = max(0, port.unacked - msg.bytes)
            port.unacked_chunks = max(0, port.unacked_chunks - msg.chunks)
            port.credit.set()
        elif isinstance(msg, ExecClose):
            self._close_stream(port)
        else:
            port.last = monotonic_s()
            try:
                data = base64.b64decode(msg.data, validate=True)
            except binascii.Error:
                data = b"\0" * (EXEC_TTY_WINDOW + 1)  # not base64: ended below
            if data:
                # the server holds its reader to the window: more is a broken server, not a user
                if port.queued + len(data) > EXEC_TTY_WINDOW or port.queued_chunks >= EXEC_TTY_WINDOW_CHUNKS:
                    log.warning("attempt %d: forwarded connection %d: more than the window", port.attempt_id, msg.ref)
                    self._close_stream(port)
                    return
                port.queued += len(data)
                port.queued_chunks += 1
                port.inbox.put_nowait(data)
            if msg.eof:
                port.inbox.put_nowait(b"")

    async def _run_port(self, msg: PortOpen, port: _Port, conn: Any = None) -> None:
        """Relay a ``port_open``: the runtime's connection to the port in the attempt (made there,
        as its owner), its bytes both ways as ``port_data`` within the windows, ended when both
        sides have ended theirs, on an error, a close, the attempt's end or ``idle_s``; then its
        ``exec_result`` (an ``error`` ``exec_not_running`` when its attempt ended); all of it on
        ``conn``, the connection it came on, only (brk61: on the next one its id is another's)."""
        writer: asyncio.StreamWriter | None = None
        why = ""
        try:
            try:
                sock = await self.runtime.connect_port(msg.attempt_id, msg.port)
            except ExecError as exc:
                await self._send(Error(code=f"exec_{exc.code}", message=str(exc)[:4000], ref=msg.id), on=conn)
                return
            except OSError as exc:  # a socket pair, a helper: none could be made here
                log.exception("attempt %d: forwarding port %d failed", msg.attempt_id, msg.port)
                await self._send(Error(code="exec_failed", message=f"{exc}"[:4000], ref=msg.id), on=conn)
                return
            reader, writer = await asyncio.open_connection(sock=sock, limit=2 * PORT_CHUNK_BYTES)
            self._spawn(self._idle(msg.id, port))
            up = asyncio.ensure_future(self._port_up(msg.id, port, writer, conn))
            down = asyncio.ensure_future(self._port_down(msg.id, port, reader, conn))
            closed = asyncio.ensure_future(port.closed.wait())
            both: asyncio.Future[Any] = asyncio.gather(up, down)
            await asyncio.wait([both, closed], return_when=asyncio.FIRST_COMPLETED)
            for task in (up, down, closed):
                task.cancel()
            await asyncio.wait([up, down, closed])
            for task in (up, down):
                if not task.cancelled() and isinstance(error := task.exception(), OSError):
                    why = error.strerror or str(error)
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await both
            if port.attempt_ended:
                await self._send(
                    Error(code="exec_not_running", message="the workload's attempt ended", ref=msg.id), on=conn
                )
                return
            log.info("attempt %d: forwarded connection to port %d ended %s", msg.attempt_id, msg.port, why)
            result = ExecResult(ref=msg.id, exit_code=0, timed_out=port.idle, truncated=False, message=why)
            await self._send(result, on=conn)
        except Exception as exc:  # answered all the same, as a session's (brk61: its reader waited for ever)
            log.exception("attempt %d: forwarded connection to port %d failed", msg.attempt_id, msg.port)
            why = f"the agent could not relay it: {type(exc).__name__}: {exc}"
            await self._send(Error(code="exec_failed", message=why[:4000], ref=msg.id), on=conn)
        finally:
            port.closing = True
            if writer is not None:
                writer.close()
            if self._ports.get(msg.id) is port:
                del self._ports[msg.id]

    async def _port_up(self, ref: int, port: _Port, writer: asyncio.StreamWriter, conn: Any = None) -> None:
        """What the server sends for the connection ``ref``, written to it; each piece acknowledged
        (``exec_ack``) once written, so that the server's reader may send more."""
        while True:
            data = await port.inbox.get()
            if not data:  # the reader's side ended: so does ours (TCP's half-close)
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            port.queued -= len(data)
            port.queued_chunks -= 1
            port.last = monotonic_s()
            await self._send(ExecAck(ref=ref, bytes=len(data), chunks=1), on=conn)

    async def _port_down(self, ref: int, port: _Port, reader: asyncio.StreamReader, conn: Any = None) -> None:
        """What the connection ``ref`` sends, to the server as ``port_data``, at most
        :data:`EXEC_TTY_WINDOW` bytes and :data:`EXEC_TTY_WINDOW_CHUNKS` messages ahead of its acks."""
        while True:
            await port.window_open()
            if port.closing:
                return
            data = await reader.read(min(PORT_CHUNK_BYTES, EXEC_TTY_WINDOW - port.unacked))
            port.last = monotonic_s()
            if not data:
                await self._send(PortData(ref=ref, data="", eof=True), on=conn)
                return
            port.unacked += len(data)
            port.unacked_chunks += 1
            await self._send(PortData(ref=ref, data=base64.b64encode(data).decode(), eof=False), on=conn)

    def _on_exit(self, record: AttemptRecord) -> None:
        for stream in [*self._ttys.values(), *self._ports.values()]:  # the attempt's sessions end with it
            if stream.attempt_id == record.attempt_id:
                if isinstance(stream, _Port):
                    stream.attempt_ended = True
                self._close_stream(stream)
        self.gpu.note_busy(self.runtime.busy_gpu_indices())
        if self._ws is not None:  # else the next hello reports it, with its age
            self._spawn(self._send_exit(record, None))

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
