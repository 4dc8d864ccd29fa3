"""The websocket protocol between the Fairway server and its host agents (DESIGN.md §7).

Every frame is one JSON object, an *envelope*::

    {"v": 1, "type": "<type>", "id": <n>, ...fields}

``v`` is :data:`PROTOCOL_VERSION`; ``id`` is the sender's per-connection sequence number (the
receiver names it in ``ack.ack`` and ``error.ref``). All fields of a message are required on the
wire (``null`` where a field is optional) and unknown fields are rejected: a peer that needs a new
field needs a new protocol version. Every string is valid Unicode: a lone surrogate (``"\ud800"``
in the JSON) makes the frame ``invalid``.

``attempt_id`` is the attempt's *wire id* (the server's ``Attempt.wire_id``): random in
[1, 2^63 - 1], never the database's primary key, so that the ids an agent remembers cannot be
given to new attempts after the server's database is restored from a backup (the agent would
answer a new attempt's ``start`` with an old one's exit, and its ``logs`` with the old log).
It is also what the attempt sees as ``FAIRWAY_ATTEMPT``.

Both sides use :func:`encode` and :func:`decode`; :func:`decode` never raises anything but
:class:`ProtocolError`, so one ``except ProtocolError`` answers every malformed frame with an
``error`` message and the connection survives.

Agent → server: ``hello``, ``heartbeat``, ``attempt``, ``log``, ``exec_output``, ``exec_result``,
``port_data``, ``exec_ack``, ``exec_started``, ``exec_data``, ``error``.
Server → agent: ``welcome``, ``start``, ``stop``, ``logs``, ``exec``, ``exec_tty``, ``exec_input``,
``exec_resize``, ``exec_ack``, ``exec_close``, ``port_open``, ``port_data``, ``exec_pipe``,
``exec_data``, ``exec_bytes``, ``ack``, ``error``.

``exec``, ``exec_output`` and ``exec_result`` came later on version 1 (new types, no new field of
an old one): an agent older than them answers an ``exec`` with ``error`` ``unknown_type`` naming
its id, which the server reports as "the agent must be upgraded" (agent/README.md). So did the
interactive session's ``exec_tty``, ``exec_input``, ``exec_resize``, ``exec_ack`` and ``exec_close``
(``fairway exec -it``): an agent older than them answers ``exec_tty`` with ``unknown_type``. And
``fairway port-forward``'s ``port_open`` and ``port_data`` (the agent's ``exec_ack`` of what it wrote
to a forwarded connection too): an older agent answers ``port_open`` with ``unknown_type``.
And a session's bytes as they are (pf63: ``exec_pipe``, ``exec_started``, ``exec_data``; ``fairway
exec -i`` without a terminal, and ``-it`` binary-safe): an older agent answers ``exec_pipe`` with
``unknown_type``, and the server opens an ``exec_tty`` instead where it asked for a terminal.
And a one-shot command's bytes as they are (exec47: ``exec_bytes``, answered by ``exec_data``): an
older agent answers ``exec_bytes`` with ``unknown_type``, and the server asks ``exec`` instead (its
output as text, bad bytes replaced); a server older than it still asks ``exec``, which a newer agent
still answers with ``exec_output`` (one release: agent/README.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
import types
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

from fairway_common.limits import (  # noqa: F401 -- the protocol's bounds, also read by the CLI: re-exported
    EXEC_CHUNK_BYTES,
    EXEC_MAX_TIMEOUT_S,
    EXEC_TTY_WINDOW,
    EXEC_TTY_WINDOW_CHUNKS,
    PORT_CHUNK_BYTES,
    STREAM_RETRY_AFTER_KEY,
)

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 256 * 1024
CLOSE_HOST_REMOVED = 4410
"""Close code of the server to the agent of a host an admin removed (at once, and at every later
connect): for good, as HTTP's 410 Gone. The agent stops (``agent.client.EXIT_HOST_REMOVED``)
instead of reconnecting; 4401 (token unknown, rotated or revoked) and 4409 (superseded) are retried."""
HOST_REMOVED_REASON = "host removed from Fairway by an admin"
UNKNOWN_TOKEN_REASON = "unknown host token"  # noqa: S105 -- words, not a token
"""How the server's 4401 to a token no host holds begins (``scheduler.gateway.link_refusal``): the
agent notes it for ``--uninstall`` (``agent.client.HOST_UNKNOWN_FILE``)."""
"""Largest encoded envelope either side sends or accepts, in bytes of UTF-8."""
MAX_HOST_GPUS = 256
"""Most GPUs one host reports (``hello``, ``heartbeat``) or one ``start`` names; a join is held to it too."""
MAX_GPU_MEMORY_MB = 2**31 - 1
"""Largest GPU memory a ``hello`` reports, MiB (the server stores it in a 32-bit column), and the
most a ``heartbeat``'s GPU sample reports used."""
MAX_CPUS = 1 << 20
"""Most CPUs a ``hello`` reports or a ``start`` limits to."""
MAX_BYTES = 1 << 62
"""Largest memory size a ``hello`` reports or a ``start`` limits to, bytes."""
MIN_MEMORY_BYTES = 6 << 20
"""The least memory one attempt runs in: Docker's own floor for a container (6 MiB). A workload's
request below it is refused at submission, and so is a host's memory below it, in a ``hello`` or
the agent's config (``memory: 64``, meant as gigabytes, is 64 bytes: every start there failed)."""

HOST_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
HOST_NAME_RE = re.compile(f"^{HOST_NAME_PATTERN}$")
"""A host's name: the one rule of a join and a registration (``scheduler.services``), a scenario
file's hosts, the API's host URLs (:data:`HOST_NAME_PATTERN`) and the agent's ``host_name``
(``agent.config``), whose ``hello`` must name its host."""
HOST_NAME_RULE = "1-128 of [A-Za-z0-9._-], starting alphanumeric"
"""What :data:`HOST_NAME_RE` asks, in words (after "a host name is")."""

MIN_HEARTBEAT_S, MAX_HEARTBEAT_S = 0.05, 3600.0
"""The heartbeat periods a ``welcome`` sets, seconds (the agent's ``heartbeat`` is held to them too)."""

MAX_ERROR_CHARS = 500
"""Longest ``ProtocolError.message`` (the log line and the ``error`` sent back quote it)."""

# ProtocolError codes (also used as ``Error.code`` when answering a bad frame).
ERR_TOO_LARGE = "too_large"
ERR_BAD_JSON = "bad_json"
ERR_BAD_ENVELOPE = "bad_envelope"
ERR_BAD_VERSION = "bad_version"
ERR_UNKNOWN_TYPE = "unknown_type"
ERR_UNEXPECTED_TYPE = "unexpected_type"
ERR_INVALID = "invalid"

FATAL_XIDS: frozenset[int] = frozenset({48, 63, 64, 74, 79, 94, 95, 119, 120})
"""NVIDIA XIDs that make a GPU unhealthy (DESIGN.md §4)."""


class ProtocolError(Exception):
    """A frame that is not a valid protocol message.

    ``code`` is one of the ``ERR_*`` constants, ``message`` says what is wrong (with the field
    path), ``ref`` is the offending envelope's ``id`` when it could be read, else ``None``.
    """

    def __init__(self, code: str, message: str, ref: int | None = None) -> None:
        if len(message) > MAX_ERROR_CHARS:  # it quoted a bad value or unknown fields whole: up to a frame
            message = message[: MAX_ERROR_CHARS - 1] + "…"  # into the log per bad frame (brk34)
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.ref = ref


# --- field constraints, attached with typing.Annotated ------------------------------------------


@dataclass(frozen=True, slots=True)
class Range:
    """Inclusive numeric bounds."""

    lo: float
    hi: float

    def check(self, value: Any, path: str) -> None:
        if not self.lo <= value <= self.hi:
            raise ProtocolError(ERR_INVALID, f"{path}: {value!r} not in [{self.lo}, {self.hi}]")


@dataclass(frozen=True, slots=True)
class Size:
    """Bounds on ``len()`` of a string (characters), list or dict (entries)."""

    hi: int
    lo: int = 0

    def check(self, value: Any, path: str) -> None:
        if not self.lo <= len(value) <= self.hi:
            raise ProtocolError(ERR_INVALID, f"{path}: length {len(value)} not in [{self.lo}, {self.hi}]")


@dataclass(frozen=True, slots=True)
class Distinct:
    """No two items of a list of objects share a value of any of ``fields`` (a host's GPUs: one
    GPU named twice in a heartbeat had its health recorded twice, flipping it every heartbeat)."""

    fields: tuple[str, ...]

    def check(self, value: Any, path: str) -> None:
        for name in self.fields:
            seen: set[Any] = set()
            for item in value:
                key = getattr(item, name)
                if key in seen:
                    raise ProtocolError(ERR_INVALID, f"{path}: {name} {key!r} named twice")
                seen.add(key)


@dataclass(frozen=True, slots=True)
class NoNul:
    """No NUL character (command arguments and environment entries end up in execve)."""

    def check(self, value: Any, path: str) -> None:
        if "\0" in value:
            raise ProtocolError(ERR_INVALID, f"{path}: contains NUL")


_INT64 = 2**63 - 1
Id = Annotated[int, Range(1, _INT64)]  # database ids: positive, never reused
Seq = Annotated[int, Range(0, _INT64)]
Name = Annotated[str, Size(256, 1)]
Text = Annotated[str, Size(65536)]
Arg = Annotated[str, Size(65536), NoNul()]
EnvKey = Annotated[str, Size(1024, 1), NoNul()]
GpuIndex = Annotated[int, Range(0, 1023)]
ExitCode = Annotated[int, Range(-(2**31), 2**31 - 1)]
Seconds = Annotated[float, Range(0.0, 10.0**10)]
GraceSeconds = Annotated[int, Range(0, 7 * 86400)]
Health = Literal["healthy", "degraded", "unhealthy"]
AttemptState = Literal["started", "running", "exited", "failed_to_start", "stopped"]


# --- messages -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Message:
    """Base of every message. ``id`` is the envelope's sequence number (0 until a sender sets it)."""

    TYPE: ClassVar[str] = ""
    id: int = field(default=0, kw_only=True)


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU of a host's inventory; ``memory_mb`` in MiB."""

    index: GpuIndex
    uuid: Name
    model: Name
    memory_mb: Annotated[int, Range(0, MAX_GPU_MEMORY_MB)]
    health: Health


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU's telemetry at a heartbeat. Units: %, MiB, °C, W; ``xids``: recent XID events.

    A reading the GPU could not give (NVML's ``NOT_SUPPORTED`` on a MIG-mode GPU, a transient
    error) is ``None``: not measured, never 0 (a server before nvml56 refuses ``null``: CHANGELOG.md).

    ``memory_used_mb`` is bounded as ``hello``'s ``memory_mb`` (:data:`MAX_GPU_MEMORY_MB`): more is
    ``invalid``, as every reading out of its range. Above the GPU's own ``memory_mb`` but within
    the bound the frame is not refused (a heartbeat carries no total, and refusing it would lose
    the whole heartbeat's health and XIDs for one number): the agent clips the reading to the
    GPU's total before sending it (``agent.gpu.nvml``), as it clamps the other readings.
    """

    index: GpuIndex
    utilization_pct: Annotated[float, Range(0.0, 100.0)] | None
    memory_used_mb: Annotated[int, Range(0, MAX_GPU_MEMORY_MB)] | None
    temperature_c: Annotated[float, Range(-100.0, 300.0)] | None
    power_w: Annotated[float, Range(0.0, 100_000.0)] | None
    ecc_uncorrected: Annotated[int, Range(0, _INT64)]
    health: Health
    xids: Annotated[list[Annotated[int, Range(0, 2**31 - 1)]], Size(64)]


@dataclass(frozen=True, slots=True)
class AttemptStatus:
    """An attempt the agent knows of, in ``hello``.

    ``exit_code`` is set for ``exited`` when known; ``age_s`` is the seconds on the agent's
    monotonic clock since the exit (``exited``) or since the start (``running``: the server dates a
    start it never got from it), ``None`` when unknown (a start still in progress, another boot,
    an agent older than the reading for ``running``). An attempt whose start the server never
    acknowledged is listed ``running`` with its start's age even if it has exited since; its
    ``exited`` follows the hello (agent/README.md).
    """

    attempt_id: Id
    state: Literal["running", "exited"]
    exit_code: ExitCode | None = None
    age_s: Seconds | None = None


@dataclass(frozen=True, slots=True)
class HostIsolation:
    """How attempts run on the host (docs/isolation.md, the agent's ``isolation.json``): ``mode``
    the agent's setting, ``identity`` whose identity attempts actually get (``agent``: the agent's
    own user, e.g. an agent not running as root), ``cgroup`` v2 | v1 | none, and the ``warnings``
    an operator must see."""

    mode: Literal["owner", "agent"]
    identity: Literal["owner", "agent"]
    cgroup: Annotated[str, Size(16)]
    warnings: Annotated[list[Annotated[str, Size(1024)]], Size(16)] = field(default_factory=list)


Cpus = Annotated[int, Range(1, MAX_CPUS)]
Bytes = Annotated[int, Range(1, MAX_BYTES)]
HostBytes = Annotated[int, Range(MIN_MEMORY_BYTES, MAX_BYTES)]


@dataclass(frozen=True, slots=True)
class Hello(Message):
    """Agent → server, first message of every connection: the host's full local state.

    ``isolation``: optional on the wire (an agent older than the field omits it: ``null``).
    ``cpus``, ``memory``: the CPUs and bytes of memory the host offers to attempts (DESIGN.md
    §3.3); optional on the wire (``null``: an agent older than the fields, no constraint)."""

    TYPE: ClassVar[str] = "hello"
    host: Name
    agent_version: Annotated[str, Size(64, 1)]
    gpus: Annotated[list[GpuInfo], Size(MAX_HOST_GPUS), Distinct(("index", "uuid"))]
    attempts: Annotated[list[AttemptStatus], Size(4096)]
    isolation: HostIsolation | None = None
    cpus: Cpus | None = None
    memory: HostBytes | None = None

    WIRE_OPTIONAL: ClassVar[frozenset[str]] = frozenset({"isolation", "cpus", "memory"})


@dataclass(frozen=True, slots=True)
class Heartbeat(Message):
    """Agent → server, every ``heartbeat_s``: GPU samples and the ids of running attempts.

    Each GPU at most once (as ``hello``'s ``gpus``, by ``index``; there also by ``uuid``): a frame
    naming one twice is ``invalid``."""

    TYPE: ClassVar[str] = "heartbeat"
    gpus: Annotated[list[GpuSample], Size(MAX_HOST_GPUS), Distinct(("index",))]
    running: Annotated[list[Id], Size(4096)]


@dataclass(frozen=True, slots=True)
class AttemptEvent(Message):
    """Agent → server: an attempt changed state.

    ``started``: the process was spawned. ``running``: answer to a ``start`` of an attempt
    already running. ``exited``: it ended, ``exit_code`` set when known (128+N: killed by
    signal N). ``failed_to_start``: spawning failed, ``message`` says why. ``stopped``: a
    ``stop`` named an attempt unknown here (nothing runs). ``age_s`` is set only for an event
    that happened while disconnected or is re-sent: its age in seconds on the agent's monotonic
    clock (for ``running``, the age of the start).
    """

    TYPE: ClassVar[str] = "attempt"
    attempt_id: Id
    state: AttemptState
    exit_code: ExitCode | None = None
    age_s: Seconds | None = None
    message: Text = ""


@dataclass(frozen=True, slots=True)
class Log(Message):
    """Agent → server, answer to ``logs``: ``data`` starts at byte ``offset`` of the attempt's
    log; ``eof`` is true when the attempt no longer runs (the log is complete)."""

    TYPE: ClassVar[str] = "log"
    attempt_id: Id
    data: Annotated[str, Size(MAX_MESSAGE_BYTES)]
    offset: Seq
    eof: bool


@dataclass(frozen=True, slots=True)
class Error(Message):
    """Either way: a message could not be handled. ``ref`` is the offending message's ``id``."""

    TYPE: ClassVar[str] = "error"
    code: Name
    message: Text
    ref: Seq | None = None


@dataclass(frozen=True, slots=True)
class Welcome(Message):
    """Server → agent, after a valid ``hello``: also acknowledges every exit the hello reported.
    ``heartbeat_s`` is the heartbeat period the agent must use, in seconds."""

    TYPE: ClassVar[str] = "welcome"
    host: Name
    heartbeat_s: Annotated[float, Range(MIN_HEARTBEAT_S, MAX_HEARTBEAT_S)]


PosixId = Annotated[int, Range(0, 2**32 - 2)]


@dataclass(frozen=True, slots=True)
class Owner:
    """Who an attempt runs as (docs/isolation.md): the Fairway user ``name`` and, when an admin set
    them, the POSIX ``uid``, ``gid`` and extra ``groups``. Without a ``uid`` the agent maps ``name``
    through the host's NSS (``getent passwd``), else uses a dedicated account ``fw-<name>``."""

    name: Name
    uid: PosixId | None = None
    gid: PosixId | None = None
    groups: Annotated[list[PosixId], Size(64)] = field(default_factory=list)


Path = Annotated[str, Size(1024, 1), NoNul()]


@dataclass(frozen=True, slots=True)
class Mount:
    """A storage mount of the cluster's catalog, resolved by the server (docs/jobs.md): the docker
    runtime binds ``host_path`` at ``container_path``; the process runtime exposes the host path."""

    name: Annotated[str, Size(64, 1), NoNul()]
    host_path: Path
    container_path: Path
    read_only: bool = True


@dataclass(frozen=True, slots=True)
class Limits:
    """What an attempt may use on this host (DESIGN.md §3.3, docs/isolation.md): ``cpus`` CPUs,
    ``memory`` bytes, ``shared_memory`` bytes of ``/dev/shm``; None: not limited. The server
    resolves a workload's default request (the host's per-GPU share) before sending."""

    cpus: Cpus | None = None
    memory: Bytes | None = None
    shared_memory: Bytes | None = None


@dataclass(frozen=True, slots=True)
class Start(Message):
    """Server → agent: run an attempt on the given GPUs (indices and UUIDs of this host).

    ``image``: the process runtime refuses a start with one (``failed_to_start``). ``grace_s``:
    default SIGTERM→SIGKILL grace. ``owner``: whose identity the attempt runs under; optional on
    the wire (a missing ``owner`` reads as ``null``: a server older than the field).
    ``allow_root``: the cluster's ``allow_root_workloads`` (docs/isolation.md): false, the agent
    refuses to run the attempt as uid 0; optional on the wire (``null``: a server older than the
    field, the agent's own ``isolation.allow_root`` alone decides). ``limits``: CPUs and memory
    the runtime enforces; optional on the wire (``null``: a server older than the field, none).
    ``mounts``: storage mounts (docs/jobs.md); optional on the wire (missing or ``null``: none).
    """

    TYPE: ClassVar[str] = "start"
    attempt_id: Id
    workload_id: Id
    image: Annotated[str, Size(1024)]
    command: Annotated[list[Arg], Size(4096, 1)]
    env: Annotated[dict[EnvKey, Arg], Size(4096)]
    gpu_uuids: Annotated[list[Name], Size(MAX_HOST_GPUS)]
    gpu_indices: Annotated[list[GpuIndex], Size(MAX_HOST_GPUS)]
    grace_s: GraceSeconds
    owner: Owner | None = None
    allow_root: bool | None = None
    limits: Limits | None = None
    mounts: Annotated[list[Mount], Size(16)] | None = None

    WIRE_OPTIONAL: ClassVar[frozenset[str]] = frozenset({"owner", "allow_root", "limits", "mounts"})
    WIRE_OMIT_EMPTY: ClassVar[frozenset[str]] = frozenset({"mounts"})
    """Left out of the frame when empty, so agents older than the field take the start."""


@dataclass(frozen=True, slots=True)
class Stop(Message):
    """Server → agent: stop an attempt (SIGTERM, ``grace_s`` seconds, SIGKILL)."""

    TYPE: ClassVar[str] = "stop"
    attempt_id: Id
    reason: Name
    grace_s: GraceSeconds


@dataclass(frozen=True, slots=True)
class Logs(Message):
    """Server → agent: send the last ``tail_bytes`` bytes of an attempt's log."""

    TYPE: ClassVar[str] = "logs"
    attempt_id: Id
    tail_bytes: Annotated[int, Range(0, 16 * 1024 * 1024)]


EXEC_MAX_OUTPUT = 1 << 20
"""Most bytes of each stream (stdout, stderr) one ``exec`` sends back; past it ``truncated``."""


def one_persons_share(slots: int) -> int:
    """Of ``slots`` commands (``exec``) run at once, how many one person's may hold: half, at least
    1, so that one person's few ``sleep 600`` leave the others room. The one rule of the web
    process's slots (``scheduler.execs.exec_slots_per_user``, brk59) and the agent's
    (``agent.client.MAX_EXECS`` per owner, left60)."""
    return max(1, slots // 2)


@dataclass(frozen=True, slots=True)
class Exec(Message):
    """Server → agent: run ``command`` once inside the running attempt ``attempt_id``'s containment
    (its owner's identity, cgroup, namespaces and environment: docs/jobs.md, "Run a command in a
    running workload"), no TTY, no stdin, killed after ``timeout_s``; each stream kept to
    ``max_output`` bytes. Answered by ``exec_output`` chunks, then one ``exec_result`` (``ref``:
    this message's id), or an ``error`` naming it."""

    TYPE: ClassVar[str] = "exec"
    attempt_id: Id
    command: Annotated[list[Arg], Size(4096, 1)]
    timeout_s: Annotated[int, Range(1, EXEC_MAX_TIMEOUT_S)]
    max_output: Annotated[int, Range(0, EXEC_MAX_OUTPUT)]


@dataclass(frozen=True, slots=True)
class ExecBytes(Exec):
    """Server → agent: an ``exec`` whose output comes as it is (exec47): as ``exec_data`` chunks
    (``ref``: this message's id; ``stream`` ``stdout`` or ``stderr``, ``data`` in base64, at most
    :data:`EXEC_CHUNK_BYTES` bytes each, ``eof`` false), then one ``exec_result``, or an ``error``
    naming it. An agent older than it answers ``unknown_type`` (the server asks ``exec`` instead)."""

    TYPE: ClassVar[str] = "exec_bytes"


@dataclass(frozen=True, slots=True)
class ExecOutput(Message):
    """Agent → server: the next ``data`` of ``stream`` of the ``exec`` whose id is ``ref`` (at most
    :data:`EXEC_CHUNK_BYTES` bytes of output, decoded as UTF-8, bad bytes replaced); an
    ``exec_bytes``'s output comes as ``exec_data`` instead."""

    TYPE: ClassVar[str] = "exec_output"
    ref: Seq
    stream: Literal["stdout", "stderr"]
    data: Annotated[str, Size(EXEC_CHUNK_BYTES)]


@dataclass(frozen=True, slots=True)
class ExecResult(Message):
    """Agent → server: the ``exec`` whose id is ``ref`` ended: ``exit_code`` (128+N: killed by
    signal N; 124 with ``timed_out``), ``truncated``: some output was dropped at ``max_output``;
    ``message``: why the command did not run (``exit_code`` null then), or why the agent ended an
    ``exec_tty``'s command (input it did not read past its bound)."""

    TYPE: ClassVar[str] = "exec_result"
    ref: Seq
    exit_code: ExitCode | None
    timed_out: bool
    truncated: bool
    message: Text = ""


EXEC_TTY_MAX_IDLE_S = 7 * 24 * 3600
"""Longest ``exec_tty.idle_s``, seconds."""
TtySize = Annotated[int, Range(1, 4096)]


@dataclass(frozen=True, slots=True)
class ExecTty(Message):
    """Server → agent: run ``command`` inside the running attempt ``attempt_id``'s containment, as
    ``exec`` does, on a new pseudo-terminal of ``rows`` × ``cols`` (an interactive session:
    ``fairway exec -it``). Its output comes as ``exec_output`` (``stream`` ``stdout``, ``ref`` this
    message's id), at most :data:`EXEC_TTY_WINDOW` bytes (UTF-8 of ``data``) and
    :data:`EXEC_TTY_WINDOW_CHUNKS` messages ahead of the ``exec_ack``s; its end as one
    ``exec_result``; an ``error`` naming it when it cannot run. Nothing in or out for ``idle_s``
    seconds ends it, as do ``exec_close`` and the connection's end."""

    TYPE: ClassVar[str] = "exec_tty"
    attempt_id: Id
    command: Annotated[list[Arg], Size(4096, 1)]
    rows: TtySize
    cols: TtySize
    idle_s: Annotated[int, Range(1, EXEC_TTY_MAX_IDLE_S)]


@dataclass(frozen=True, slots=True)
class ExecInput(Message):
    """Server → agent: ``data`` (UTF-8) for the terminal of the ``exec_tty`` whose id is ``ref``."""

    TYPE: ClassVar[str] = "exec_input"
    ref: Seq
    data: Annotated[str, Size(EXEC_CHUNK_BYTES)]


@dataclass(frozen=True, slots=True)
class ExecResize(Message):
    """Server → agent: the terminal of the ``exec_tty`` ``ref`` is now ``rows`` × ``cols``."""

    TYPE: ClassVar[str] = "exec_resize"
    ref: Seq
    rows: TtySize
    cols: TtySize


@dataclass(frozen=True, slots=True)
class ExecAck(Message):
    """Server → agent: ``chunks`` more ``exec_output`` messages of the ``exec_tty`` ``ref``,
    ``bytes`` bytes of output (UTF-8 of their ``data``), were delivered to its reader."""

    TYPE: ClassVar[str] = "exec_ack"
    ref: Seq
    bytes: Annotated[int, Range(0, 1 << 30)]
    chunks: Annotated[int, Range(0, 1 << 20)]


@dataclass(frozen=True, slots=True)
class ExecClose(Message):
    """Server → agent: end the ``exec_tty`` ``ref`` (its reader left): SIGHUP, then its process tree
    is killed; answered by its ``exec_result``."""

    TYPE: ClassVar[str] = "exec_close"
    ref: Seq


PORT_DATA_CHARS = 4 * ((PORT_CHUNK_BYTES + 2) // 3)
"""Longest ``port_data.data``: :data:`PORT_CHUNK_BYTES` bytes in base64."""
Port = Annotated[int, Range(1, 65535)]


@dataclass(frozen=True, slots=True)
class PortOpen(Message):
    """Server → agent: connect to TCP ``port`` on 127.0.0.1 as the running attempt ``attempt_id``
    would (from its containment, as its owner; a container's own network) and relay that one
    connection (``fairway port-forward``: docs/jobs.md). Both ways its bytes go as ``port_data``
    (``ref``: this message's id); each way at most :data:`EXEC_TTY_WINDOW` bytes and
    :data:`EXEC_TTY_WINDOW_CHUNKS` messages ahead of the other side's ``exec_ack``s (the agent
    acknowledges what it wrote to the connection, the server what its reader took). Its end is
    one ``exec_result`` (``exit_code`` 0; ``timed_out``: idle for ``idle_s``), or an ``error``
    naming it (``exec_port_refused``: nothing listens there). ``exec_close`` ends it."""

    TYPE: ClassVar[str] = "port_open"
    attempt_id: Id
    port: Port
    idle_s: Annotated[int, Range(1, EXEC_TTY_MAX_IDLE_S)]


@dataclass(frozen=True, slots=True)
class PortData(Message):
    """Either way: the next bytes of the ``port_open`` ``ref``'s connection, ``data`` in base64 (at
    most :data:`PORT_CHUNK_BYTES` bytes); ``eof``: the sender's side will send no more (TCP's
    half-close: the receiver shuts its writing side once what came before is written)."""

    TYPE: ClassVar[str] = "port_data"
    ref: Seq
    data: Annotated[str, Size(PORT_DATA_CHARS)]
    eof: bool


@dataclass(frozen=True, slots=True)
class ExecPipe(Message):
    """Server → agent: run ``command`` inside the running attempt ``attempt_id``'s containment, as
    ``exec_tty`` does, its bytes carried as they are (pf63): on a pseudo-terminal of ``rows`` ×
    ``cols`` when ``tty`` (``fairway exec -it``; one stream, ``stdout``), else with pipes, no
    terminal (``fairway exec -i``: ``cat data | … python process.py``; ``stdout`` and ``stderr``
    apart). Answered at once by ``exec_started`` (``ref``: this message's id) once the command runs,
    then ``exec_data`` of its output within the windows of ``exec_tty``'s (:data:`EXEC_TTY_WINDOW`
    bytes, :data:`EXEC_TTY_WINDOW_CHUNKS` messages ahead of the ``exec_ack``s), then one
    ``exec_result``; an ``error`` naming it when it cannot run. Its input comes as ``exec_data``
    (``stdin``; ``eof``: the end of its input, a pipe's close), each acknowledged by an ``exec_ack``
    once written to it; ``exec_resize``, ``exec_close`` and ``idle_s`` as ``exec_tty``'s. An agent
    older than it answers ``unknown_type`` (the server then opens ``exec_tty`` where ``tty``)."""

    TYPE: ClassVar[str] = "exec_pipe"
    attempt_id: Id
    command: Annotated[list[Arg], Size(4096, 1)]
    tty: bool
    rows: TtySize
    cols: TtySize
    idle_s: Annotated[int, Range(1, EXEC_TTY_MAX_IDLE_S)]


@dataclass(frozen=True, slots=True)
class ExecStarted(Message):
    """Agent → server: the ``exec_pipe`` ``ref``'s command runs (its input may come now)."""

    TYPE: ClassVar[str] = "exec_started"
    ref: Seq


@dataclass(frozen=True, slots=True)
class ExecData(Message):
    """Either way: the next bytes of a stream of the ``exec_pipe`` ``ref``, ``data`` in base64 (at
    most :data:`EXEC_CHUNK_BYTES` bytes): ``stdin`` from the server, ``stdout`` or ``stderr`` from
    the agent; ``eof``: that stream ends (``stdin``'s: the command's input is closed). Also the
    agent's output of the ``exec_bytes`` ``ref`` (``stdout`` or ``stderr``, ``eof`` false)."""

    TYPE: ClassVar[str] = "exec_data"
    ref: Seq
    stream: Literal["stdin", "stdout", "stderr"]
    data: Annotated[str, Size(PORT_DATA_CHARS)]
    eof: bool


@dataclass(frozen=True, slots=True)
class Ack(Message):
    """Server → agent: the message with id ``ack`` was processed."""

    TYPE: ClassVar[str] = "ack"
    ack: Seq


MESSAGE_TYPES: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        Hello,
        Heartbeat,
        AttemptEvent,
        Log,
        Error,
        Welcome,
        Start,
        Stop,
        Logs,
        Ack,
        Exec,
        ExecBytes,
        ExecOutput,
        ExecResult,
        ExecTty,
        ExecInput,
        ExecResize,
        ExecAck,
        ExecClose,
        PortOpen,
        PortData,
        ExecPipe,
        ExecStarted,
        ExecData,
    )
}
AGENT_MESSAGE_TYPES: frozenset[str] = frozenset(
    {"hello", "heartbeat", "attempt", "log", "exec_output", "exec_result", "error", "port_data", "exec_ack"}
    | {"exec_started", "exec_data"}
)
"""Types an agent sends (a server decodes with ``allowed=AGENT_MESSAGE_TYPES``)."""
SERVER_MESSAGE_TYPES: frozenset[str] = frozenset(
    {"welcome", "start", "stop", "logs", "exec", "ack", "error"}
    | {"exec_tty", "exec_input", "exec_resize", "exec_ack", "exec_close", "port_open", "port_data"}
    | {"exec_pipe", "exec_data", "exec_bytes"}
)
"""Types a server sends (an agent decodes with ``allowed=SERVER_MESSAGE_TYPES``)."""

_ENVELOPE_KEYS = ("v", "type", "id")


# --- validation, compiled once from the type hints above ----------------------------------------

_Check = Callable[[Any, str], Any]


def _compile(tp: Any) -> _Check:
    origin = get_origin(tp)
    if origin is Annotated:
        base, *constraints = get_args(tp)
        inner = _compile(base)

        def check_annotated(value: Any, path: str) -> Any:
            value = inner(value, path)
            for constraint in constraints:
                constraint.check(value, path)
            return value

        return check_annotated
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) != 1:  # only ``X | None`` is used
            raise TypeError(f"unsupported union {tp!r}")
        inner_opt = _compile(args[0])
        return lambda value, path: None if value is None else inner_opt(value, path)
    if origin is Literal:
        allowed = frozenset(get_args(tp))

        def check_literal(value: Any, path: str) -> Any:
            if not isinstance(value, str) or value not in allowed:
                raise ProtocolError(ERR_INVALID, f"{path}: {value!r} not one of {sorted(allowed)}")
            return value

        return check_literal
    if origin is list:
        (item_tp,) = get_args(tp)
        item = _compile(item_tp)

        def check_list(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise ProtocolError(ERR_INVALID, f"{path}: expected a list")
            return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

        return check_list
    if origin is dict:
        key_tp, value_tp = get_args(tp)
        key, val = _compile(key_tp), _compile(value_tp)

        def check_dict(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise ProtocolError(ERR_INVALID, f"{path}: expected an object")
            return {key(k, f"{path} key"): val(v, f"{path}.{k}") for k, v in value.items()}

        return check_dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _compile_dataclass(tp)
    if tp is bool:
        return _scalar(lambda v: isinstance(v, bool), "a boolean")
    if tp is int:
        return _scalar(lambda v: type(v) is int, "an integer")
    if tp is str:

        def check_str(value: Any, path: str) -> Any:
            if not isinstance(value, str):
                raise ProtocolError(ERR_INVALID, f"{path}: expected a string, got {type(value).__name__}")
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800"): not Unicode text
                    raise ProtocolError(ERR_INVALID, f"{path}: not valid Unicode (lone surrogate)") from None
            return value

        return check_str
    if tp is float:

        def check_float(value: Any, path: str) -> Any:
            if type(value) not in (int, float) or not math.isfinite(value):
                raise ProtocolError(ERR_INVALID, f"{path}: expected a finite number")
            return float(value)

        return check_float
    raise TypeError(f"unsupported field type {tp!r}")


def _scalar(ok: Callable[[Any], bool], what: str) -> _Check:
    def check_scalar(value: Any, path: str) -> Any:
        if not ok(value):
            raise ProtocolError(ERR_INVALID, f"{path}: expected {what}, got {type(value).__name__}")
        return value

    return check_scalar


def _fields_of(cls: type) -> dict[str, _Check]:
    hints = get_type_hints(cls, include_extras=True)
    return {f.name: _compile(hints[f.name]) for f in dataclasses.fields(cls) if f.name != "id"}


def _compile_dataclass(cls: type) -> _Check:
    checks = _fields_of(cls)

    def check_object(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise ProtocolError(ERR_INVALID, f"{path}: expected an object")
        _check_keys(value.keys(), checks.keys(), path)
        return cls(**{name: check(value[name], f"{path}.{name}") for name, check in checks.items()})

    return check_object


def _check_keys(got: Collection[str], want: Collection[str], path: str) -> None:
    missing = [k for k in want if k not in got]
    if missing:
        raise ProtocolError(ERR_INVALID, f"{path}: missing field(s) {', '.join(missing)}")
    unknown = sorted(k for k in got if k not in want)
    if unknown:
        raise ProtocolError(ERR_INVALID, f"{path}: unknown field(s) {', '.join(unknown)}")


_MESSAGE_FIELDS: dict[str, dict[str, _Check]] = {t: _fields_of(c) for t, c in MESSAGE_TYPES.items()}


# --- the same checks without error paths (the fast path of _build) -------------------------------
#
# The checks above build every field's path (``heartbeat.gpus[3].power_w``) before checking it;
# with them a heartbeat's decode took 88 µs, with the checks below 48 (docs/benchmarks/api_load.md,
# "Fifteenth pass"). The checks below accept exactly what those accept and return the same values,
# but only say *that* a value is bad (:class:`_Bad`); :func:`_build` then runs the checks above on
# the same payload for the error, which is therefore always theirs. tests/agent/test_agent_protocol.py
# compares the two on random frames, valid and broken.


class _Bad(Exception):
    """A value the fast checks refuse; the path-building checks say why."""


_BAD = _Bad()
_Fast = Callable[[Any], Any]


def _fast(tp: Any) -> _Fast:  # noqa: C901 -- one branch per kind of field, as _compile
    origin = get_origin(tp)
    if origin is Annotated:
        base, *constraints = get_args(tp)
        inner = _fast(base)
        if base is int and len(constraints) == 1 and isinstance(constraints[0], Range):
            lo, hi = constraints[0].lo, constraints[0].hi

            def fast_int_range(value: Any) -> Any:
                if type(value) is not int or not lo <= value <= hi:
                    raise _BAD
                return value

            return fast_int_range
        if base is float and len(constraints) == 1 and isinstance(constraints[0], Range):
            lo, hi = constraints[0].lo, constraints[0].hi  # finite bounds: NaN and infinities fail them

            def fast_float_range(value: Any) -> Any:
                if (type(value) is not float and type(value) is not int) or not lo <= value <= hi:
                    raise _BAD
                return float(value)

            return fast_float_range
        sizes = [c for c in constraints if isinstance(c, Size)]
        if len(sizes) == len(constraints) == 1:
            slo, shi = sizes[0].lo, sizes[0].hi

            def fast_sized(value: Any) -> Any:
                value = inner(value)
                if not slo <= len(value) <= shi:
                    raise _BAD
                return value

            return fast_sized

        def fast_annotated(value: Any) -> Any:
            value = inner(value)
            for constraint in constraints:
                try:
                    constraint.check(value, "")
                except ProtocolError:
                    raise _BAD from None
            return value

        return fast_annotated
    if origin in (Union, types.UnionType):
        (arg,) = [a for a in get_args(tp) if a is not type(None)]
        inner_opt = _fast(arg)
        return lambda value: None if value is None else inner_opt(value)
    if origin is Literal:
        allowed = frozenset(get_args(tp))

        def fast_literal(value: Any) -> Any:
            if not isinstance(value, str) or value not in allowed:
                raise _BAD
            return value

        return fast_literal
    if origin is list:
        (item_tp,) = get_args(tp)
        item = _fast(item_tp)

        def fast_list(value: Any) -> Any:
            if not isinstance(value, list):
                raise _BAD
            return [item(v) for v in value]

        return fast_list
    if origin is dict:
        key_tp, value_tp = get_args(tp)
        key, val = _fast(key_tp), _fast(value_tp)

        def fast_dict(value: Any) -> Any:
            if not isinstance(value, dict):
                raise _BAD
            return {key(k): val(v) for k, v in value.items()}

        return fast_dict
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _fast_dataclass(tp)
    if tp is bool:

        def fast_bool(value: Any) -> Any:
            if not isinstance(value, bool):
                raise _BAD
            return value

        return fast_bool
    if tp is int:

        def fast_int(value: Any) -> Any:
            if type(value) is not int:
                raise _BAD
            return value

        return fast_int
    if tp is str:

        def fast_str(value: Any) -> Any:
            if not isinstance(value, str):
                raise _BAD
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    raise _BAD from None
            return value

        return fast_str
    if tp is float:

        def fast_float(value: Any) -> Any:
            if type(value) not in (int, float) or not math.isfinite(value):
                raise _BAD
            return float(value)

        return fast_float
    raise TypeError(f"unsupported field type {tp!r}")


def _fast_fields(cls: type) -> list[tuple[str, _Fast]]:
    hints = get_type_hints(cls, include_extras=True)
    return [(f.name, _fast(hints[f.name])) for f in dataclasses.fields(cls) if f.name != "id"]


def _inline(tp: Any, i: int, scope: dict[str, Any]) -> str | None:
    """The check of :func:`_fast` for ``tp`` written out on the local ``x`` (the same test, the
    same value), for the scalar kinds a heartbeat is made of; None for the others (called)."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *constraints = get_args(tp)
        if len(constraints) == 1 and isinstance(constraints[0], Range) and base in (int, float):
            scope[f"_lo{i}"], scope[f"_hi{i}"] = constraints[0].lo, constraints[0].hi
            if base is int:
                return f"    if type(x) is not int or not _lo{i} <= x <= _hi{i}:\n        raise _BAD\n"
            return (
                f"    if type(x) is not float:\n"
                f"        if type(x) is not int or not _lo{i} <= x <= _hi{i}:\n            raise _BAD\n"
                f"        x = float(x)\n"
                f"    elif not _lo{i} <= x <= _hi{i}:\n        raise _BAD\n"
            )
        return None
    if origin is Literal:
        scope[f"_in{i}"] = frozenset(get_args(tp))
        return f"    if not isinstance(x, str) or x not in _in{i}:\n        raise _BAD\n"
    if tp is int:
        return "    if type(x) is not int:\n        raise _BAD\n"
    return None


def _slot_setters(cls: type, names: list[str]) -> list[Any] | None:
    """Each field's slot descriptor's ``__set__`` (what a frozen dataclass's ``__init__`` does
    through ``object.__setattr__``), or None when a field is not a plain slot."""
    setters = []
    for name in names:
        slot = inspect.getattr_static(cls, name, None)
        if type(slot) is not types.MemberDescriptorType:
            return None
        setters.append(slot.__set__)
    return setters


def _written_out(cls: type, checks: list[tuple[str, _Fast]], *, message: bool) -> Any:
    """``fast_object(value)``: ``cls(name=check(value[name]), ...)`` of a JSON object with exactly
    ``cls``'s fields; or, ``message``, ``fast_message(value, ref)`` of an envelope (its ``v``,
    ``type`` and ``id`` checked by :func:`_build`; a ``WIRE_OPTIONAL`` field left out reads as
    null). Written out as source: a comprehension of the field checks and ``cls(**kwargs)`` were a
    third of a heartbeat's decode. The names are our dataclasses' own field names.

    Written out further (nineteenth pass): the scalar checks inline (:func:`_inline`) and, for our
    frozen slotted dataclasses, the object made by ``object.__new__`` and its slots set directly
    (``__init__`` sets each through ``object.__setattr__``: half of a GPU sample's decode), with no
    ``__post_init__`` to skip. :func:`_written_out_plain` is the version before, kept as the
    oracle (tests/agent/test_agent_protocol.py compares both on random frames)."""
    names = [name for name, _check in checks]
    setters = _slot_setters(cls, [*names, "id"] if message else names)
    if setters is None or hasattr(cls, "__post_init__"):
        return _written_out_plain(cls, checks, message=message)
    scope: dict[str, Any] = {f"_c{i}": check for i, (_name, check) in enumerate(checks)}
    scope.update({f"_s{i}": setter for i, setter in enumerate(setters)})
    hints = get_type_hints(cls, include_extras=True)
    get = "value.get({!r})" if message else "value[{!r}]"
    if message:
        optional = frozenset(getattr(cls, "WIRE_OPTIONAL", ()))
        every = frozenset({*_ENVELOPE_KEYS, *names})
        scope.update(_every=every, _required=every - optional, _optional=bool(optional))
        source = (
            "def fast_message(value, ref):\n"
            "    keys = value.keys()\n"
            "    if keys != _every and not (_optional and _required <= keys <= _every):\n"
            "        raise _BAD\n"
        )
    else:
        scope.update(_fields=frozenset(names))
        source = (
            "def fast_object(value):\n"
            "    if not isinstance(value, dict) or value.keys() != _fields:\n"
            "        raise _BAD\n"
        )
    source += "    o = _new(_cls)\n"
    for i, name in enumerate(names):
        inline = _inline(hints[name], i, scope)
        if inline is None:
            source += f"    _s{i}(o, _c{i}({get.format(name)}))\n"
        else:
            source += f"    x = {get.format(name)}\n{inline}    _s{i}(o, x)\n"
    if message:
        source += f"    _s{len(names)}(o, ref)\n"
    source += "    return o\n"
    scope.update(_cls=cls, _BAD=_BAD, _new=object.__new__)
    exec(source, scope)  # noqa: S102 -- see above
    return scope["fast_message" if message else "fast_object"]


def _written_out_plain(cls: type, checks: list[tuple[str, _Fast]], *, message: bool) -> Any:
    """:func:`_written_out` before the nineteenth pass: every check called, ``cls(...)`` built
    through its ``__init__`` (the oracle)."""
    scope: dict[str, Any] = {f"_c{i}": check for i, (_name, check) in enumerate(checks)}
    names = [name for name, _check in checks]
    get = "value.get({!r})" if message else "value[{!r}]"
    args = ", ".join(f"{name}=_c{i}({get.format(name)})" for i, name in enumerate(names))
    if message:
        optional = frozenset(getattr(cls, "WIRE_OPTIONAL", ()))
        every = frozenset({*_ENVELOPE_KEYS, *names})
        scope.update(_every=every, _required=every - optional, _optional=bool(optional))
        source = (
            "def fast_message(value, ref):\n"
            "    keys = value.keys()\n"
            "    if keys != _every and not (_optional and _required <= keys <= _every):\n"
            "        raise _BAD\n"
            f"    return _cls({args}, id=ref)\n"
        )
    else:
        scope.update(_fields=frozenset(names))
        source = (
            "def fast_object(value):\n"
            "    if not isinstance(value, dict) or value.keys() != _fields:\n"
            "        raise _BAD\n"
            f"    return _cls({args})\n"
        )
    scope.update(_cls=cls, _BAD=_BAD)
    exec(source, scope)  # noqa: S102 -- see above
    return scope["fast_message" if message else "fast_object"]


def _fast_dataclass(cls: type) -> _Fast:
    return _written_out(cls, _fast_fields(cls), message=False)


def _fast_message(cls: type[Message]) -> Callable[[dict[str, Any], int], Message]:
    """The body of a ``cls`` envelope whose ``v``, ``type`` and ``id`` were checked: its message."""
    return _written_out(cls, _fast_fields(cls), message=True)  # type: ignore[no-any-return]


_FAST_MESSAGES: dict[str, Callable[[dict[str, Any], int], Message]] = {
    t: _fast_message(c) for t, c in MESSAGE_TYPES.items()
}


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ProtocolError(ERR_BAD_JSON, "duplicate key in object")
    return result


def _no_constant(name: str) -> Any:
    raise ProtocolError(ERR_BAD_JSON, f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _json_loads(text: str) -> Any:
    """``json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)`` with
    one decoder made once (``json.loads`` makes one per call with these arguments)."""
    if text.startswith("\ufeff"):  # as json.loads words it
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def _build(payload: dict[str, Any], allowed: Collection[str] | None) -> Message:
    """Validate a parsed envelope and build its message (shared by encode and decode)."""
    ref = payload.get("id")
    ref = ref if type(ref) is int and 0 <= ref <= _INT64 else None
    v = payload.get("v")
    if type(v) is not int or v != PROTOCOL_VERSION:
        raise ProtocolError(ERR_BAD_VERSION, f"unsupported protocol version {v!r}", ref)
    msg_type = payload.get("type")
    if not isinstance(msg_type, str):
        raise ProtocolError(ERR_BAD_ENVELOPE, "missing or non-string type", ref)
    if ref is None:
        raise ProtocolError(ERR_BAD_ENVELOPE, "missing or invalid id (a non-negative integer)")
    cls = MESSAGE_TYPES.get(msg_type)
    if cls is None:
        raise ProtocolError(ERR_UNKNOWN_TYPE, f"unknown message type {msg_type[:64]!r}", ref)
    if allowed is not None and msg_type not in allowed:
        raise ProtocolError(ERR_UNEXPECTED_TYPE, f"message type {msg_type!r} not accepted here", ref)
    try:
        return _FAST_MESSAGES[msg_type](payload, ref)
    except Exception:  # noqa: BLE001, S110 -- refused (or unreadable): the checks below say why
        pass
    return _build_plain(payload, msg_type, cls, ref)


def _build_plain(payload: dict[str, Any], msg_type: str, cls: type[Message], ref: int) -> Message:
    """The body of an envelope checked by :data:`_MESSAGE_FIELDS` (every error with its field's path)."""
    checks = _MESSAGE_FIELDS[msg_type]
    body = {k: v for k, v in payload.items() if k not in _ENVELOPE_KEYS}
    for name in getattr(cls, "WIRE_OPTIONAL", ()):
        body.setdefault(name, None)  # fields added later: absent reads as null
    try:
        _check_keys(body.keys(), checks.keys(), msg_type)
        values = {name: check(body[name], f"{msg_type}.{name}") for name, check in checks.items()}
    except ProtocolError as exc:
        raise ProtocolError(exc.code, exc.message, ref) from None
    return cls(**values, id=ref)


def encode(msg: Message) -> str:
    """Serialize ``msg`` as a compact JSON envelope ``{"v": 1, "type", "id", ...fields}``.

    The message is validated exactly as :func:`decode` would validate it, so a sender never
    puts an invalid frame on the wire.

    Raises:
        ProtocolError: ``msg`` is invalid (``invalid``, ``unknown_type``, ``bad_envelope``) or
            encodes to more than :data:`MAX_MESSAGE_BYTES` bytes (``too_large``).
    """
    if type(msg).TYPE not in MESSAGE_TYPES:
        raise ProtocolError(ERR_UNKNOWN_TYPE, f"not a protocol message: {type(msg).__name__}")
    payload: dict[str, Any] = {"v": PROTOCOL_VERSION, "type": msg.TYPE, "id": msg.id}
    omit = getattr(msg, "WIRE_OMIT_EMPTY", frozenset())
    payload.update(
        (f.name, _plain(getattr(msg, f.name)))
        for f in dataclasses.fields(msg)
        if f.name != "id" and not (f.name in omit and not getattr(msg, f.name))
    )
    _build(payload, None)
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    size = len(text.encode("utf-8"))
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(ERR_TOO_LARGE, f"{msg.TYPE} encodes to {size} bytes > {MAX_MESSAGE_BYTES}", msg.id)
    return text


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def decode(text: str | bytes, *, allowed: Collection[str] | None = None) -> Message:
    """Parse and strictly validate one frame.

    ``text`` is a text frame or UTF-8 bytes of at most :data:`MAX_MESSAGE_BYTES`. ``allowed``
    optionally restricts the accepted message types (e.g. :data:`SERVER_MESSAGE_TYPES`).

    Returns:
        The message dataclass, with ``id`` set from the envelope.

    Raises:
        ProtocolError: and nothing else, with code ``too_large``, ``bad_json`` (not UTF-8, not
            JSON, duplicate keys, NaN), ``bad_envelope`` (not an object, bad ``type``/``id``),
            ``bad_version``, ``unknown_type``, ``unexpected_type`` (not in ``allowed``) or
            ``invalid`` (missing, unknown, mistyped or out-of-range field). ``ref`` carries
            the frame's ``id`` when it could be read.
    """
    try:
        if isinstance(text, str):
            if len(text) > MAX_MESSAGE_BYTES:  # a character is at least one byte
                raise ProtocolError(ERR_TOO_LARGE, f"frame of {len(text)} characters")
            raw = None if text.isascii() else text.encode("utf-8", errors="surrogatepass")  # ASCII: as its bytes
        elif isinstance(text, bytes | bytearray | memoryview):
            raw = bytes(text)
        else:
            raise ProtocolError(ERR_BAD_JSON, f"frame is {type(text).__name__}, not text")
        if raw is not None and len(raw) > MAX_MESSAGE_BYTES:
            raise ProtocolError(ERR_TOO_LARGE, f"frame of {len(raw)} bytes > {MAX_MESSAGE_BYTES}")
        try:
            payload = _json_loads(text if raw is None else raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ProtocolError(ERR_BAD_JSON, str(exc)[:200]) from None
        if not isinstance(payload, dict):
            raise ProtocolError(ERR_BAD_ENVELOPE, "frame is not a JSON object")
        return _build(payload, allowed)
    except ProtocolError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the contract is "only ProtocolError", whatever slips through
        raise ProtocolError(ERR_INVALID, f"unreadable message: {type(exc).__name__}") from None
