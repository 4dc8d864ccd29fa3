"""The agent's on-disk state: one JSON record per attempt, so a restarted agent re-adopts its
running attempts and still reports exits that happened while it or the server was away.

Layout of ``<state dir>/attempts/``: ``<id>.json`` (the record), ``<id>.log`` (stdout+stderr,
capped by :func:`cap_log`), ``<id>.exit`` (exit code and exit time, written by the attempt's
wrapper shell), ``<id>.d/`` (files the attempt may read: ``preempt``, see :func:`write_preempt_notice`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import logging
import os
import shutil
import stat
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

log = logging.getLogger(__name__)

RecordState = Literal["running", "exited", "failed_to_start"]


def monotonic_s() -> float:
    """Seconds since boot on ``CLOCK_BOOTTIME``: monotonic, shared by every process of one boot
    (so it survives agent restarts) and equal to the first field of ``/proc/uptime``."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def current_boot_id() -> str:
    """The kernel's boot id ("" when unknown): monotonic times only compare within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(slots=True)
class AttemptRecord:
    """What the agent knows of one attempt. Times are :func:`monotonic_s` seconds of ``boot_id``,
    except ``finished_wall`` (local housekeeping only, never sent to the server)."""

    attempt_id: int
    workload_id: int
    state: RecordState
    gpu_indices: list[int] = field(default_factory=list)
    grace_s: int = 30
    pid: int | None = None
    proc_start: int | None = None  # field 22 of /proc/<pid>/stat: clock ticks after boot
    boot_id: str = ""
    started_mono: float | None = None
    exit_code: int | None = None
    exited_mono: float | None = None
    finished_wall: float | None = None
    reported: bool = False  # the server acknowledged the end state
    start_reported: bool = False  # the server acknowledged the start (``started``, ``running``, a hello)
    killed: bool = False  # the agent sent SIGKILL
    message: str = ""
    uid: int | None = None  # the identity it runs under
    cgroup: str = ""  # its cgroup directory ("" : tracked by process tree)
    var_tmp: str = ""  # its private /var/tmp on the host, removed when it ends ("" : none or removed)

    def start_age_s(self, now_mono: float, boot_id: str) -> float | None:
        """Seconds since the start, or None when the start time is unknown (not started yet,
        e.g. an image pull, or started in another boot)."""
        if self.started_mono is None or not boot_id or self.boot_id != boot_id:
            return None
        return max(0.0, now_mono - self.started_mono)

    def age_s(self, now_mono: float, boot_id: str) -> float | None:
        """Seconds since the exit, or None while running or when the exit time is unknown."""
        if self.exited_mono is None or not boot_id or self.boot_id != boot_id:
            return None
        return max(0.0, now_mono - self.exited_mono)


class AttemptStore:
    """Attempt records as files under ``<state_dir>/attempts`` (created on first use)."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.dir = state_dir / "attempts"
        self._private = False

    def ensure_private(self) -> None:
        """Make the state directory and ``attempts/`` (mode 0711: workloads may reach their own
        ``<id>.d/`` by name but list nothing) and keep every file in them owner-only (0600).
        Repairs the modes of state written by older agents (once per store)."""
        if not self._private or not self.dir.is_dir():
            fix_private_modes(self.state_dir)
            self._private = True

    def _path(self, attempt_id: int, suffix: str) -> Path:
        return self.dir / f"{attempt_id}.{suffix}"

    def log_path(self, attempt_id: int) -> Path:
        """The attempt's stdout+stderr log file."""
        return self._path(attempt_id, "log")

    def run_dir(self, attempt_id: int) -> Path:
        """The attempt's own directory of files it may read (``preempt``); created by the runtime."""
        return self._path(attempt_id, "d")

    def preempt_path(self, attempt_id: int) -> Path:
        """Where the preemption notice of a stopping attempt is written (``FAIRWAY_PREEMPT_FILE``)."""
        return self.run_dir(attempt_id) / PREEMPT_FILE

    def exit_path(self, attempt_id: int) -> Path:
        """The file the attempt's wrapper writes ``"<exit code> <uptime s>"`` to on exit."""
        return self._path(attempt_id, "exit")

    def save(self, record: AttemptRecord) -> None:
        """Write ``record`` atomically.

        Raises:
            OSError: the state directory is not writable.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self._path(record.attempt_id, "json.tmp")
        write_private(tmp, json.dumps(asdict(record)))
        os.replace(tmp, self._path(record.attempt_id, "json"))

    def load_all(self) -> list[AttemptRecord]:
        """Every readable record; unreadable ones are logged and skipped."""
        if not self.dir.is_dir():
            return []
        names = {f.name for f in fields(AttemptRecord)}
        records = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                data = json.loads(path.read_text())
                records.append(AttemptRecord(**{k: v for k, v in data.items() if k in names}))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("skipping unreadable attempt record %s: %s", path, exc)
        return records

    def read_exit(self, attempt_id: int) -> tuple[int, float | None] | None:
        """``(exit code, exit time in monotonic_s seconds or None)`` from the exit file, if any."""
        try:
            parts = self.exit_path(attempt_id).read_text().split()
            return int(parts[0]), float(parts[1]) if len(parts) > 1 else None
        except (OSError, ValueError, IndexError):
            return None

    def delete(self, attempt_id: int) -> None:
        """Remove the record, log and exit file of an attempt (missing files are fine)."""
        for suffix in ("json", "log", "exit"):
            self._path(attempt_id, suffix).unlink(missing_ok=True)
        shutil.rmtree(self.run_dir(attempt_id), ignore_errors=True)


PREEMPT_FILE = "preempt"


def write_preempt_notice(path: Path, deadline_wall: float, reason: str) -> None:
    """Write the preemption notice an attempt reads on SIGTERM, atomically (rename).

    Two shell-sourceable lines: ``FAIRWAY_PREEMPT_DEADLINE=<unix seconds>`` (the time of the
    SIGKILL if the attempt has not exited by then) and ``FAIRWAY_PREEMPT_REASON=<stop reason>``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    safe_reason = "".join(c for c in reason if c.isalnum() or c in "_-.")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(f"FAIRWAY_PREEMPT_DEADLINE={int(deadline_wall)}\nFAIRWAY_PREEMPT_REASON={safe_reason}\n")
    os.chmod(tmp, 0o644)  # the directory (root, group of the attempt) decides who reads it
    os.replace(tmp, path)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600), whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(fd, 0o600)
        f.write(text)


def open_private_append(path: Path) -> Any:
    """``path`` opened for appending in binary, created owner-only (0600)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "ab")


def fix_private_modes(state_dir: Path) -> None:
    """State dir and ``attempts/`` 0711, files in them 0600 (run dirs ``<id>.d`` are left to the
    runtime). Files the agent did not write are left alone."""
    attempts = state_dir / "attempts"
    attempts.mkdir(parents=True, exist_ok=True)
    for directory in (state_dir, attempts):
        try:
            os.chmod(directory, 0o711)  # noqa: S103 -- searchable, not listable: attempts reach their <id>.d
            for entry in os.scandir(directory):
                if not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                if st.st_uid == os.geteuid() and st.st_mode & 0o077:
                    os.chmod(entry.path, 0o600)
        except OSError as exc:  # e.g. a state directory that is not the agent's own
            log.warning("cannot make %s private: %s", directory, exc)


_FALLOC_FL_KEEP_SIZE = 0x01
_FALLOC_FL_PUNCH_HOLE = 0x02
_libc: ctypes.CDLL | None = None


def closed_parent(state_dir: Path) -> Path | None:
    """The nearest directory above ``state_dir`` that others may not search (no ``o+x``), if any.
    Attempts run as their owners reach ``<state>/attempts/<id>.d`` by its path, with their own
    file-system identity (iso58), so under such a directory (``/root``, pytest's 0700 temporary
    directories) every start of an owner's attempt fails; /var/lib (0755) is fine."""
    for parent in state_dir.resolve().parents:
        try:
            if not parent.stat().st_mode & stat.S_IXOTH:
                return parent
        except OSError:
            return parent
    return None


def _punch_hole(fd: int, length: int) -> bool:
    """Free the first ``length`` bytes of ``fd`` (Linux fallocate PUNCH_HOLE); False if unsupported."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fallocate = _libc.fallocate
        fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    except (OSError, AttributeError):
        return False
    if fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, length) == 0:
        return True
    if ctypes.get_errno() not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        log.debug("fallocate punch hole failed: %s", os.strerror(ctypes.get_errno()))
    return False


def log_data_start(f: Any) -> int:
    """Offset of the first byte of a capped log that was not dropped (0 when nothing was)."""
    try:
        return os.lseek(f.fileno(), 0, os.SEEK_DATA)
    except OSError:  # ENXIO: no data at all; EINVAL: no SEEK_DATA here
        return 0


def cap_log(path: Path, max_bytes: int) -> bool:
    """Keep at most about ``max_bytes`` of disk for the log at ``path``; True when it dropped data.

    Output older than the last ``max_bytes`` is dropped by punching a hole at the start of the file
    (the writer appends with ``O_APPEND`` and never notices; offsets stay true byte offsets, so a
    tail reader never goes back). Where holes are unsupported the file is cut to its last
    ``max_bytes / 2`` bytes instead (copy and truncate: a write landing meanwhile may be lost).
    """
    f = _open_log(path, os.O_RDWR)
    if f is None:
        return False
    with f:
        st = os.fstat(f.fileno())
        size, disk = st.st_size, st.st_blocks * 512
        if size <= max_bytes or disk <= max_bytes:
            return False
        keep = max_bytes // 2
        if _punch_hole(f.fileno(), size - keep):
            return True
        f.seek(size - keep)
        tail = f.read()
        f.seek(0)
        f.truncate(0)
        f.write(tail)
    return True


def read_log_tail(path: Path, tail_bytes: int) -> tuple[bytes, int]:
    """The last ``tail_bytes`` bytes kept of the log at ``path`` and their byte offset in it
    (``(b"", 0)`` when there is no log yet)."""
    f = _open_log(path, os.O_RDONLY)
    if f is None:
        return b"", 0
    with f:
        size = f.seek(0, os.SEEK_END)
        offset = max(0, size - tail_bytes, min(size, log_data_start(f)))
        f.seek(offset)
        return f.read(size - offset), offset


def _open_log(path: Path, flags: int) -> Any:
    """The log at ``path`` opened (binary) with ``flags``, or None when there is none or it is not a
    regular file: a symlink is never followed (a workload of the agent's own user could point its
    log at the agent's config: a ``logs`` request would relay the token, the cap cut the file)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # none yet, or a symlink (ELOOP)
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device planted there
        os.close(fd)
        return None
    return os.fdopen(fd, "r+b" if flags & os.O_RDWR else "rb")
