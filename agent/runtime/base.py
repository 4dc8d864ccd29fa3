"""The interface every runtime implements (``process`` now, ``docker`` later; DESIGN.md §5)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from agent.protocol import Mount
from agent.runtime.isolation import Identity, IdentityError, Isolation
from agent.runtime.pipe import PipeSession
from agent.runtime.tty import TtySession
from agent.state import AttemptRecord, AttemptStore, cap_log, current_boot_id, read_log_tail

log = logging.getLogger(__name__)

RETENTION_S = 24 * 3600
"""How long an acknowledged, ended attempt (record and log) is kept, in seconds."""
UNREPORTED_RETENTION_S = 7 * 24 * 3600
"""How long an ended attempt the server never acknowledged is kept, in seconds."""


@dataclass(frozen=True, slots=True)
class AttemptSpec:
    """What to run for one attempt (from a ``start`` message); ``grace_s`` in seconds.

    Every runtime gives the attempt ``env`` (which carries the gang's rendezvous variables
    ``MASTER_ADDR``, ``MASTER_PORT``, ``NNODES``, ``NODE_RANK``, ``WORLD_SIZE`` from the server)
    plus ``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``, ``FAIRWAY_WORKLOAD_ID``,
    ``FAIRWAY_ATTEMPT`` and ``FAIRWAY_PREEMPT_FILE``.
    """

    attempt_id: int
    workload_id: int
    command: list[str]
    gpu_indices: list[int]
    gpu_uuids: list[str]
    env: dict[str, str] = field(default_factory=dict)
    image: str = ""
    grace_s: int = 30
    owner: str = ""  # the Fairway user (start.owner.name); "" when the server named none
    owner_uid: int | None = None  # set by an admin (start.owner.uid), else mapped on the host
    owner_gid: int | None = None
    owner_groups: tuple[int, ...] = ()
    allow_root: bool | None = None  # the cluster allows uid 0 (start.allow_root); None: a server older than it
    # Limits (start.limits, DESIGN.md §3.3): CPUs, memory and /dev/shm bytes; None: not limited
    cpus: int | None = None
    memory: int | None = None
    shared_memory: int | None = None
    mounts: tuple[Mount, ...] = ()  # storage mounts (docs/jobs.md)


def mount_env(mounts: Sequence[Mount], *, in_container: bool) -> dict[str, str]:
    """``FAIRWAY_MOUNT_<NAME>`` → where each mount is seen by the attempt (its container path in a
    container, its host path for a process); ``-`` in a name becomes ``_`` (docs/jobs.md)."""
    return {
        "FAIRWAY_MOUNT_" + m.name.upper().replace("-", "_"): m.container_path if in_container else m.host_path
        for m in mounts
    }


class RuntimeUnavailable(Exception):
    """The runtime cannot run on this host (e.g. no container engine); the message says why in one line."""


class StartError(Exception):
    """The attempt could not be started (its message is reported as ``failed_to_start``)."""


class ExecError(Exception):
    """A one-shot command could not be run in an attempt (``exec``, docs/jobs.md): ``code`` says
    why (``not_running``: no such running attempt here; ``unsupported``: not in this runtime or
    for this attempt; ``failed``: its containment could not be entered), the message in words."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class ExecOutcome:
    """What a one-shot command in an attempt gave: its ``exit_code`` (128+N: killed by signal N;
    124: killed at the timeout, ``timed_out``), each stream's first ``max_output`` bytes, and
    ``truncated`` when either had more."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool = False
    timed_out: bool = False


ExitCallback = Callable[[AttemptRecord], None]


class Runtime(ABC):
    """Runs attempts and keeps their records; reports every exit through ``on_exit``.

    Attempt ids are unique and never reused, so a record, once ended, answers every later
    ``start`` or ``stop`` for the same id without running anything again.
    """

    on_exit: ExitCallback | None = None

    @abstractmethod
    async def recover(self) -> None:
        """Load the records on disk, re-adopt attempts still running, mark vanished ones exited."""

    @abstractmethod
    async def start(self, spec: AttemptSpec) -> AttemptRecord:
        """Start ``spec`` and return its ``running`` record, or the existing record of that id.

        Raises:
            StartError: nothing could be started (the failure is recorded too).
        """

    @abstractmethod
    async def stop(self, attempt_id: int, grace_s: float, reason: str = "") -> AttemptRecord | None:
        """Stop an attempt: write its preemption notice (deadline = now + ``grace_s``, ``reason``),
        SIGTERM, wait ``grace_s`` seconds, then SIGKILL; return once it has exited (its record), at
        once for an attempt already ended, None for an unknown id."""

    @abstractmethod
    def get(self, attempt_id: int) -> AttemptRecord | None:
        """The record of ``attempt_id``, if any."""

    @abstractmethod
    def records(self) -> list[AttemptRecord]:
        """Every record, ordered by attempt id."""

    @abstractmethod
    def mark_reported(self, attempt_ids: list[int]) -> None:
        """The server acknowledged these attempts' end states (they leave ``hello``)."""

    @abstractmethod
    def mark_start_reported(self, attempt_ids: list[int]) -> None:
        """The server acknowledged these attempts' starts (a hello no longer repeats them)."""

    @abstractmethod
    def read_log(self, attempt_id: int, tail_bytes: int) -> tuple[bytes, int]:
        """The last ``tail_bytes`` bytes of the attempt's log and their byte offset in it.

        Raises:
            KeyError: unknown attempt.
        """

    def cap_logs(self) -> None:  # noqa: B027 -- optional: runtimes whose logs the engine caps skip it
        """Drop the oldest output of logs over the size cap (called periodically)."""

    @abstractmethod
    def prune(self) -> None:
        """Forget acknowledged, ended attempts older than the retention period."""

    @abstractmethod
    async def close(self) -> None:
        """Stop watching attempts, leaving them running (the next agent re-adopts them)."""

    async def exec(self, attempt_id: int, command: list[str], timeout_s: float, max_output: int) -> ExecOutcome:
        """Run ``command`` once inside the running attempt ``attempt_id``'s containment, as its
        processes run (identity, cgroup, namespaces, environment), no stdin; killed after
        ``timeout_s`` seconds; each stream kept to ``max_output`` bytes.

        Raises:
            ExecError: it could not run there (the runtime cannot, or the attempt does not run).
        """
        raise ExecError("unsupported", f"the {type(self).__name__} cannot run a command in an attempt")

    async def exec_tty(self, attempt_id: int, command: list[str], rows: int, cols: int) -> TtySession:
        """Start ``command`` inside the running attempt ``attempt_id``'s containment, as :meth:`exec`
        does, on a new pseudo-terminal of ``rows`` × ``cols`` (an interactive session: ``exec_tty``).

        Raises:
            ExecError: it could not start there (the runtime cannot, or the attempt does not run).
        """
        raise ExecError("unsupported", f"the {type(self).__name__} cannot open a terminal in an attempt")

    async def exec_pipe(self, attempt_id: int, command: list[str]) -> PipeSession:
        """Start ``command`` inside the running attempt ``attempt_id``'s containment, as :meth:`exec`
        does, with pipes for its stdin, stdout and stderr, no terminal (``exec_pipe`` without
        ``tty``: ``fairway exec -i``).

        Raises:
            ExecError: it could not start there (the runtime cannot, or the attempt does not run).
        """
        raise ExecError("unsupported", f"the {type(self).__name__} cannot pipe a command's input in an attempt")

    async def connect_port(self, attempt_id: int, port: int) -> socket.socket:
        """A TCP connection to ``port`` on 127.0.0.1 as the running attempt ``attempt_id`` sees it
        (its network, its owner's identity: ``fairway port-forward``).

        Raises:
            ExecError: ``port_refused`` (nothing listens there), or it could not be made there
                (the runtime cannot, or the attempt does not run).
        """
        raise ExecError("unsupported", f"the {type(self).__name__} cannot forward a port of an attempt")

    def running_ids(self) -> list[int]:
        """Ids of the attempts running now, ascending."""
        return [r.attempt_id for r in self.records() if r.state == "running"]

    def busy_gpu_indices(self) -> set[int]:
        """GPU indices held by running attempts."""
        return {i for r in self.records() if r.state == "running" for i in r.gpu_indices}


PEER_UID_CHECK = Path(__file__).with_name("peer_uid.py").read_text()
"""The check, in a connection's helper (the process runtime's exec wrapper, the docker runtime's
``NETNS_CONNECT``), that the server its connection reached is its own uid's: ``peer_uid_problem``,
"" or why not (docs/isolation.md, brk62)."""


def handed_connection(mine: socket.socket, port: int, exit_code: int | None, said: str) -> socket.socket:
    """The connection to ``port`` a helper (the process runtime's exec wrapper, the docker
    runtime's :data:`agent.runtime.docker.NETNS_CONNECT`) made where the attempt runs and passed
    over the Unix socket ``mine`` (SCM_RIGHTS), once it ended (``exit_code``; ``said``: its last
    line of errors).

    Raises:
        ExecError: none came (``said`` says why).
    """
    mine.setblocking(False)
    try:
        _msg, fds, _flags, _addr = socket.recv_fds(mine, 16, 1)
    except OSError:
        fds = []
    for extra in fds[1:]:
        os.close(extra)
    if not fds:
        last = f": {said}" if said else ""
        raise ExecError("failed", f"the connection to port {port} was not handed over (exit {exit_code}){last}")
    return socket.socket(fileno=fds[0])


class StoredRuntime(Runtime):
    """The record keeping shared by the runtimes: records, logs and run directories under
    ``<state_dir>/attempts`` (:class:`agent.state.AttemptStore`), each log capped at ``log_max_bytes``."""

    def _new_record(self, spec: AttemptSpec) -> AttemptRecord:
        """The record of an attempt about to start (state ``running``), shared by every runtime."""
        return AttemptRecord(
            attempt_id=spec.attempt_id,
            workload_id=spec.workload_id,
            state="running",
            gpu_indices=list(spec.gpu_indices),
            grace_s=spec.grace_s,
            boot_id=self.boot_id,
        )

    def __init__(self, state_dir: Path, log_max_bytes: int = 64 * 1024 * 1024) -> None:
        self.store = AttemptStore(state_dir)
        self.log_max_bytes = log_max_bytes
        self.boot_id = current_boot_id()
        self._records: dict[int, AttemptRecord] = {}

    def get(self, attempt_id: int) -> AttemptRecord | None:
        return self._records.get(attempt_id)

    def records(self) -> list[AttemptRecord]:
        return [self._records[k] for k in sorted(self._records)]

    def read_log(self, attempt_id: int, tail_bytes: int) -> tuple[bytes, int]:
        if attempt_id not in self._records:
            raise KeyError(attempt_id)
        return read_log_tail(self.store.log_path(attempt_id), tail_bytes)

    def cap_logs(self) -> None:
        """Hold each running attempt's log to ``log_max_bytes`` (see :func:`agent.state.cap_log`)."""
        for record in list(self._records.values()):
            if record.state == "running":
                self._cap_log(record.attempt_id)

    def _cap_log(self, attempt_id: int) -> None:
        """Hold one attempt's log to ``log_max_bytes``: periodically while it runs, and once more
        when it has ended (output written since the last pass would otherwise stay on disk)."""
        if cap_log(self.store.log_path(attempt_id), self.log_max_bytes):
            log.info("attempt %d: log over %d bytes, oldest output dropped", attempt_id, self.log_max_bytes)

    def mark_reported(self, attempt_ids: list[int]) -> None:
        for attempt_id in attempt_ids:
            record = self._records.get(attempt_id)
            if record is not None and record.state != "running" and not record.reported:
                record.reported = True
                self.store.save(record)

    def mark_start_reported(self, attempt_ids: list[int]) -> None:
        for attempt_id in attempt_ids:
            record = self._records.get(attempt_id)
            if record is not None and not record.start_reported:
                record.start_reported = True
                self.store.save(record)

    def prune(self) -> None:
        now = time.time()
        for record in list(self._records.values()):
            if record.finished_wall is None:
                continue
            age = now - record.finished_wall
            if age > (RETENTION_S if record.reported else UNREPORTED_RETENTION_S):
                if not record.reported:
                    log.warning("forgetting attempt %d: its exit was never acknowledged", record.attempt_id)
                self.store.delete(record.attempt_id)
                del self._records[record.attempt_id]

    isolation: Isolation

    async def _identity(self, record: AttemptRecord, spec: AttemptSpec) -> Identity:
        """Who the attempt runs as (:meth:`Isolation.resolve`); a refusal fails the start."""
        try:
            return await asyncio.to_thread(
                self.isolation.resolve,
                spec.owner,
                spec.owner_uid,
                spec.owner_gid,
                tuple(spec.owner_groups),
                cluster_allows_root=spec.allow_root,
            )
        except IdentityError as exc:
            self._fail(record, str(exc))

    def _fail(self, record: AttemptRecord, message: str) -> NoReturn:
        record.state = "failed_to_start"
        record.message = message
        record.finished_wall = time.time()
        record.reported = True  # answered at once; a repeated start gets the same answer
        self._records[record.attempt_id] = record
        self.store.save(record)
        log.warning("attempt %d failed to start: %s", record.attempt_id, message)
        raise StartError(message)
