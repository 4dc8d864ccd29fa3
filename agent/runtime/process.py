"""The ``process`` runtime: each attempt is a local process tree in a cgroup of its own (for hosts
without a container engine, and for development and the demo; docs/isolation.md).

An attempt runs under a small Python wrapper (the agent's interpreter, the agent's uid) that leads
its own session, joins the attempt's cgroup before anything else, is a child subreaper (as root,
through its child, the init of a PID namespace of the attempt's own), runs the command under the
attempt's identity, and writes the exit code and exit time (``/proc/uptime``) to the attempt's exit
file. The wrapper ignores SIGTERM only to outlive its child, so an agent that
restarted (and is no longer the parent) still learns the exit code of an attempt it re-adopted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from agent.runtime import devices
from agent.runtime.attempt_init import TMP_FALLBACK
from agent.runtime.base import (
    AttemptSpec,
    ExecError,
    ExecOutcome,
    StoredRuntime,
    handed_connection,
    mount_env,
)
from agent.runtime.isolation import (
    DEFAULT_PATH,
    TMPFS_PRIVATE,
    Isolation,
    IsolationConfig,
    access_problem,
    apply_limits,
    attempt_env,
    cgroup_out_of_memory,
    cgroup_pids,
    cgroup_pids_limit,
    cgroup_views,
    deny_devices_v1,
    descendants,
    devices_v1_cgroup,
    kill_cgroup,
    kill_tree,
    make_private_var_tmp,
    private_tmp_keep,
    remove_cgroup,
    shared_run_lock,
    stop_then_kill_tree,
    v1_limit_cgroups,
)
from agent.runtime.pipe import PipeSession
from agent.runtime.tty import TtySession, set_size
from agent.state import (
    AttemptRecord,
    monotonic_s,
    open_private_append,
    write_preempt_notice,
)

log = logging.getLogger(__name__)

WRAPPER_ENV = {"PATH": DEFAULT_PATH}
"""The wrapper's own environment: fixed, nothing of the workload's (it runs as the agent's user)."""

POLL_S = 0.5
"""Exit polling period where pidfd is unavailable, in seconds."""

START_CLOSE_S = 10.0
"""How long :meth:`ProcessRuntime.close` waits for starts past their wrapper's spawn, in seconds."""

# The wrapper, run as ``python -I ATTEMPT_INIT EXIT_FILE -- COMMAND...`` by the agent (so as the agent's
# user, usually root) with a fixed environment of the agent's choosing, never the workload's: a
# workload's LD_PRELOAD, LD_LIBRARY_PATH, GCONV_PATH… would otherwise be obeyed by the dynamic loader
# of a root process. Its command line is what ``ps`` shows as PID 1 in the attempt (pid63: no longer
# the whole source, ``-c``). It reads "1" and a JSON payload (the attempt's environment, its identity
# UID GID GROUPS, the number of the pipe STATUS…) from its stdin, a pipe, once the agent has put it
# into the attempt's cgroup (then /dev/null is its stdin, the command's), becomes a child subreaper (orphans of the
# attempt stay its descendants), runs the command with that environment (with the attempt's identity
# when UID is not "-", and no_new_privs), writes the exit code and exit time to EXIT_FILE, kills what
# is left of the attempt, and exits with the command's code. The command's stdout and stderr are a pipe
# that the wrapper copies into the log (its own stdout), never the log file itself. With "tmp" in the payload (a root
# agent), it first gives the attempt a private /tmp and /dev/shm: a mount namespace of its own, / made
# private, a fresh tmpfs on each, the attempt's paths that lie under them bound back; where the
# namespace cannot be made it says so in the log and sets TMPDIR to the attempt's private directory
# instead, and where a step fails once / is private (a half-made /tmp) the attempt does not run. As
# root it then drops every capability but ROOT_CAPS from the bounding and inheritable sets and clears
# the ambient ones (a root workload must not unmount its /tmp: docs/isolation.md). Where the kernel
# gives a /proc of the attempt's own ("proc" in "tmp"), the attempt gets a PID namespace of its own
# (pidns61): the wrapper unshares it and forks; it stays in the host's, waiting for that child and
# exiting with its code, while the child, PID 1 of the namespace (its init), mounts the
# namespace's /proc and does the rest below: it runs the command, reaps whatever is orphaned in the
# namespace, passes on a signal sent to it from inside, and writes the exit file; when it exits the
# kernel kills whatever is left in the namespace. With "cgroup" in "tmp" (the attempt has a cgroup of
# its own, iso46), before that fork it unshares a cgroup namespace rooted at the cgroups it was put in
# and binds, read-only, its own cgroup over each cgroup mount of the host (an empty tmpfs over a
# hierarchy it has none of its own in: :func:`cgroup_views`), saying in the log what it could not do,
# and running the command anyway. Before running
# the command it writes "ok" to the pipe STATUS ("ok tmpdir" where it fell back to TMPDIR), or "fail <why>"
# and exits 125 without running it:
# the agent reports the start only then.
# SIGTERM/INT/HUP get a no-op handler (reset to default in the command by exec): the wrapper
# outlives its command, whom the stop's signal reaches directly.
ATTEMPT_INIT = Path(__file__).with_name("attempt_init.py")
"""The wrapper's file (:mod:`agent.runtime.attempt_init`): by path, its command line is PID 1's."""


# The one-shot command of an ``exec`` (docs/jobs.md, "Run a command in a running workload"), run as
# ``python -I EXEC_WRAPPER FD STATUS MNT IPC CGROUP PID UID GID GROUPS COMMAND...`` by the agent
# (its user, a fixed environment) with stdout and stderr pipes to the agent. The agent puts it into the
# attempt's cgroups before its go, so pids.max, the device filter and the attempt's stop cover it. It
# reads "1" and a JSON payload from FD, enters the attempt's IPC, cgroup and mount namespaces (MNT, IPC,
# CGROUP: descriptors of the attempt's wrapper's, opened by the agent; -1: the attempt has none of its
# own), so it sees the attempt's private /tmp, /var/tmp, /dev/shm, cgroup tree and hidden GPUs, takes
# the attempt's Landlock scope and root capability bounds as the attempt's wrapper does, switches to the
# attempt's identity (UID "-": the agent's own, as the attempt) with no_new_privs, goes to the attempt's
# working directory as that identity (a path swapped for a symlink since is not entered as root: iso58),
# and execs the command with the attempt's environment. An interactive session (``exec_tty``, payload
# ``tty``) first makes its pseudo-terminal (its stdin, stdout, stderr) its controlling terminal (in a
# PID namespace, from a session of its own there: a shell restores its process groups, which must be
# seen). Where the attempt has a PID namespace of its own (PID: a descriptor of its wrapper's
# ``pid_for_children``, else -1) it enters it too and forks (pidns61: a namespace is entered by the
# children), staying outside as the command's parent with its exit code, as ``docker exec``: ``ps``
# lists the attempt's processes. A setup step that fails writes "fail <why>" to STATUS and exits 125,
# the command never run; STATUS is closed by the exec (close-on-exec). A forwarded connection
# (``port_open``, payload ``connect``: a port) runs no command: as the attempt's identity, from its
# containment, it connects to that port on 127.0.0.1 (else ::1) and hands the connected socket to the
# agent over its stdin (a Unix socket, SCM_RIGHTS), so that the agent, root, never connects on the
# owner's behalf; "refused <why>" to STATUS when it cannot. Without a cgroup ("reap": the process-tree
# fallback) it forks before the switch (in the PID namespace, once entered: a subreaper outside it would
# not get the orphans there) and stays, as the agent's user, the subreaper of the command, killing what
# the command left behind when it ends (brk59); a hangup (``SIGHUP``) it passes on to the command.
EXEC_WRAPPER = Path(__file__).with_name("exec_wrapper.py")
"""The exec wrapper's file (:mod:`agent.runtime.exec_wrapper`): run by path, as :data:`ATTEMPT_INIT`
(iso48: its whole source was its command line, ``-c``, world-readable on the host and, from its fork
to the command's exec, in the attempt's PID namespace)."""


@dataclass(frozen=True, slots=True)
class _ExecContext:
    """What a one-shot command in a running attempt needs: its identity (the wrapper's ``UID GID
    GROUPS`` arguments), environment, working directory, whether it has namespaces of its own,
    the cgroups its processes are in, and its capability bounds and Landlock scope. ``readopted``:
    read back from the attempt's processes by an agent restarted since its start (readopt46), for
    one command (:meth:`ProcessRuntime._readopted_context`), else kept since the start."""

    ids: tuple[str, str, str]
    env: dict[str, str]
    cwd: str
    namespaces: bool
    join: list[Path]
    caps: int
    scope: bool
    readopted: bool = False


EXEC_KILL_WAIT_S = 2.0
"""After a one-shot command's timeout kill, how long its output pipes may stay open (a descendant
that left its process tree holds them) before the agent stops reading, seconds."""


ROOT_CAPS = frozenset({0, 1, 3, 4, 5, 6, 7, 8, 10, 13, 18, 29, 31})
"""The capabilities an attempt's command may hold (the wrapper drops every other one from its
bounding and inheritable sets): Docker's default set for a root container less ``CAP_MKNOD``
(Docker's device cgroup allows a few devices only; the process runtime's refuses only the
host's other GPUs, ``agent.runtime.devices``), i.e.
CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID, SETPCAP, NET_BIND_SERVICE, NET_RAW,
SYS_CHROOT, AUDIT_WRITE, SETFCAP. Only a root command (both consents, docs/isolation.md) keeps any:
an owner's command loses them all at ``setuid``. Without CAP_SYS_ADMIN it cannot unmount its
private /tmp, mount, or enter another namespace; without CAP_SYS_PTRACE it cannot reach the root
of processes holding capabilities it lacks through ``/proc/<pid>/root``."""

ROOT_CAPS_MASK = sum(1 << c for c in ROOT_CAPS)
""":data:`ROOT_CAPS` as the wrappers' bit mask (their payload's ``caps``)."""


def gpu_hide_payload(gpu_nodes: Mapping[int, str], indices: Collection[int]) -> dict[str, object]:
    """What the wrapper of a root agent hides: the device nodes of the GPUs of ``gpu_nodes`` (index →
    node) not in ``indices`` (the attempt's), less any that is also one of the attempt's. It binds,
    read-only, an empty mode-000 file of a tmpfs of the attempt's own over each (attempt_init, iso48)."""
    own = {gpu_nodes[i] for i in indices if i in gpu_nodes}
    nodes = sorted({p for i, p in gpu_nodes.items() if i not in indices} - own)
    return {"nodes": nodes}


def denied_devices(gpu_nodes: Mapping[int, str], indices: Collection[int]) -> list[devices.Device]:
    """The character devices (major, minor) of the GPUs of ``gpu_nodes`` not in ``indices``, less
    any that is also one of the attempt's own (by another node name): what its cgroup refuses."""
    own = set(devices.char_devices(gpu_nodes[i] for i in indices if i in gpu_nodes))
    return [d for d in devices.char_devices(p for i, p in gpu_nodes.items() if i not in indices) if d not in own]


def private_tmp_payload(
    spec: AttemptSpec, keep: list[str], tmpdir: Path, var_tmp: Path | None = None
) -> dict[str, object]:
    """What the wrapper of a root agent needs to make ``spec``'s private /tmp, /var/tmp and
    /dev/shm: the paths to bind back (``keep``, those under them), /dev/shm's tmpfs options (the
    start's shared memory, else the tmpfs default), the attempt's directory to bind over /var/tmp
    (``var_tmp``'s ``tmp/``, from :func:`make_private_var_tmp`; None: /var/tmp is left as it is) and
    where (the host's /var/tmp, resolved), and the TMPDIR of the fallback (``tmpdir``)."""
    shm = "mode=1777" + (f",size={spec.shared_memory}" if spec.shared_memory else "")
    var_at = os.path.realpath(var_tmp.parent) if var_tmp is not None else ""
    lock = shared_run_lock()
    roots = tuple(r for r in (*TMPFS_PRIVATE, var_at, lock) if r)
    return {
        "keep": private_tmp_keep(keep, roots),
        "shm": shm,
        "dir": str(tmpdir),
        "var": str(var_tmp / "tmp") if var_tmp is not None else None,
        "var_at": var_at,
        "read_only": [m.host_path for m in spec.mounts if m.read_only],
        "lock": lock,
    }


def _read_status(fd: int) -> bytes:
    """The wrapper's word on its setup (``ok`` or ``fail <why>``), read to EOF from ``fd``
    (closed here); empty when it ended before saying (then its command never ran either)."""
    chunks = []
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def proc_start_time(pid: int) -> int | None:
    """Start time of the live process ``pid`` in clock ticks after boot (``/proc/<pid>/stat``
    field 22); None when there is no such process or it is a zombie. Together with the pid it
    identifies a process across pid reuse."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after its closing parenthesis.
    rest = stat[stat.rfind(")") + 2 :].split()
    if rest[0] in ("Z", "X"):  # exited, not yet reaped
        return None
    return int(rest[19])


def _parent_and_start(pid: int) -> tuple[int, int] | None:
    """The parent and start time (:func:`proc_start_time`) of the live process ``pid``; None when
    there is none or it is a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rfind(")") + 2 :].split()
    return None if rest[0] in ("Z", "X") else (int(rest[1]), int(rest[19]))


def _first_child(parent: int) -> tuple[int, int] | None:
    """The child of ``parent`` that started first (the lowest pid among those started in the same
    clock tick) and its start time, None when it has none: the attempt's command among its wrapper's
    children (the wrapper is its subreaper: the orphans it adopts are the command's descendants,
    started after it)."""
    found: list[tuple[int, int]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2 :].split()
        if int(rest[1]) == parent and rest[0] not in ("Z", "X"):
            found.append((int(rest[19]), int(entry)))
    return (min(found)[1], min(found)[0]) if found else None


def readopted_command_env(wrapper: int, cgroup: str) -> tuple[dict[str, str], tuple[str, str, str]] | None:
    """The environment and identity (the exec wrapper's ``UID GID GROUPS``, "-" for the agent's own)
    of the command of the attempt whose wrapper is ``wrapper`` (its cgroup ``cgroup``, "" for none),
    read from the command's process (readopt46: an agent restarted since the start has neither in
    memory, and neither is ever written to disk): ``/proc/<pid>/environ``, as root or the process's own
    user. The command is the wrapper's first child, or its init's (its own PID namespace, pidns61:
    the wrapper's first child is the namespace's init, whose first child the command is); the pid is
    checked to be that process still after the read (the same parent and start time; in the
    attempt's cgroup), not one that took the pid since. None where it cannot be read (gone, exited
    into another environment, not readable)."""
    parent, first = wrapper, _first_child(wrapper)
    try:
        if (
            first is not None
            and os.stat(f"/proc/{first[0]}/ns/pid").st_ino != os.stat(f"/proc/{wrapper}/ns/pid").st_ino
        ):
            parent, first = first[0], _first_child(first[0])  # the attempt's init, then its first child
        if first is None:
            return None
        command, start = first
        if cgroup and command not in cgroup_pids(Path(cgroup)):
            return None
        raw = Path(f"/proc/{command}/environ").read_bytes()
        status = Path(f"/proc/{command}/status").read_text()
    except OSError:
        return None
    if _parent_and_start(command) != (parent, start):  # ended, its pid another process's since: not the attempt's
        return None
    env = dict(os.fsdecode(item).split("=", 1) for item in raw.split(b"\0") if b"=" in item)
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    try:
        uid, gid = int(fields["Uid"].split()[0]), int(fields["Gid"].split()[0])
        groups, nnp = fields.get("Groups", "").split(), fields.get("NoNewPrivs", "0").strip() == "1"
    except (KeyError, IndexError, ValueError):
        return None
    if not env:  # a zombie's, or a command that cleared it: nothing of the attempt's to run with
        return None
    # switched at the start (no_new_privs, set by the wrapper with the owner's identity), or another user:
    # its identity again, never the agent's
    ids = (str(uid), str(gid), ",".join(groups)) if nnp or uid != os.geteuid() else ("-", "-", "")
    return env, ids


def _command_execd(pid: int) -> bool:
    """Whether the wrapper shell ``pid`` is gone or has forked a child that has exec'd."""
    try:
        wrapper = Path(f"/proc/{pid}/cmdline").read_bytes()
        while True:  # past the wrapper's fork in the host's PID namespace: the attempt's init (pidns61)
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            if not children:
                return False
            pid = int(children[0])
            if Path(f"/proc/{pid}/cmdline").read_bytes() != wrapper:
                return True
    except OSError:  # gone, or a kernel without the children file
        return True


async def _wait_until_execd(pid: int, limit_s: float = 1.0) -> None:
    """Wait (at most ``limit_s`` seconds) until the wrapper shell ``pid`` has forked its command
    and the command has been exec'd.

    A SIGTERM that reached the group earlier would be caught by the shell's trap (in the wrapper,
    or in its forked child before exec) and lost, and the attempt would run on until the SIGKILL.
    """
    for _ in range(max(1, int(limit_s / 0.01))):
        if proc_start_time(pid) is None or _command_execd(pid):
            return
        await asyncio.sleep(0.01)


def _exit_status(returncode: int) -> int:
    """Shell convention: 128+N for a process killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def _hand_over(fd: int, payload: bytes) -> None:
    """Write ``payload`` to the wrapper's pipe and close it (a thread: a large environment fills
    the pipe until the wrapper reads it). A wrapper that died meanwhile is seen by the watcher."""
    with contextlib.suppress(BrokenPipeError), os.fdopen(fd, "wb") as pipe:
        pipe.write(payload)


class _Capped:
    """A one-shot command's stream, read to its end, keeping the first ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(1 << 16):
            room = self.limit - self.size
            if len(chunk) > room:
                self.truncated = True
                chunk = chunk[: max(room, 0)]
            if chunk:
                self.chunks.append(chunk)
                self.size += len(chunk)

    def data(self) -> bytes:
        return b"".join(self.chunks)


def _remove_var_tmp(record: AttemptRecord) -> None:
    """Remove the attempt's private /var/tmp (:func:`make_private_var_tmp`), if any: its processes
    are gone, and with them the mount namespace that bound it (``rmtree`` follows no symlink the
    workload left there)."""
    if record.var_tmp:
        shutil.rmtree(record.var_tmp, ignore_errors=True)
        record.var_tmp = ""


def _remove_run_scratch(run_dir: Path) -> None:
    """Remove the attempt's fallback ``TMPDIR`` (``tmp/``) and the ``HOME`` of an identity without one
    (``home/``, iso61: caches of GBs stayed in the agent's state dir until the record was forgotten)
    once its processes are gone (``rmtree`` follows no symlink the workload left there)."""
    for own in ("tmp", "home"):
        shutil.rmtree(run_dir / own, ignore_errors=True)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def program_kind(path: str) -> str | None:
    """``"script"`` (a regular file starting ``#!``), ``"binary"`` (any other regular file, or one
    the agent cannot open: the owner's access check says why) or None (not a regular file: a FIFO,
    a device, a socket). Opened without blocking and never as a terminal, then checked on the open
    descriptor (not a name that could be swapped since), so a FIFO with execute bits named as the
    command cannot hold the agent's event loop (brk39); at most two bytes are read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return "binary"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            head = os.read(fd, 2)
        except OSError:
            return "binary"
        return "script" if head == b"#!" else "binary"
    finally:
        os.close(fd)


class ProcessRuntime(StoredRuntime):
    """Runs attempts as process trees, each in its own cgroup; records, logs and exit files under
    ``state_dir``.

    ``cwd`` is the attempts' working directory (default: the agent's); ``log_max_bytes`` caps each
    attempt's log (see :meth:`cap_logs`); ``isolation`` says whose identity attempts run under and
    where their cgroups go (None: the agent's own user, cgroups where available — the library
    default of tests; the agent passes its configured one). ``gpu_nodes`` maps each GPU of the host
    to its device node (:meth:`GpuBackend.device_nodes`): an attempt's wrapper hides the nodes of
    the GPUs it was not given (a root agent; docs/isolation.md).
    """

    def __init__(
        self,
        state_dir: Path,
        cwd: Path | None = None,
        log_max_bytes: int = 64 * 1024 * 1024,
        isolation: Isolation | None = None,
        gpu_nodes: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__(state_dir, log_max_bytes)
        self.cwd = cwd
        self.gpu_nodes = dict(gpu_nodes or {})
        self.isolation = isolation or Isolation(IsolationConfig(mode="agent", allow_root=True))
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._watchers: dict[int, asyncio.Task[None]] = {}
        self._starts: set[asyncio.Task[None]] = set()  # starts past the wrapper's spawn (see start)
        self._exec_contexts: dict[int, _ExecContext] = {}  # running attempts started by this agent
        self._exec_pids: dict[int, set[int]] = {}  # attempt -> its commands' wrappers (exec, exec_tty)
        self._exec_waits: set[asyncio.Task[int]] = set()  # the interactive ones' ends (exec_tty)

    # --- lifecycle -------------------------------------------------------------------------------

    async def recover(self) -> None:
        records = self.store.load_all()
        for record in records:  # all known first: an ended attempt's GPU sweep spares the running ones
            self._records[record.attempt_id] = record
        for record in records:
            if record.state != "running":
                continue
            alive = (
                record.boot_id == self.boot_id
                and record.pid is not None
                and record.proc_start is not None
                and proc_start_time(record.pid) == record.proc_start
            )
            if alive:
                log.info("re-adopted attempt %d (pid %s)", record.attempt_id, record.pid)
                self._watch(record)
            else:
                if record.cgroup and record.boot_id == self.boot_id:
                    remove_cgroup(Path(record.cgroup), parent_too=True)  # what outlived its wrapper
                    self._remove_limit_cgroups(record.attempt_id)
                if record.boot_id == self.boot_id:  # ended while the agent was away: its GPUs too
                    self._reclaim_gpus(record)
                self._finish(record, returncode=None)
                log.info(
                    "attempt %d ended while the agent was away (exit code %s)", record.attempt_id, record.exit_code
                )
        self.prune()

    async def start(self, spec: AttemptSpec) -> AttemptRecord:
        existing = self._records.get(spec.attempt_id)
        if existing is not None:
            return existing
        record = self._new_record(spec)
        if spec.image:
            self._fail(
                record,
                f"this host runs the process runtime, which cannot run image {spec.image!r}: "
                "the workload needs a host with the docker runtime",
            )
        ident = await self._identity(record, spec)
        env = attempt_env(spec.env, ident, os.environ.get("PATH"))
        env.update(
            CUDA_VISIBLE_DEVICES=",".join(str(i) for i in spec.gpu_indices),
            NVIDIA_VISIBLE_DEVICES=",".join(spec.gpu_uuids),
            FAIRWAY_WORKLOAD_ID=str(spec.workload_id),
            FAIRWAY_ATTEMPT=str(spec.attempt_id),
            FAIRWAY_PREEMPT_FILE=str(self.store.preempt_path(spec.attempt_id)),
        )
        # Mounts (docs/jobs.md): a process sees the host paths themselves, in FAIRWAY_MOUNT_<NAME>;
        # it starts in the first one. Read-only is up to the host's file permissions.
        env.update(mount_env(spec.mounts, in_container=False))
        for m in spec.mounts:
            if not os.path.isdir(m.host_path):  # noqa: ASYNC240 -- one stat per mount
                self._fail(record, f"mount {m.name}: {m.host_path} is not a directory on this host")
        workdir = spec.mounts[0].host_path if spec.mounts else (str(self.cwd) if self.cwd else None)
        program = spec.command[0]
        # Resolve here: the wrapper would turn "not found" into exit code 126 after "started".
        # A relative path with a directory (./train.py) is the attempt's, from where it starts (its
        # first mount): it was looked for in the agent's own directory (try44), PATH is not searched.
        relative = os.sep in program and not os.path.isabs(program)
        start_dir = workdir or os.getcwd()
        executable = shutil.which(
            os.path.join(start_dir, program) if relative else program, path=env.get("PATH", os.defpath)
        )
        if executable is None:
            self._fail(
                record, f"command not found or not executable: {program}" + (f" (in {start_dir})" if relative else "")
            )
        kind = program_kind(executable)
        if kind is None:
            # A FIFO with execute bits (brk39): opened as root to read its "#!", it blocked the
            # agent's event loop until a writer came; execve refuses what is not a regular file.
            self._fail(record, f"cannot run {executable}: {executable} is not a regular file")
        gids = {ident.gid, *ident.groups}
        if ident.switch:
            cwd = workdir or os.getcwd()
            run_want = 5 if kind == "script" else 1  # an interpreter reads a script: readable too
            for path, want, what in ((executable, run_want, "run"), (cwd, 1, "enter the working directory")):
                problem = access_problem(path, ident.uid, gids, want)
                if problem is not None:
                    self._fail(record, f"user {ident.user} (uid {ident.uid}) cannot {what} {path}: {problem}")
        self.store.ensure_private()
        run_dir = self.store.run_dir(spec.attempt_id)
        run_dir.mkdir(exist_ok=True)
        if ident.switch:
            # Root-owned (the workload cannot plant links where the agent writes), readable by its group.
            os.chown(run_dir, 0, ident.gid)
            os.chmod(run_dir, 0o750)  # noqa: S103 -- the attempt's group reads its notice
            if env["HOME"] == "/" and "HOME" not in spec.env:
                home = run_dir / "home"
                home.mkdir(exist_ok=True)
                os.chown(home, ident.uid, ident.gid)
                os.chmod(home, 0o700)
                env["HOME"] = str(home)
        # A private /tmp and /dev/shm (docs/isolation.md): the wrapper's tmpfs as root, else (and
        # where the wrapper cannot make them) TMPDIR, a 0700 directory of the attempt's, removed with it.
        tmpdir = run_dir / "tmp"
        tmpdir.mkdir(mode=0o700, exist_ok=True)
        if ident.switch:
            os.chown(tmpdir, ident.uid, ident.gid)
        tmp: dict[str, object] | None = None
        hide = gpu_hide_payload(self.gpu_nodes, spec.gpu_indices)
        if self.isolation.is_root:
            own_nodes = [self.gpu_nodes[i] for i in spec.gpu_indices if i in self.gpu_nodes]
            keep = [workdir or os.getcwd(), str(run_dir), executable, *(m.host_path for m in spec.mounts), *own_nodes]
            try:
                var_tmp = make_private_var_tmp(spec.attempt_id)
            except OSError as exc:
                shutil.rmtree(tmpdir, ignore_errors=True)
                self._fail(record, f"cannot make the private /var/tmp: {exc}")
            record.var_tmp = str(var_tmp or "")  # removed when the attempt ends, or with a failed start
            tmp = private_tmp_payload(spec, keep, tmpdir, var_tmp)
            tmp["proc"] = not self.isolation.proc  # a /proc of its own (iso61)
        elif "TMPDIR" not in spec.env:
            env["TMPDIR"] = str(tmpdir)
        exit_path = self.store.exit_path(spec.attempt_id)
        exit_path.unlink(missing_ok=True)
        cgroup = self._make_cgroup(spec.attempt_id)
        try:
            # CPU and memory limits (DESIGN.md §3.3, docs/isolation.md) and the host's pids.max (a fork
            # bomb stops at it), set before the command runs
            name = self._cgroup_name(spec.attempt_id)
            pids = self.isolation.config.pids_max or None
            limit_cgroups = apply_limits(self.isolation.limits, cgroup, name, spec.cpus, spec.memory, pids)
        except OSError as exc:
            if cgroup is not None:
                remove_cgroup(cgroup)
            self._remove_limit_cgroups(spec.attempt_id)
            self._fail(record, f"cannot set the CPU, memory and pids limits: {exc}")
        # The other GPUs' devices refused whatever the path (docs/isolation.md): before the wrapper
        # joins the cgroup, so before the command runs. Where it cannot be, their nodes are hidden
        # by path only, and the attempt's log says so (a non-root agent does neither, and says that).
        denied = denied_devices(self.gpu_nodes, spec.gpu_indices) if self.isolation.is_root else []
        hide["unfiltered"] = self._filter_devices(spec.attempt_id, cgroup, denied, limit_cgroups) if denied else ""
        read_fd, write_fd = os.pipe()
        status_fd, status_w = os.pipe()
        ids = (str(ident.uid), str(ident.gid), ",".join(map(str, ident.groups))) if ident.switch else ("-", "-", "")
        try:
            with open_private_append(self.store.log_path(spec.attempt_id)) as log_file:
                # Not asyncio's subprocess: its transport kills the child when closed, and attempts
                # must outlive the agent.
                proc = subprocess.Popen(  # noqa: S603, ASYNC220 -- running the workload's command is the point
                    [sys.executable, "-I", str(ATTEMPT_INIT), str(exit_path), "--", executable, *spec.command[1:]],
                    stdin=read_fd,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=WRAPPER_ENV,  # never the workload's: see ATTEMPT_INIT
                    cwd=workdir,
                    start_new_session=True,
                    pass_fds=(status_w,),
                )
        except OSError as exc:
            os.close(write_fd)
            os.close(status_fd)
            if cgroup is not None:
                remove_cgroup(cgroup)
            self._remove_limit_cgroups(spec.attempt_id)
            self._fail(record, f"cannot start {program}: {exc}")
        finally:
            os.close(read_fd)
            os.close(status_w)
        if cgroup is not None:
            try:
                (cgroup / "cgroup.procs").write_text(str(proc.pid))
            except OSError as exc:
                log.warning("attempt %d: cannot join cgroup %s (%s): process-tree tracking only",
                            spec.attempt_id, cgroup, exc)  # fmt: skip
                remove_cgroup(cgroup)
                cgroup = None
        for path in limit_cgroups:
            try:
                (path / "cgroup.procs").write_text(str(proc.pid))
            except OSError as exc:  # the wrapper has not run the command yet: it never runs unlimited
                os.close(write_fd)
                os.close(status_fd)
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                if cgroup is not None:
                    remove_cgroup(cgroup)
                self._remove_limit_cgroups(spec.attempt_id)
                self._fail(record, f"cannot join the limit cgroup {path}: {exc}")
        if tmp is not None and cgroup is not None and not self.isolation.cgroupns:
            # a cgroup namespace rooted at the cgroups it joined, and a /sys/fs/cgroup of those only (iso46)
            tmp["cgroup"] = cgroup_views([cgroup, *limit_cgroups])
        record.pid = proc.pid
        record.proc_start = proc_start_time(proc.pid)
        record.started_mono = monotonic_s()
        record.uid = ident.uid
        record.cgroup = str(cgroup or "")
        # Recorded before the first wait on the wrapper: an agent killed from here on leaves a
        # record (state running, the wrapper's pid) that the next one re-adopts (docs/isolation.md).
        self.store.save(record)
        # The rest runs to its end even when the start is cancelled (the agent stopping): the
        # wrapper exists, so the attempt is either recorded and watched or failed and gone, never
        # a command that runs on unrecorded. close() waits for it.
        rest = asyncio.get_running_loop().create_task(
            self._hand_over_and_watch(
                spec,
                record,
                proc,
                write_fd,
                (status_fd, status_w),
                env,
                tmp,
                hide,
                tmpdir,
                cgroup,
                ident.user,
                ids,
                workdir,
                [*([cgroup] if cgroup is not None else []), *limit_cgroups],
            ),
            name=f"attempt-{spec.attempt_id}-start",
        )
        self._starts.add(rest)
        rest.add_done_callback(self._start_done)
        await asyncio.shield(rest)
        log.info(
            "attempt %d (workload #%d) started: pid %d as %s (uid %d, %s), cgroup %s, GPUs %s, command %s",
            spec.attempt_id,
            spec.workload_id,
            proc.pid,
            ident.user,
            ident.uid,
            ident.source,
            cgroup or "none",
            env["CUDA_VISIBLE_DEVICES"] or "-",
            spec.command,
        )
        return record

    def _fail(self, record: AttemptRecord, message: str) -> NoReturn:
        _remove_var_tmp(record)  # a start that fails leaves nothing of the attempt
        super()._fail(record, message)

    def _start_done(self, task: asyncio.Task[None]) -> None:
        self._starts.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a StartError whose start was cancelled is in the record

    async def _hand_over_and_watch(
        self,
        spec: AttemptSpec,
        record: AttemptRecord,
        proc: subprocess.Popen[bytes],
        write_fd: int,
        status: tuple[int, int],
        env: dict[str, str],
        tmp: dict[str, object] | None,
        hide: dict[str, object],
        tmpdir: Path,
        cgroup: Path | None,
        user: str,
        ids: tuple[str, str, str],
        workdir: str | None,
        join: list[Path],
    ) -> None:
        """Give the wrapper ``proc`` its go, wait for its word (``status``: our end of its pipe, and
        the number of the wrapper's end, there), then watch it (or fail the start)."""
        status_fd, status_w = status
        # The environment travels through the pipe (never on disk, never in the wrapper's own
        # environment); a wrapper that died meanwhile is seen by the watcher like any exit.
        caps, scope = ROOT_CAPS_MASK, self._landlock_scope()
        await asyncio.to_thread(
            _hand_over,
            write_fd,
            b"1"
            + json.dumps(
                {
                    "env": env,
                    "tmp": tmp,
                    "hide": hide,
                    "caps": caps,
                    "scope": scope,
                    "user": user,
                    "ids": ids,
                    "status": status_w,
                    "log_max": self.log_max_bytes,
                }
            ).encode(),
        )
        # Reported started only once the wrapper has made the attempt's /tmp and dropped its
        # capabilities: where it could not, the command never ran and nothing of it is left.
        word = await asyncio.to_thread(_read_status, status_fd)
        if word == TMP_FALLBACK and tmp is not None:  # the attempt's TMPDIR, exec's too (left60)
            env.setdefault("TMPDIR", str(tmp["dir"]))
        elif word != b"ok":
            await asyncio.to_thread(proc.wait)
            oom = self._at_limits(spec.attempt_id, cgroup)
            if cgroup is not None:
                remove_cgroup(cgroup)
            self._remove_limit_cgroups(spec.attempt_id)
            shutil.rmtree(tmpdir, ignore_errors=True)
            why = word.removeprefix(b"fail ").decode(errors="replace") if word.startswith(b"fail ") else ""
            ended = f"the attempt's wrapper ended before its command ran (exit {proc.returncode})"
            self._fail(record, why or (f"{oom}; {ended}" if oom else ended))
        record.started_mono = monotonic_s()
        self._records[spec.attempt_id] = record
        self._procs[spec.attempt_id] = proc
        self.store.save(record)
        # What a one-shot command in the attempt needs (exec): in memory only, as the secrets
        # must be (docs/isolation.md); an agent restarted since reads it back from the attempt's
        # processes (_readopted_context, readopt46).
        self._exec_contexts[spec.attempt_id] = _ExecContext(
            ids=ids, env=env, cwd=str(workdir or os.getcwd()), namespaces=tmp is not None, join=join, caps=caps,
            scope=scope,
        )  # fmt: skip
        self._watch(record)

    def _landlock_scope(self) -> bool:
        """Whether an attempt's processes get a Landlock domain of their own (abstract unix sockets,
        signals: its own), the wrapper's and exec's payload ``scope``."""
        return self.isolation.is_root and not self.isolation.sockets

    def _readopted_context(self, record: AttemptRecord) -> _ExecContext | None:
        """What a command in the running attempt ``record``, re-adopted after this agent's restart,
        needs (readopt46), read back as its start made it: the environment and identity from its
        command's process (:func:`readopted_command_env`, never from disk), its working directory
        from its wrapper's (entered as root at the start, in its mount namespace: the path there),
        its cgroups by their names, its namespaces, capability bounds and Landlock scope by the
        rules of the start. None where the environment cannot be read."""
        assert record.pid is not None  # noqa: S101 -- a running record
        found = readopted_command_env(record.pid, record.cgroup)
        try:
            cwd = os.readlink(f"/proc/{record.pid}/cwd")
        except OSError:
            found = None
        if found is None or proc_start_time(record.pid) != record.proc_start:
            log.warning(
                "attempt %d: re-adopted, and its environment cannot be read back from its command (gone, or "
                "replaced): a command cannot run in it",
                record.attempt_id,
            )
            return None
        env, ids = found
        name = self._cgroup_name(record.attempt_id)
        assert self.isolation.limits is not None  # noqa: S101 -- set by Isolation
        v1 = [*v1_limit_cgroups(self.isolation.limits, name), devices_v1_cgroup(self.isolation.devices, name)]
        join = [*([Path(record.cgroup)] if record.cgroup else []), *(p for p in v1 if p is not None and p.exists())]
        return _ExecContext(
            ids=ids, env=env, cwd=cwd, namespaces=self.isolation.is_root, join=join, caps=ROOT_CAPS_MASK,
            scope=self._landlock_scope(), readopted=True,
        )  # fmt: skip

    def _exec_context_current(self, attempt_id: int, ctx: _ExecContext) -> bool:
        """Whether the attempt that ``ctx`` is of still runs (its command never gets its go otherwise)."""
        if not ctx.readopted:
            return self._exec_contexts.get(attempt_id) is ctx  # popped at its end
        record, watcher = self._records.get(attempt_id), self._watchers.get(attempt_id)
        return (
            record is not None
            and record.state == "running"
            and record.pid is not None
            and watcher is not None
            and not watcher.done()
            and proc_start_time(record.pid) == record.proc_start
        )

    async def _spawn_exec(
        self,
        attempt_id: int,
        command: list[str],
        *,
        stdin: int,
        stdout: int,
        stderr: int,
        tty: bool = False,
        connect: int | None = None,
    ) -> tuple[asyncio.subprocess.Process, int]:
        """Start ``command`` in the running attempt ``attempt_id`` as its processes run
        (:data:`EXEC_WRAPPER`: its cgroups, joined before its go, namespaces, Landlock scope,
        capability bounds, identity, environment, directory; without a cgroup its wrapper stays its
        subreaper, brk59); ``tty``: its stdin, stdout and stderr are a pseudo-terminal's, made its
        controlling terminal; ``connect``: no command, a connection to that port instead (its
        stdin a Unix socket: :meth:`connect_port`). Returns the process (its own session and process group, kept in
        ``_exec_pids`` until :meth:`_forget_exec`: the attempt's stop and end signal it) and the read
        end of its setup status (:func:`_read_status`).

        Raises:
            ExecError: no such running attempt here (it ended meanwhile too), or its containment
                could not be entered.
        """
        record = self._records.get(attempt_id)
        if record is None or record.state != "running" or record.pid is None:
            raise ExecError("not_running", f"attempt {attempt_id} is not running on this host")
        ctx = self._exec_contexts.get(attempt_id)
        if ctx is None:  # re-adopted (readopt46): read back from its processes for this command only
            ctx = await asyncio.to_thread(self._readopted_context, record)
        if ctx is None:
            raise ExecError(  # the server's words: scheduler.execs.READOPTED_WORDS
                "readopted",
                f"attempt {attempt_id} was started before this agent's last restart and its environment "
                "cannot be read back from its command (gone, or not readable): it is kept in memory only "
                "(never on disk), so a command cannot run in it",
            )
        ns_fds: list[int] = []
        try:
            if ctx.namespaces:
                for kind, own in (("mnt", ""), ("ipc", ""), ("cgroup", "cgroup"), ("pid_for_children", "pid")):
                    try:  # the wrapper's children's: the attempt's
                        ns_fds.append(os.open(f"/proc/{record.pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC))
                    except FileNotFoundError:
                        if not own:
                            raise
                        ns_fds.append(-1)  # a kernel without them (cgroup namespaces: Linux 4.6)
                    else:
                        if own and os.fstat(ns_fds[-1]).st_ino == os.stat(f"/proc/self/ns/{own}").st_ino:
                            os.close(ns_fds[-1])  # none of its own (the agent's): not entered
                            ns_fds[-1] = -1
            # opened from the attempt's wrapper, not a process that took its pid since
            if proc_start_time(record.pid) != record.proc_start or record.state != "running":
                raise ExecError("not_running", f"attempt {attempt_id} is not running on this host")
        except OSError as exc:
            for nfd in ns_fds:
                if nfd >= 0:
                    os.close(nfd)
            raise ExecError("failed", f"cannot reach attempt {attempt_id}'s namespaces: {exc}") from None
        except ExecError:
            for nfd in ns_fds:
                if nfd >= 0:
                    os.close(nfd)
            raise
        mnt, ipc, cgns, pid = (*ns_fds, -1, -1, -1, -1)[:4]
        ns_fds = [nfd for nfd in ns_fds if nfd >= 0]
        read_fd, write_fd = os.pipe()
        status_fd, status_w = os.pipe()
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-I", str(EXEC_WRAPPER), str(read_fd), str(status_w), str(mnt), str(ipc),
                str(cgns), str(pid), *ctx.ids, *command,
                stdin=stdin, stdout=stdout, stderr=stderr,
                env=WRAPPER_ENV, start_new_session=True, pass_fds=(read_fd, status_w, *ns_fds),
            )  # fmt: skip
        except OSError as exc:
            os.close(write_fd)
            os.close(status_fd)
            raise ExecError("failed", f"cannot start the command: {exc}") from None
        finally:
            for nfd in (read_fd, status_w, *ns_fds):
                os.close(nfd)
        # without a cgroup, the attempt's stop and end find it here (its wrapper's tree is not theirs)
        self._exec_pids.setdefault(attempt_id, set()).add(proc.pid)
        try:
            try:
                for path in ctx.join:  # before its go: the command never runs outside the attempt's cgroups
                    (path / "cgroup.procs").write_text(str(proc.pid))
            except OSError as exc:
                raise ExecError("failed", f"cannot join the attempt's cgroup {path}: {exc}") from None
            if not self._exec_context_current(attempt_id, ctx):  # the attempt ended meanwhile: never its go
                raise ExecError("not_running", f"attempt {attempt_id} is not running on this host")
        except ExecError:
            os.close(write_fd)
            os.close(status_fd)
            _killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            self._forget_exec(attempt_id, proc.pid)
            raise
        payload = {
            "env": ctx.env, "cwd": ctx.cwd, "caps": ctx.caps, "scope": ctx.scope, "reap": not ctx.join, "tty": tty,
            "connect": connect,
        }  # fmt: skip
        await asyncio.to_thread(_hand_over, write_fd, b"1" + json.dumps(payload).encode())
        return proc, status_fd

    def _forget_exec(self, attempt_id: int, pid: int) -> None:
        """A command's wrapper (:meth:`_spawn_exec`) has ended: the attempt's stop no longer signals it."""
        if (pids := self._exec_pids.get(attempt_id)) is not None:
            pids.discard(pid)
            if not pids:
                del self._exec_pids[attempt_id]

    async def exec(self, attempt_id: int, command: list[str], timeout_s: float, max_output: int) -> ExecOutcome:
        """Run ``command`` in the running attempt ``attempt_id`` as its processes run
        (:data:`EXEC_WRAPPER`): its cgroups, namespaces, identity, environment, directory."""
        proc, status_fd = await self._spawn_exec(
            attempt_id, command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            return await self._run_exec(attempt_id, proc, command, status_fd, timeout_s, max_output)
        finally:
            self._forget_exec(attempt_id, proc.pid)

    async def _run_exec(
        self,
        attempt_id: int,
        proc: asyncio.subprocess.Process,
        command: list[str],
        status_fd: int,
        timeout_s: float,
        max_output: int,
    ) -> ExecOutcome:
        """:meth:`exec` from its go: its output and its end."""
        assert proc.stdout is not None and proc.stderr is not None  # noqa: S101 -- PIPEs above
        out, err = _Capped(max_output), _Capped(max_output)
        readers = asyncio.gather(out.read(proc.stdout), err.read(proc.stderr))
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(asyncio.gather(proc.wait(), readers)), timeout_s)
        except TimeoutError:
            timed_out = proc.returncode is None
            # the command's process tree (in the attempt's cgroup, which a stop kills whole)
            if proc.returncode is None:
                await asyncio.to_thread(stop_then_kill_tree, proc.pid)
            _killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            try:
                await asyncio.wait_for(asyncio.shield(readers), EXEC_KILL_WAIT_S)
            except TimeoutError:
                readers.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await readers
        status = await asyncio.to_thread(_read_status, status_fd)
        if status.startswith(b"fail "):
            raise ExecError("failed", status.removeprefix(b"fail ").decode(errors="replace"))
        code = 124 if timed_out else _exit_status(proc.returncode if proc.returncode is not None else -9)
        log.info("attempt %d: exec %s exited %d%s", attempt_id, command[:1], code, " (timed out)" if timed_out else "")
        return ExecOutcome(code, out.data(), err.data(), out.truncated or err.truncated, timed_out)

    async def exec_tty(self, attempt_id: int, command: list[str], rows: int, cols: int) -> TtySession:
        """Start ``command`` in the running attempt ``attempt_id`` as :meth:`exec` does (the same
        wrapper, cgroups, namespaces, identity, environment), on a new pseudo-terminal, its
        controlling terminal (:class:`agent.runtime.tty.TtySession`)."""
        master, slave = os.openpty()
        try:
            set_size(slave, rows, cols)
            os.set_inheritable(master, False)
            proc, status_fd = await self._spawn_exec(
                attempt_id, command, stdin=slave, stdout=slave, stderr=slave, tty=True
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        forget = asyncio.get_running_loop().create_task(proc.wait())  # as exec's: out of _exec_pids at its end
        forget.add_done_callback(lambda _task: self._forget_exec(attempt_id, proc.pid))
        self._exec_waits.add(forget)
        forget.add_done_callback(self._exec_waits.discard)
        status = await asyncio.to_thread(_read_status, status_fd)
        session = TtySession(master, proc, stop_then_kill_tree)
        if status.startswith(b"fail "):
            await session.close()
            await proc.wait()
            session.finish()
            raise ExecError("failed", status.removeprefix(b"fail ").decode(errors="replace"))
        log.info("attempt %d: interactive exec %s started", attempt_id, command[:1])
        return session

    async def exec_pipe(self, attempt_id: int, command: list[str]) -> PipeSession:
        """Start ``command`` in the running attempt ``attempt_id`` as :meth:`exec` does (the same
        wrapper, cgroups, namespaces, identity, environment), with pipes for its stdin, stdout and
        stderr, no terminal (:class:`agent.runtime.pipe.PipeSession`: ``fairway exec -i``)."""
        proc, status_fd = await self._spawn_exec(
            attempt_id, command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        forget = asyncio.get_running_loop().create_task(proc.wait())  # as exec_tty's
        forget.add_done_callback(lambda _task: self._forget_exec(attempt_id, proc.pid))
        self._exec_waits.add(forget)
        forget.add_done_callback(self._exec_waits.discard)
        status = await asyncio.to_thread(_read_status, status_fd)
        session = PipeSession(proc, stop_then_kill_tree)
        if status.startswith(b"fail "):
            await session.close()
            await proc.wait()
            session.finish()
            raise ExecError("failed", status.removeprefix(b"fail ").decode(errors="replace"))
        log.info("attempt %d: piped exec %s started", attempt_id, command[:1])
        return session

    async def connect_port(self, attempt_id: int, port: int) -> socket.socket:
        """A TCP connection to ``port`` on 127.0.0.1 as the running attempt ``attempt_id`` sees it,
        made by the exec wrapper (:data:`EXEC_WRAPPER`, payload ``connect``) in the attempt's
        cgroups and namespaces as its owner, and handed back here over a Unix socket (SCM_RIGHTS)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                proc, status_fd = await self._spawn_exec(
                    attempt_id, ["fairway-port-forward"], stdin=theirs.fileno(), stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, connect=port,
                )  # fmt: skip
            finally:
                theirs.close()
            try:
                status = await asyncio.to_thread(_read_status, status_fd)
                assert proc.stderr is not None  # noqa: S101 -- a PIPE above
                said = (await proc.stderr.read(4000)).decode(errors="replace").strip().splitlines()
                await proc.wait()
            finally:
                self._forget_exec(attempt_id, proc.pid)
            why = status.split(b" ", 1)[-1].decode(errors="replace")
            if status.startswith(b"refused "):
                raise ExecError("port_refused", why)
            if status.startswith(b"fail "):
                raise ExecError("failed", why)
            return handed_connection(mine, port, proc.returncode, said[-1] if said else "")
        finally:
            mine.close()

    def _cgroup_name(self, attempt_id: int) -> Path:
        """The attempt's cgroup below the fairway parent, per agent (several agents may share a
        host and its cgroup tree: the demo, test runs)."""
        agent_key = hashlib.sha256(str(self.store.state_dir.resolve()).encode()).hexdigest()[:10]
        return Path(f"agent-{agent_key}") / f"attempt-{attempt_id}"

    def _filter_devices(
        self, attempt_id: int, cgroup: Path | None, denied: list[devices.Device], join: list[Path]
    ) -> str:
        """Make the attempt's cgroups refuse the character devices ``denied`` (the host's other
        GPUs): the eBPF filter on its cgroup v2 (``devices.attach``), or a v1 ``devices`` cgroup
        appended to ``join`` (the cgroups its wrapper joins); '' when done, else why not."""
        setup = self.isolation.devices
        assert setup is not None  # noqa: S101 -- set by Isolation
        try:
            if setup.kind == "bpf" and cgroup is not None:
                devices.attach(cgroup, denied, setup.root)
            elif (path := devices_v1_cgroup(setup, self._cgroup_name(attempt_id))) is not None:
                join.append(path)  # removed with the limit cgroups, even half made
                deny_devices_v1(path, denied)
            else:
                return setup.note or "the attempt has no cgroup"
        except OSError as exc:
            log.warning("attempt %d: no device filter for the host's other GPUs (%s)", attempt_id, exc)
            join[:] = [p for p in join if p != devices_v1_cgroup(setup, self._cgroup_name(attempt_id))]
            return f"cannot filter devices: {exc}"
        return ""

    def _at_limits(self, attempt_id: int, cgroup: Path | None) -> str:
        """Whether the kernel killed some of the attempt at its memory limit, and whether it
        refused forks at its pids limit, in words naming the limits
        (``isolation.cgroup_out_of_memory``, ``isolation.cgroup_pids_limit``; "; " between both);
        "" when neither, or without cgroups. Read before the cgroups go."""
        limits = self.isolation.limits
        paths = ([cgroup] if cgroup is not None else []) + (
            v1_limit_cgroups(limits, self._cgroup_name(attempt_id)) if limits is not None else []
        )
        return "; ".join(why for why in (cgroup_out_of_memory(paths), cgroup_pids_limit(paths)) if why)

    def _remove_limit_cgroups(self, attempt_id: int) -> None:
        """Remove the attempt's v1 CPU, memory and devices cgroups, if any."""
        assert self.isolation.limits is not None  # noqa: S101 -- set by Isolation
        name = self._cgroup_name(attempt_id)
        filter_v1 = devices_v1_cgroup(self.isolation.devices, name)
        for path in [*v1_limit_cgroups(self.isolation.limits, name), *([filter_v1] if filter_v1 else [])]:
            if path.exists():
                remove_cgroup(path, parent_too=True)

    def _make_cgroup(self, attempt_id: int) -> Path | None:
        setup = self.isolation.cgroups
        if setup is None or setup.parent is None:
            return None
        path = setup.parent / self._cgroup_name(attempt_id)
        try:
            try:
                path.mkdir(parents=True, exist_ok=True)
            except FileNotFoundError:  # the agent's directory was just removed with its last attempt
                path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning("attempt %d: cannot make cgroup %s (%s): process-tree tracking only", attempt_id, path, exc)
            return None
        return path

    async def stop(self, attempt_id: int, grace_s: float, reason: str = "") -> AttemptRecord | None:
        record = self._records.get(attempt_id)
        if record is None or record.state != "running":
            return record
        watcher = self._watchers[attempt_id]
        if record.pid is not None:
            await _wait_until_execd(record.pid)
        try:
            write_preempt_notice(self.store.preempt_path(attempt_id), time.time() + grace_s, reason or "stopped")
        except OSError as exc:
            log.warning("attempt %d: cannot write the preemption notice: %s", attempt_id, exc)
        if not self._signal(record, signal.SIGTERM):
            await watcher
            return record
        log.info("attempt %d: SIGTERM sent, grace %.0f s", attempt_id, grace_s)
        try:
            await asyncio.wait_for(asyncio.shield(watcher), timeout=grace_s)
        except TimeoutError:
            if record.state == "running":
                record.killed = True
                self.store.save(record)
                await asyncio.to_thread(self._signal, record, signal.SIGKILL)
                log.info("attempt %d: grace over, SIGKILL sent", attempt_id)
            await watcher
        return record

    def _signal(self, record: AttemptRecord, sig: signal.Signals) -> bool:
        """Signal every process of the attempt (its cgroup, else its wrapper's process tree) if its
        wrapper is still the process we started."""
        pid = record.pid
        if pid is None:
            return False
        proc = self._procs.get(record.attempt_id)
        if proc is not None:
            if proc.returncode is not None:
                return False
        elif proc_start_time(pid) != record.proc_start:  # re-adopted: the pid may have been reused
            return False
        if record.cgroup:
            kill_cgroup(Path(record.cgroup), sig)
        else:
            kill_tree(pid, sig)
            self._signal_execs(record.attempt_id, sig)
        if sig == signal.SIGKILL:
            # Once more by the group: a second SIGKILL harms nothing. Not a SIGTERM: the cgroup
            # or the tree above reached every process, and a second one cut short the trainers
            # that checkpoint on the first and quit at once on another.
            _killpg(pid, sig)
        return True

    def _signal_execs(self, attempt_id: int, sig: signal.Signals) -> None:
        """Signal the one-shot commands running in the attempt (exec) and what they started: in
        its cgroup they are signalled with it; without one, the stop and the end find them here."""
        for exec_pid in list(self._exec_pids.get(attempt_id, ())):
            if sig == signal.SIGKILL:
                stop_then_kill_tree(exec_pid)
            else:
                kill_tree(exec_pid, sig)

    def _gpu_devices(self, indices: Collection[int]) -> set[devices.Device]:
        """The character devices of the GPUs ``indices`` (their nodes in ``gpu_nodes``)."""
        return set(devices.char_devices(self.gpu_nodes[i] for i in indices if i in self.gpu_nodes))

    def _reclaim_gpus(self, record: AttemptRecord) -> None:
        """Kill every process of the ended attempt's owner that still holds one of its GPUs'
        devices (a descriptor, or a mapping) outside a running attempt given that GPU (pid63,
        docs/isolation.md): a descriptor passed out of the attempt over a Unix socket (to another
        attempt of the owner, or the owner's login) outlived it, and with it the GPU, which goes to
        the next workload. The device filter checks opens only. The attempt's own processes are
        gone (its cgroup, or its tree, killed); an agent's own identity (``mode: agent``) and root
        are not swept: their processes are the host's (NVML, the agent itself)."""
        uid = record.uid
        theirs = self._gpu_devices(record.gpu_indices) if self.isolation.is_root else set()
        if uid is None or uid == 0 or uid == os.geteuid() or not theirs:
            return

        def given() -> set[int]:  # the processes of running attempts given one of those GPUs (shared)
            pids: set[int] = set()
            for other in list(self._records.values()):
                if other.attempt_id == record.attempt_id or other.state != "running" or other.pid is None:
                    continue
                if theirs & self._gpu_devices(other.gpu_indices):
                    cg = Path(other.cgroup) if other.cgroup else None
                    pids.update(cgroup_pids(cg) if cg else [other.pid, *descendants(other.pid)])
            return pids

        devices.kill_device_holders(record.attempt_id, theirs, uid, given)

    def _watch(self, record: AttemptRecord) -> None:
        task = asyncio.get_running_loop().create_task(self._wait_exit(record), name=f"attempt-{record.attempt_id}")
        self._watchers[record.attempt_id] = task

    async def _wait_exit(self, record: AttemptRecord) -> None:
        assert record.pid is not None  # noqa: S101 -- running records always have a pid
        pid = record.pid
        proc = self._procs.get(record.attempt_id)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            pidfd = None
        try:
            if pidfd is not None and (proc is not None or proc_start_time(pid) == record.proc_start):
                loop = asyncio.get_running_loop()
                readable: asyncio.Future[None] = loop.create_future()

                def on_readable() -> None:
                    if not readable.done():
                        readable.set_result(None)

                loop.add_reader(pidfd, on_readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(pidfd)
            else:
                # No pidfd (old kernel): nothing to wait on but the process table.
                while (proc.poll() is None) if proc is not None else (proc_start_time(pid) == record.proc_start):  # noqa: ASYNC110 -- polling a process, not an event
                    await asyncio.sleep(POLL_S)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        # Leftovers would hold the GPUs: the whole cgroup goes. For our own child the leader is
        # still an unreaped zombie here, so its pid, and thus the group id, cannot have been reused.
        _killpg(pid, signal.SIGKILL)
        self._exec_contexts.pop(record.attempt_id, None)  # no command starts in it from here on
        if not record.cgroup:  # else remove_cgroup below kills them with the rest
            await asyncio.to_thread(self._signal_execs, record.attempt_id, signal.SIGKILL)
        oom = await asyncio.to_thread(
            self._at_limits, record.attempt_id, Path(record.cgroup) if record.cgroup else None
        )
        if record.cgroup:
            await asyncio.to_thread(remove_cgroup, Path(record.cgroup), parent_too=True)
        await asyncio.to_thread(self._remove_limit_cgroups, record.attempt_id)
        await asyncio.to_thread(self._reclaim_gpus, record)  # before its end is reported: its GPUs go on
        await asyncio.to_thread(_remove_var_tmp, record)  # scratch data can be large: not in the loop
        await asyncio.to_thread(_remove_run_scratch, self.store.run_dir(record.attempt_id))
        returncode = proc.wait() if proc is not None else None
        if oom:
            record.message = oom  # the end reason the server records (Slurm's OUT_OF_MEMORY), or forks refused
        self._finish(record, returncode)
        if self.on_exit is not None:
            self.on_exit(record)

    def _finish(self, record: AttemptRecord, returncode: int | None) -> None:
        attempt_id = record.attempt_id
        exit_info = self.store.read_exit(attempt_id)
        now = monotonic_s()
        code: int | None
        exited_mono: float | None
        if exit_info is not None:
            code, exited_mono = exit_info
        elif returncode is not None:
            code, exited_mono = _exit_status(returncode), now
        else:
            # Re-adopted and SIGKILLed with its wrapper: no exit file, but the signal is known.
            code, exited_mono = (128 + signal.SIGKILL if record.killed else None), None
        if record.boot_id != self.boot_id:
            exited_mono = None
        elif exited_mono is None and attempt_id in self._watchers:
            exited_mono = now  # watched until the end: the exit happened just now
        _remove_run_scratch(self.store.run_dir(attempt_id))  # done off the loop already, but after a restart
        _remove_var_tmp(record)
        self._cap_log(attempt_id)  # its last burst of output, written since the last periodic pass
        record.state = "exited"
        record.exit_code = code
        record.exited_mono = exited_mono
        record.finished_wall = time.time()
        self.store.save(record)
        self._procs.pop(attempt_id, None)
        self._watchers.pop(attempt_id, None)
        self._exec_contexts.pop(attempt_id, None)
        log.info("attempt %d exited with code %s", attempt_id, code)

    async def close(self) -> None:
        # A start whose wrapper exists ends first (a few ms: the wrapper's setup), recorded either
        # way; its attempt is then left running like every other. Bounded: a wrapper stuck in its
        # setup does not hold the agent's exit (its record is on disk already, state running).
        if self._starts:
            await asyncio.wait(set(self._starts), timeout=START_CLOSE_S)
        watchers = list(self._watchers.values())
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        self._watchers.clear()
