"""Workload isolation on the agent (docs/isolation.md): whose identity an attempt runs under, the
cgroup that holds all of its processes, and the process-tree fallback where there is no usable
cgroup.

Identity (``mode: owner``, the default), in order:

1. the uid/gid/groups an admin set on the Fairway user (``start.owner.uid``);
2. the Fairway user name mapped through the host's NSS (``getent passwd``: files, LDAP, sssd),
   for accounts with uid ≥ ``nss_min_uid``;
3. an agent running as root: a dedicated account ``<account_prefix><name>`` with uid = gid from
   ``uid_range``, created once (``groupadd``/``useradd``) and reused;
4. an agent not running as root: its own user (it cannot switch), with a warning in
   :meth:`Isolation.status`.

uid 0 is refused unless both the cluster (``start.allow_root``) and ``allow_root`` allow it.
``mode: agent`` runs every attempt as the agent's own user (development; as root it needs both).
"""

from __future__ import annotations

import contextlib
import errno
import grp
import hashlib
import logging
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.runtime import devices

log = logging.getLogger(__name__)

MODES = ("owner", "agent")
CGROUP_MODES = ("auto", "v2", "v1", "off")
CONTAINER_NETWORKS = ("private", "host")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NAME_RE = re.compile(r"[^a-z0-9_-]")
DEFAULT_PIDS_MAX = 8192
"""Tasks (processes and threads) one attempt may have at once: its cgroup's ``pids.max``
(docs/isolation.md). Room for an 8-GPU job's ranks, data-loader workers and their threads (a few
thousand), far below a host's ``kernel.pid_max``; Podman's default is 2048, OpenShift's 4096."""
PID_MAX_LIMIT = 4 * 1024 * 1024  # the kernel's PID_MAX_LIMIT on 64-bit: pids.max above it means nothing


class IdentityError(Exception):
    """No acceptable identity for an attempt (reported as ``failed_to_start``)."""


_PREFIX_RE = re.compile(r"[a-z_][a-z0-9_-]{0,15}")


def _is_uid(value: Any) -> bool:
    """Whether ``value`` is a whole number as YAML gives it (not a boolean, not a fraction)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True, slots=True)
class IsolationConfig:
    """The agent's ``isolation`` settings (YAML mapping, ``FAIRWAY_ISOLATION`` as a YAML flow
    mapping, e.g. ``{mode: agent, allow_root: true}``)."""

    mode: str = "owner"
    uid_range: tuple[int, int] = (61000, 61999)
    account_prefix: str = "fw-"
    allow_root: bool = False
    nss: bool = True
    nss_min_uid: int = 1000
    min_gid: int | None = None  # admin-set gids below it need both root consents; None: GID_MIN of /etc/login.defs
    cgroup: str = "auto"
    cgroup_parent: str = ""  # "" = <the agent's own cgroup>/fairway
    pids_max: int = DEFAULT_PIDS_MAX  # tasks (processes and threads) per attempt; 0: no limit
    container_network: str = "private"  # docker runtime: private (a gang's part: host) | host (every attempt)

    @classmethod
    def parse(cls, raw: Any) -> IsolationConfig:
        """From a mapping (or None); raises ValueError on unknown keys or bad values."""
        if raw is None or raw == "":
            return cls()
        if isinstance(raw, IsolationConfig):
            return raw
        if not isinstance(raw, Mapping):
            raise ValueError("must be a mapping, e.g. {mode: owner, uid_range: [61000, 61999]}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(map(str, raw)) - known)
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)}")
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key == "mode":
                if value not in MODES:
                    raise ValueError(f"mode must be one of {', '.join(MODES)}")
            elif key == "container_network":
                if value not in CONTAINER_NETWORKS:
                    raise ValueError(f"container_network must be one of {', '.join(CONTAINER_NETWORKS)}")
            elif key == "cgroup":
                value = "off" if value is False else value  # YAML 1.1 reads a bare off as false
                if value not in CGROUP_MODES:
                    raise ValueError(f"cgroup must be one of {', '.join(CGROUP_MODES)}")
            elif key == "uid_range":
                if not (isinstance(value, list | tuple) and len(value) == 2 and all(_is_uid(v) for v in value)):
                    raise ValueError("uid_range must be [low, high], two whole numbers")
                lo, hi = value
                if not 0 < lo <= hi < 2**31:
                    raise ValueError("uid_range must be [low, high] with 0 < low <= high < 2147483648")
                value = (lo, hi)
            elif key in ("allow_root", "nss"):
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be true or false")
            elif key == "nss_min_uid":
                # 0 or below would map Fairway users named root, daemon, bin… onto system accounts
                if not (_is_uid(value) and 0 < value < 2**31):
                    raise ValueError("nss_min_uid must be a whole number in 1..2147483647")
            elif key == "min_gid":
                # gid 0 needs both consents whatever this says; 1 admits every other group
                if not (_is_uid(value) and 0 < value < 2**31):
                    raise ValueError("min_gid must be a whole number in 1..2147483647")
            elif key == "account_prefix":
                # a dedicated account is prefix + name: an empty prefix or one starting with "-"
                # would let a user name become a useradd option or an existing system account
                if not (isinstance(value, str) and _PREFIX_RE.fullmatch(value)):
                    raise ValueError("account_prefix must be 1-16 of [a-z0-9_-], starting with a letter or _")
            elif key == "pids_max":
                if not (_is_uid(value) and 0 <= value <= PID_MAX_LIMIT):
                    raise ValueError(f"pids_max must be a whole number in 0..{PID_MAX_LIMIT} (0: no limit)")
            elif key == "cgroup_parent":
                value = str(value)
                if value and (not value.startswith("/") or ".." in Path(value).parts):
                    raise ValueError("cgroup_parent must be an absolute path without .. (or empty)")
            else:
                value = str(value)
            values[key] = value
        return cls(**values)


LOGIN_DEFS = Path("/etc/login.defs")
DEFAULT_GID_MIN = 1000


def system_ids(ids: tuple[int, ...] | list[int], first_normal: int) -> list[int]:
    """The system accounts' or groups' ids among ``ids``, each once, in order: 0 (root) or below
    ``first_normal``, the host's first normal id (``isolation.nss_min_uid`` for uids, ``min_gid``
    or ``GID_MIN`` for gids; useradd's ``UID_MIN``/``GID_MIN``, 1000). Root-equivalent on the
    host, they need both root consents. The one rule: the server's user admin reads it too
    (``accounts.models.system_uid``, ``system_gids``)."""
    return [i for i in dict.fromkeys(ids) if i == 0 or i < first_normal]


def first_normal_gid(path: Path = LOGIN_DEFS) -> int:
    """The host's first gid of a normal group: ``GID_MIN`` of ``/etc/login.defs`` as ``useradd``
    and ``groupadd`` read it (the last line ``GID_MIN <number>``, the number perhaps in double
    quotes; decimal, ``0x`` hex or ``0`` octal),
    else 1000, their default. Groups below it are the system's (``disk``, ``docker``, ``shadow``)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return DEFAULT_GID_MIN
    text = None
    for line in lines:
        # as shadow's def_load: every line's value in turn, so the last one counts; the value
        # without the double quotes around it (brk43: the first line counted, '"2000"' failed)
        words = line.strip().split(None, 1)
        if len(words) == 2 and words[0] == "GID_MIN":
            text = words[1].lstrip(' "\t').split('"', 1)[0].strip()
    if text is None:
        return DEFAULT_GID_MIN
    try:
        value = int(text, 8) if len(text) > 1 and text.startswith("0") and text.isdigit() else int(text, 0)
    except ValueError:
        return DEFAULT_GID_MIN
    return value if 0 < value < 2**31 else DEFAULT_GID_MIN


def group_label(gid: int) -> str:
    """``gid`` as the host's NSS names it (``6 (disk)``; files, LDAP, sssd: ``getent group``)."""
    try:
        return f"{gid} ({grp.getgrgid(gid).gr_name})"
    except (KeyError, OverflowError):
        return str(gid)


@dataclass(frozen=True, slots=True)
class Identity:
    """The POSIX identity of an attempt. ``switch``: the agent changes to it (False: the agent's own)."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    user: str
    home: str
    source: str  # admin | nss | dedicated | agent
    switch: bool = True


# --- cgroups ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CgroupSetup:
    """Where attempt cgroups are made: ``kind`` v2, v1 (one hierarchy) or none; ``parent`` dir."""

    kind: str
    parent: Path | None = None
    note: str = ""


def _mounts() -> list[tuple[str, str, str]]:
    """(mount point, fs type, options) of /proc/self/mounts."""
    out = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 4:
                out.append((parts[1].replace("\\040", " "), parts[2], parts[3]))
    return out


def _own_cgroups() -> dict[str, str]:
    """Hierarchy ("" for v2, else controller list) → this process's cgroup path."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            out[controllers] = path
    return out


def _probe(parent: Path) -> str:
    """'' if a child cgroup can be made under ``parent``, else why not."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        ok = (probe / "cgroup.procs").exists() and os.access(probe / "cgroup.procs", os.W_OK)
        probe.rmdir()
    except OSError as exc:
        return f"{parent}: {exc.strerror or exc}"
    return "" if ok else f"{parent}: cgroup.procs not writable"


def detect_cgroups(mode: str = "auto", parent: str = "") -> CgroupSetup:
    """The cgroup setup for attempts: v2 if a cgroup2 mount is writable here, else v1 (freezer or
    pids hierarchy), else none (the process-tree fallback), as ``mode`` allows."""
    if mode == "off":
        return CgroupSetup("none", note="cgroups turned off (isolation.cgroup: off)")
    own = _own_cgroups()
    notes: list[str] = []
    mounts = _mounts()
    if mode in ("auto", "v2"):
        for point, fstype, _opts in mounts:
            if fstype == "cgroup2":
                base = Path(parent) if parent else Path(point) / own.get("", "/").lstrip("/") / "fairway"
                why = _probe(base)
                if not why:
                    return CgroupSetup("v2", base)
                notes.append(f"v2 {why}")
                break
        else:
            notes.append("no cgroup2 mount")
    if mode in ("auto", "v1"):
        for controller in ("freezer", "pids"):
            for point, fstype, opts in mounts:
                if fstype == "cgroup" and controller in opts.split(","):
                    key = next((k for k in own if controller in k.split(",")), None)
                    rel = own.get(key, "/") if key is not None else "/"
                    base = Path(parent) if parent else Path(point) / rel.lstrip("/") / "fairway"
                    why = _probe(base)
                    if not why:
                        return CgroupSetup("v1", base, note=controller)
                    notes.append(f"v1 {controller} {why}")
                    break
    return CgroupSetup("none", note="; ".join(notes) or "no cgroup hierarchy")


@dataclass
class DeviceSetup:
    """Whether attempts' cgroups get a device filter refusing the host's other GPUs: ``kind``
    ``bpf`` (a cgroup v2 eBPF program on the attempt's cgroup, ``agent.runtime.devices``; ``root``:
    the cgroup2 mount), ``v1`` (a cgroup of the v1 ``devices`` controller under ``root``, its
    ``devices.deny`` naming them, which the wrapper joins) or ``none`` (``note`` says why: their
    nodes are then hidden by path only)."""

    kind: str
    root: Path | None = None
    note: str = ""


def _devices_v1() -> DeviceSetup | str:
    """The v1 ``devices`` hierarchy's ``fairway`` directory below the agent's own cgroup, else why not."""
    for point, fstype, opts in _mounts():
        if fstype == "cgroup" and "devices" in opts.split(","):
            own = _own_cgroups()
            key = next((k for k in own if "devices" in k.split(",")), None)
            base = Path(point) / (own.get(key, "/") if key is not None else "/").lstrip("/") / "fairway"
            why = _probe(base)
            return f"v1 devices {why}" if why else DeviceSetup("v1", base)
    return "no v1 devices controller"


def _devices_bpf(cgroups: CgroupSetup) -> DeviceSetup | str:
    """The eBPF filter on the attempts' cgroup v2, else why not: the kernel and privileges must
    load it and attach it there (tried on a probe cgroup, removed at once: a cgroup namespace or an
    ancestor's device policy may refuse what loading allows)."""
    if cgroups.kind != "v2" or cgroups.parent is None:
        return f"attempts' cgroups are not on cgroup v2 ({cgroups.kind})"
    roots = [Path(point) for point, fstype, _ in _mounts() if fstype == "cgroup2"]
    root = max((r for r in roots if r == cgroups.parent or r in cgroups.parent.parents), key=lambda r: len(r.parts),
               default=None)  # fmt: skip
    why = devices.probe()
    if not why:
        probe = cgroups.parent / f"probe-devices-{os.getpid()}"
        try:
            probe.mkdir(parents=True, exist_ok=True)
            devices.attach(probe, [(195, 255)], root)
        except OSError as exc:
            why = f"cannot attach a device filter under {cgroups.parent}: {exc.strerror or exc}"
        finally:
            with contextlib.suppress(OSError):
                probe.rmdir()
    return why or DeviceSetup("bpf", root)


def detect_devices(cgroups: CgroupSetup) -> DeviceSetup:
    """How attempts' cgroups refuse the host's other GPUs: the eBPF filter on cgroup v2, else the
    v1 ``devices`` controller (Slurm's v1 ``ConstrainDevices``), else none. Needs a root agent."""
    if os.geteuid() != 0:
        return DeviceSetup("none", note="the agent is not root")
    if cgroups.kind == "none":
        return DeviceSetup("none", note=f"no usable cgroup ({cgroups.note})")
    notes = []
    for way in (lambda: _devices_bpf(cgroups), _devices_v1):
        found = way()
        if isinstance(found, DeviceSetup):
            return found
        notes.append(found)
    return DeviceSetup("none", note="; ".join(notes))


def devices_v1_cgroup(setup: DeviceSetup | None, name: Path) -> Path | None:
    """The v1 ``devices`` cgroup of the attempt named ``name`` (relative, as the tracking
    cgroup's), when the host filters devices that way."""
    return setup.root / name if setup is not None and setup.kind == "v1" and setup.root is not None else None


def deny_devices_v1(path: Path, denied: list[devices.Device]) -> None:
    """Make the v1 ``devices`` cgroup ``path`` refusing ``denied`` (character devices, every access:
    ``c M:m rwm`` in ``devices.deny``; everything else as its parent allows). Raises OSError."""
    path.mkdir(parents=True, exist_ok=True)
    for major, minor in denied:
        (path / "devices.deny").write_text(f"c {major}:{minor} rwm")


def cgroup_pids(path: Path) -> list[int]:
    """Processes in the cgroup ``path`` (empty when it is gone)."""
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_cgroup(path: Path, sig: signal.Signals = signal.SIGKILL) -> None:
    """Send ``sig`` to every process of the cgroup ``path``. SIGKILL uses ``cgroup.kill`` (v2,
    Linux 5.14+) or, on v1, freezes the cgroup first so nothing forks past the kill."""
    if sig == signal.SIGKILL and (path / "cgroup.kill").exists():
        with contextlib.suppress(OSError):
            (path / "cgroup.kill").write_text("1")
            return
    frozen = False
    if sig == signal.SIGKILL and (path / "freezer.state").exists():
        with contextlib.suppress(OSError):
            (path / "freezer.state").write_text("FROZEN")
            frozen = True
    for _ in range(50):
        pids = cgroup_pids(path)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if sig != signal.SIGKILL:
            break
        if frozen:
            with contextlib.suppress(OSError):
                (path / "freezer.state").write_text("THAWED")
            frozen = False
        time.sleep(0.01)
    if frozen:
        with contextlib.suppress(OSError):
            (path / "freezer.state").write_text("THAWED")


def remove_cgroup(path: Path, wait_s: float = 2.0, *, parent_too: bool = False) -> bool:
    """Kill what is left in the cgroup ``path`` and remove it (and its parent if that is then empty,
    with ``parent_too``); True when it is gone."""
    deadline = time.monotonic() + wait_s
    while True:
        if not path.exists():
            return True
        kill_cgroup(path)
        try:
            path.rmdir()
            if parent_too:
                with contextlib.suppress(OSError):
                    path.parent.rmdir()
            return True
        except OSError:
            if time.monotonic() > deadline:
                log.warning("cannot remove cgroup %s (processes left: %s)", path, cgroup_pids(path))
                return False
            time.sleep(0.02)


# --- CPU and memory limits (DESIGN.md §3.3) ---------------------------------------------------------

CPU_PERIOD_US = 100_000


@dataclass(frozen=True, slots=True)
class LimitSetup:
    """Where an attempt's CPU and memory limits go: ``v2`` (``cpu.max``, ``memory.max`` in the
    attempt's own cgroup, controllers enabled below the parent), ``v1`` (a cgroup of the same name
    in the ``cpu`` and ``memory`` hierarchies beside the attempt's tracking cgroup:
    ``cpu.cfs_quota_us``, ``memory.limit_in_bytes``), or ``none`` (not enforced; ``note`` says why).
    Its ``pids.max`` likewise, on its own (a host may have the ``pids`` controller on cgroup v2 and
    ``cpu`` and ``memory`` on v1): ``pids`` v2, v1 (under ``pids_root``) or none (``pids_note``)."""

    kind: str
    cpu: Path | None = None  # v1: parent dir in the cpu hierarchy
    memory: Path | None = None  # v1: parent dir in the memory hierarchy
    note: str = ""
    pids: str = "none"
    pids_root: Path | None = None  # v1: parent dir in the pids hierarchy
    pids_note: str = ""


def detect_limits(cgroups: CgroupSetup) -> LimitSetup:
    """How this host can enforce limits, next to the tracking cgroups of ``cgroups``."""
    found = _detect_cpu_memory(cgroups)
    if cgroups.kind == "v2" and cgroups.parent is not None:
        with contextlib.suppress(OSError):
            if "pids" in (cgroups.parent / "cgroup.controllers").read_text().split():
                return replace(found, pids="v2")
    if cgroups.kind in ("v2", "v1"):
        base = _v1_hierarchy("pids")
        if isinstance(base, Path):
            return replace(found, pids="v1", pids_root=base)
        return replace(found, pids_note=base)
    return replace(found, pids_note=f"no usable cgroup ({cgroups.note})")


def _v1_hierarchy(controller: str) -> Path | str:
    """The ``fairway`` directory below the agent's own cgroup in the v1 hierarchy of ``controller``,
    else why not."""
    own = _own_cgroups()
    for point, fstype, opts in _mounts():
        if fstype == "cgroup" and controller in opts.split(","):
            key = next((k for k in own if controller in k.split(",")), None)
            rel = own.get(key, "/") if key is not None else "/"
            base = Path(point) / rel.lstrip("/") / "fairway"
            why = _probe(base)
            return f"v1 {controller} {why}" if why else base
    return f"no {controller} controller"


def _detect_cpu_memory(cgroups: CgroupSetup) -> LimitSetup:
    """Where the CPU and memory limits go (:func:`detect_limits`)."""
    if cgroups.kind == "v2" and cgroups.parent is not None:
        parent = cgroups.parent
        with contextlib.suppress(OSError):
            have = set((parent / "cgroup.controllers").read_text().split())
            if {"cpu", "memory"} <= have:
                return LimitSetup("v2")
        # A hybrid host: controllers on v1 hierarchies, an empty cgroup2 for tracking.
    if cgroups.kind in ("v2", "v1"):
        found: dict[str, Path] = {}
        notes = []
        for controller in ("cpu", "memory"):
            where = _v1_hierarchy(controller)
            if isinstance(where, Path):
                found[controller] = where
            else:
                notes.append(where)
        if len(found) == 2:
            return LimitSetup("v1", found["cpu"], found["memory"])
        return LimitSetup("none", note="; ".join(notes))
    return LimitSetup("none", note=f"no usable cgroup ({cgroups.note})")


def limit_files(cpus: int | None, memory: int | None, kind: str) -> list[tuple[str, str, str]]:
    """``(controller, file, value)`` to write for ``cpus`` CPUs and ``memory`` bytes (pure)."""
    out: list[tuple[str, str, str]] = []
    if kind == "v2":
        if cpus is not None:
            out.append(("cpu", "cpu.max", f"{cpus * CPU_PERIOD_US} {CPU_PERIOD_US}"))
        if memory is not None:
            out.append(("memory", "memory.max", str(memory)))
            out.append(("memory", "memory.swap.max", "0"))
    elif kind == "v1":
        if cpus is not None:
            out.append(("cpu", "cpu.cfs_period_us", str(CPU_PERIOD_US)))
            out.append(("cpu", "cpu.cfs_quota_us", str(cpus * CPU_PERIOD_US)))
        if memory is not None:
            out.append(("memory", "memory.limit_in_bytes", str(memory)))
    return out


def apply_limits(
    setup: LimitSetup, cgroup: Path | None, name: Path, cpus: int | None, memory: int | None, pids: int | None = None
) -> list[Path]:
    """Make and fill the cgroups that limit an attempt to ``cpus``, ``memory`` and ``pids`` tasks
    before its process joins them: for v2 the attempt's ``cgroup`` itself (controllers enabled on
    its parents below the fairway parent), for v1 ``name`` (relative, as the tracking cgroup's)
    under the cpu, memory and pids hierarchies. Returns the extra cgroups the process must join
    (v1). Raises OSError when a limit cannot be written (the start then fails: a limit asked for,
    or set by the host, is a limit kept)."""
    made = _apply_pids(setup, cgroup, name, pids) if setup is not None and pids else []
    return made + _apply_cpu_memory(setup, cgroup, name, cpus, memory)


def _apply_pids(setup: LimitSetup, cgroup: Path | None, name: Path, pids: int) -> list[Path]:
    """``pids.max`` of the attempt (:func:`apply_limits`); the v1 cgroup to join, if any."""
    if setup.pids == "v2" and cgroup is not None:
        for parent in (cgroup.parent.parent, cgroup.parent):  # the fairway dir, the agent's dir
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text("+pids")
        (cgroup / "pids.max").write_text(str(pids))
        return []
    if setup.pids == "v1" and setup.pids_root is not None:
        path = setup.pids_root / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "pids.max").write_text(str(pids))
        return [path]
    return []


def _apply_cpu_memory(
    setup: LimitSetup, cgroup: Path | None, name: Path, cpus: int | None, memory: int | None
) -> list[Path]:
    """The CPU and memory part of :func:`apply_limits`."""
    if setup is None or (cpus is None and memory is None):
        return []
    if setup.kind == "v2" and cgroup is not None:
        for parent in (cgroup.parent.parent, cgroup.parent):  # the fairway dir, the agent's dir
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text("+cpu +memory")
        for _controller, file, value in limit_files(cpus, memory, "v2"):
            if file == "memory.swap.max" and not (cgroup / file).exists():
                continue  # swap accounting off: nothing to limit
            (cgroup / file).write_text(value)
        return []
    if setup.kind == "v1":
        made: list[Path] = []
        for controller, base in (("cpu", setup.cpu), ("memory", setup.memory)):
            files = [(f, v) for c, f, v in limit_files(cpus, memory, "v1") if c == controller]
            if not files or base is None:
                continue
            path = base / name
            path.mkdir(parents=True, exist_ok=True)
            made.append(path)
            for file, value in files:
                (path / file).write_text(value)
        return made
    return []


def bytes_text(n: int) -> str:
    """Bytes as people read sizes, here and on the server (``scheduler.sizes.format_size``): the
    largest binary unit that divides them (``4G``, ``512M``), else one decimal (``1.5G``)."""
    for unit, shift in (("P", 50), ("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f}G"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f}M"
    return f"{n}B"


def event_count(text: str, key: str) -> int:
    """The count of ``key`` in a cgroup events file (``memory.events``, ``memory.oom_control``,
    ``pids.events``: lines ``key value``); 0 when absent or unreadable."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value.strip())
            except ValueError:
                return 0
    return 0


def oom_kill_count(text: str) -> int:
    """The ``oom_kill`` count of a cgroup's ``memory.events`` (v2) or ``memory.oom_control`` (v1,
    kernels from 4.13); 0 when absent or unreadable."""
    return event_count(text, "oom_kill")


def _limit_hit(
    paths: list[Path], files: tuple[tuple[str, str], ...], key: str, message: Callable[[int, int | None], str]
) -> str:
    """``message(count, limit)`` for the first of the attempt's cgroups (read before they are
    removed) whose events file counts ``key`` (each of ``files``: the events file, the limit's
    file), "" when none does."""
    for path in paths:
        for events, limit_file in files:
            try:
                count = event_count((path / events).read_text(), key)
            except OSError:
                continue
            if not count:
                continue
            try:
                raw = (path / limit_file).read_text().strip()
                limit = int(raw) if raw.isdigit() else None
            except OSError:
                limit = None
            return message(count, limit)
    return ""


def out_of_memory_message(oom_kills: int, limit: int | None) -> str:
    """The end reason of an attempt the kernel killed at its memory limit (Slurm's OUT_OF_MEMORY,
    Kubernetes' OOMKilled), naming the limit; "" when nothing was killed for memory."""
    if oom_kills <= 0:
        return ""
    limit_words = f" ({bytes_text(limit)})" if limit is not None and limit > 0 else ""
    return f"out of memory: it reached its memory limit{limit_words} and the kernel killed it (OOM kill)"


def cgroup_out_of_memory(paths: list[Path]) -> str:
    """:func:`out_of_memory_message` from the attempt's cgroups (read before they are removed):
    ``memory.events`` and ``memory.max`` (v2), ``memory.oom_control`` and ``memory.limit_in_bytes``
    (v1). "" when none of them counts an OOM kill."""
    files = (("memory.events", "memory.max"), ("memory.oom_control", "memory.limit_in_bytes"))
    return _limit_hit(paths, files, "oom_kill", out_of_memory_message)


def pids_max_hits(text: str) -> int:
    """The ``max`` count of a cgroup's ``pids.events`` (v2 and v1 alike): forks and clones refused
    at its ``pids.max``; 0 when absent or unreadable."""
    return event_count(text, "max")


def pids_limit_message(hits: int, limit: int | None) -> str:
    """What an attempt whose forks were refused at its pids limit ends with, naming the limit
    (``isolation.pids_max``); "" when none was refused."""
    if hits <= 0:
        return ""
    limit_words = f" ({limit} tasks, isolation.pids_max)" if limit is not None and limit > 0 else ""
    forks = f"{hits} fork failed" if hits == 1 else f"{hits} forks failed"
    return f"out of tasks: it reached its pids limit{limit_words} and {forks} (EAGAIN)"


def cgroup_pids_limit(paths: list[Path]) -> str:
    """:func:`pids_limit_message` from the attempt's cgroups (read before they are removed):
    ``pids.events`` and ``pids.max``, in its v2 cgroup or its v1 ``pids`` one. "" when none of
    them counts a refused fork."""
    return _limit_hit(paths, (("pids.events", "pids.max"),), "max", pids_limit_message)


def v1_limit_cgroups(setup: LimitSetup, name: Path) -> list[Path]:
    """The v1 limit cgroups an attempt named ``name`` may have (to remove at its end)."""
    out = [base / name for base in (setup.cpu, setup.memory) if setup.kind == "v1" and base is not None]
    if setup.pids == "v1" and setup.pids_root is not None:
        out.append(setup.pids_root / name)
    return out


# --- abstract unix sockets (Landlock scoping) ------------------------------------------------------

LANDLOCK_SCOPE_ABI = 6
"""The Landlock ABI (Linux 6.12) that scopes abstract unix sockets and signals to their domain
(``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET``, ``LANDLOCK_SCOPE_SIGNAL``)."""


def landlock_abi() -> int:
    """The kernel's Landlock ABI version (``landlock_create_ruleset(NULL, 0, VERSION)``); 0 when it
    has none (an old kernel: ENOSYS; Landlock not among the LSMs: EOPNOTSUPP)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(0, int(version))


def landlock_scope_problem() -> str:
    """'' when the wrapper can keep each attempt's abstract unix sockets and signals to the attempt
    (a Landlock domain per attempt, docs/isolation.md), else why not."""
    abi = landlock_abi()
    if abi < LANDLOCK_SCOPE_ABI:
        return f"Landlock ABI {abi} (needs {LANDLOCK_SCOPE_ABI}: Linux 6.12 with Landlock enabled)"
    return ""


# --- a /proc of the attempt's own (iso61) -----------------------------------------------------------

PRIVATE_PROC_KERNEL = (5, 8)
"""Linux 5.8 made every proc mount a superblock of its own, with its own ``hidepid``. Before, the
mounts of one PID namespace shared one, and a proc mounted with ``hidepid`` for an attempt would
have hidden the processes of the host's own ``/proc`` too (the wrapper's ``hidepid=invisible``,
5.8's spelling, is refused there anyway, changing nothing)."""


def private_proc_problem(release: str | None = None) -> str:
    """'' when the wrapper can give each attempt a ``/proc`` of its own with ``hidepid=invisible``
    (docs/isolation.md), else why not."""
    release = release or os.uname().release
    found = re.match(r"(\d+)\.(\d+)", release)
    if found is None or (int(found[1]), int(found[2])) < PRIVATE_PROC_KERNEL:
        return f"Linux {release} (needs 5.8: a proc mount of its own)"
    return ""


# --- a cgroup tree of the attempt's own (iso46) ------------------------------------------------------


def cgroup_ns_problem(cgroups: CgroupSetup, release: str | None = None) -> str:
    """'' when the wrapper can give each attempt a cgroup namespace rooted at its own cgroup, and a
    ``/sys/fs/cgroup`` showing only that (docs/isolation.md, "The cgroup tree"), else why not."""
    if cgroups.kind == "none":
        return f"no cgroup of the attempt's own ({cgroups.note})"
    if not os.path.exists("/proc/self/ns/cgroup"):
        return f"Linux {release or os.uname().release} (needs 4.6: cgroup namespaces)"
    return ""


def cgroup_views(joined: list[Path], mounts: list[tuple[str, str, str]] | None = None) -> list[list[str]]:
    """What the wrapper binds over each cgroup hierarchy of the host in the attempt's mount namespace
    (docs/isolation.md, "The cgroup tree"): ``[point, own]`` for each cgroup or cgroup2 mount of
    ``mounts`` (the agent's ``/proc/self/mounts``; each point once, none below another). ``own``: the
    attempt's cgroup there (one of ``joined``, the cgroups its wrapper joined), bound over the
    hierarchy, read-only; "" where it has none of its own (it is in the agent's cgroup there, above
    other attempts' in a v1 hierarchy): an empty tmpfs instead. A new mount of the hierarchy in the
    attempt's cgroup namespace would show the same, but the kernel refuses one on a mount point of
    the same file system (``EBUSY``)."""
    out: list[list[str]] = []
    seen: list[str] = []
    for point, fstype, _opts in mounts if mounts is not None else _mounts():
        below = any(point == s or point.startswith(s.rstrip("/") + "/") for s in seen)
        if fstype not in ("cgroup", "cgroup2") or below:
            continue
        seen.append(point)
        own = next((str(p) for p in joined if Path(point) in p.parents), "")
        out.append([point, own])
    return out


# --- the process-tree fallback ----------------------------------------------------------------------


def descendants(root: int, *, living: bool = False) -> list[int]:
    """Every process under ``root`` by parent links (/proc), deepest last; ``living``: less the
    zombies (dead, waiting for their parent to reap them: a stopped one never does)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = text[text.rfind(")") + 2 :].split()[:2]
        if living and state in ("Z", "X"):
            continue  # a zombie has no children: theirs were handed to the (sub)reaper at its death
        children.setdefault(int(ppid), []).append(int(entry))
    out: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(root: int, sig: signal.Signals, *, include_root: bool = True) -> None:
    """Signal every descendant of ``root`` (then ``root``). The attempt's wrapper is a child
    subreaper, so processes that ``setsid`` or double-fork stay its descendants; SIGKILL repeats
    until none is left alive (a zombie is dead: under a stopped root, :func:`stop_then_kill_tree`,
    it stays one, and 100 rounds waited on it, left50), and kills the wrapper last (killed first,
    it would orphan them)."""
    for _ in range(100 if sig == signal.SIGKILL else 1):
        pids = descendants(root, living=True)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if sig == signal.SIGKILL:
            time.sleep(0.01)
    if include_root:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(root, sig)


def stop_then_kill_tree(root: int) -> None:
    """SIGKILL ``root`` and its descendants, every one stopped first: a shell whose child is killed
    before it would run its next command meanwhile (a one-shot command at its timeout: ``exec``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(root, signal.SIGSTOP)
    kill_tree(root, signal.SIGSTOP)
    kill_tree(root, signal.SIGKILL)


# --- file access as another user ---------------------------------------------------------------------


def _allowed(st: os.stat_result, uid: int, gids: set[int], want: int) -> bool:
    """Whether ``uid``/``gids`` have the permission bits ``want`` (4 r, 2 w, 1 x) by mode bits."""
    if uid == 0:
        return want != 1 or bool(st.st_mode & 0o111) or stat.S_ISDIR(st.st_mode)
    if st.st_uid == uid:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid in gids:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & want == want


def access_problem(path: str, uid: int, gids: set[int], want: int = 1) -> str | None:
    """Why ``uid`` (in ``gids``) cannot use ``path`` (want 1: execute or enter, 4: read), by the mode
    bits of the path and every directory on the way, symlinks followed; None when it can."""
    seen: set[str] = set()

    def walk(p: str, final_want: int) -> str | None:
        parts = Path(p).parts
        current = Path("/")
        for i, part in enumerate(parts[1:], 1):
            try:
                st_dir = os.stat(current)
            except OSError as exc:
                return f"{current}: {exc.strerror}"
            if not _allowed(st_dir, uid, gids, 1):
                return f"{current} is not searchable"
            current = current / part
            if os.path.islink(current) and str(current) not in seen:
                seen.add(str(current))
                target = os.path.realpath(current)
                rest = Path(target, *parts[i + 1 :])
                return walk(str(rest), final_want)
        try:
            st = os.stat(current)
        except OSError as exc:
            return f"{current}: {exc.strerror}"
        if not _allowed(st, uid, gids, final_want):
            what = {1: "executable", 4: "readable"}.get(final_want, "readable and executable")
            return f"{current} is not {what}"
        return None

    return walk(os.path.abspath(path), want)


def mount_problem(path: str, uid: int, gids: set[int]) -> str | None:
    """Why ``uid`` (in ``gids``) cannot reach the directory ``path`` on the host: a directory on the
    way to where it leads (symlinks followed) that it cannot search; None when it can. What an
    engine binds into a container it binds as root, following symlinks: a mount whose path the
    owner can change (``/scratch/{user}`` in a world-writable ``/scratch``) made into a symlink
    gave the container a directory under another owner's 0700 home (iso58; docs/isolation.md). The
    directory itself keeps its own mode in the container, so only the way to it is checked."""
    return access_problem(path, uid, gids, 0)  # want 0: nothing of the directory itself


_OPEN_AS_OWNER = """
import os, socket, sys
s = socket.socket(fileno=int(sys.argv[1]))
os.setgroups([int(g) for g in sys.argv[4].split(",") if g])  # the owner's whole identity, for good:
os.setgid(int(sys.argv[3]))  # started as the agent's user (it may run this interpreter, the owner
os.setuid(int(sys.argv[2]))  # may not), nothing is looked up before this
fds = []
for p in sys.argv[5:]:
    try:
        fds.append(os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
    except OSError as exc:
        s.sendall(b"fail " + os.fsencode(p) + b"\\0" + exc.strerror.encode())
        sys.exit(1)
socket.send_fds(s, [b"ok"], fds)
"""


def open_dirs_as(ident: Identity, paths: list[str], timeout_s: float = 30.0) -> list[int]:
    """``paths`` opened (``O_PATH``, directories) by a child that drops to ``ident`` for good before
    it looks anything up: each component with the owner's own permissions, symlinks followed as the
    owner may follow them, at this moment. The descriptors come back over a socket (``SCM_RIGHTS``).

    Raises:
        OSError: a path the owner cannot reach (``filename``: which one, ``strerror``: why).
    """
    import socket
    import sys

    if not paths:
        return []
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours:
        try:
            child = subprocess.Popen(  # noqa: S603 -- this interpreter, a fixed program
                [sys.executable, "-I", "-c", _OPEN_AS_OWNER, str(theirs.fileno()), str(ident.uid), str(ident.gid),
                 ",".join(str(g) for g in ident.groups), *paths],
                pass_fds=(theirs.fileno(),), env={}, cwd="/", stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        finally:
            theirs.close()
        ours.settimeout(timeout_s)
        try:
            msg, fds, _flags, _addr = socket.recv_fds(ours, 4096, len(paths))
        except OSError:
            child.kill()
            raise
        finally:
            child.wait()
    if msg != b"ok" or len(fds) != len(paths):
        for fd in fds:
            os.close(fd)
        path, _, why = msg.removeprefix(b"fail ").partition(b"\0")
        if not why:
            raise OSError(errno.EACCES, "the owner's lookup ended without an answer")
        raise OSError(errno.EACCES, why.decode(errors="replace"), os.fsdecode(path))
    return fds


_MS_BIND, _MS_REC, _MNT_DETACH = 0x1000, 0x4000, 2


def _libc_mount_call(name: str, *args: Any) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def stage_dirs_as(ident: Identity, paths: list[str], staging: Path) -> list[Path]:
    """The directories ``paths`` as ``ident`` reaches them now (:func:`open_dirs_as`), each bound
    (as root) at ``staging/<n>``: a path of root's own directories, which nobody else can change,
    for the container engine to bind in their place. The engine binds what it is given as root,
    following symlinks, after the agent's check: a component of a mount's path that its owner
    swapped for a symlink in between gave a container a directory under another owner's 0700 home
    (iso61; docs/isolation.md). :func:`unstage` removes them (the engine's bind of each holds on).

    Raises:
        OSError: a path the owner cannot reach (``filename`` set), or a bind that failed.
    """
    fds = open_dirs_as(ident, paths)
    made: list[Path] = []
    try:
        staging.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        staging.mkdir(mode=0o700)
        for n, fd in enumerate(fds):
            target = staging / str(n)
            target.mkdir(mode=0o700)
            source = f"/proc/self/fd/{fd}".encode()
            try:
                _libc_mount_call("mount", source, os.fsencode(target), None, _MS_BIND | _MS_REC, None)
            except OSError as exc:  # e.g. an agent without CAP_SYS_ADMIN in its mount namespace
                raise OSError(exc.errno, f"cannot bind it for the engine: {exc.strerror}", paths[n]) from None
            made.append(target)
    except OSError:
        unstage(staging)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return made


def unstage(staging: Path) -> None:
    """Unmount and remove what :func:`stage_dirs_as` made under ``staging`` (also what an agent that
    died in the middle of a start left); never follows a symlink, never removes a mount's files."""
    if not staging.is_dir() or staging.is_symlink():
        return
    for target in staging.iterdir():
        with contextlib.suppress(OSError):
            _libc_mount_call("umount2", os.fsencode(target), _MNT_DETACH | 8)  # UMOUNT_NOFOLLOW
        with contextlib.suppress(OSError):
            target.rmdir()  # an empty directory once unmounted; else kept (never its files)
    with contextlib.suppress(OSError):
        staging.rmdir()


RUN_TMPFS = "fairway-run"
"""The source name of a container's run directory's tmpfs (:func:`mount_run_tmpfs`), as its
``mountinfo`` shows it."""


def mount_run_tmpfs(run_dir: Path, uid: int, gid: int, mode: int) -> None:
    """Mount a small tmpfs of the attempt's own on its run directory ``run_dir`` (root ``uid:gid``,
    ``mode``; nosuid, nodev, noexec), which the engine binds at ``/run/fairway``: a bind's root is
    printed in the container's ``mountinfo`` as the bound directory's path within its file system,
    and ``<state>/attempts/<id>.d`` named the agent's state directory (iso48); a tmpfs's is ``/``.
    :func:`unmount_run_tmpfs` removes it once the container is gone (the engine's bind holds on).

    Raises:
        OSError: the mount failed (e.g. an agent without ``CAP_SYS_ADMIN``).
    """
    opts = f"size=64k,nr_inodes=64,mode={mode:o},uid={uid},gid={gid}"
    _libc_mount_call("mount", RUN_TMPFS.encode(), os.fsencode(run_dir), b"tmpfs", 2 | 4 | 8, opts.encode())


def unmount_run_tmpfs(run_dir: Path) -> None:
    """Unmount :func:`mount_run_tmpfs`'s tmpfs from ``run_dir``, if one is there (also one that an
    agent that died left); never follows a symlink."""
    with contextlib.suppress(OSError):
        if not run_dir.is_symlink() and os.path.ismount(run_dir):
            _libc_mount_call("umount2", os.fsencode(run_dir), _MNT_DETACH | 8)  # UMOUNT_NOFOLLOW


def usable_by_others(path: str) -> bool:
    """Whether an unprivileged account of its own could run the program ``path`` (e.g. the Python
    of a development checkout under a 0700 home is not): the demo and e2e tests ask this."""
    import sys

    problem = access_problem(path, 2**31 - 3, set(), 1)
    if problem is None and os.path.realpath(path) == os.path.realpath(sys.executable):
        problem = access_problem(os.path.join(sys.base_prefix, "lib"), 2**31 - 3, set(), 1)
    return problem is None


# --- identities -------------------------------------------------------------------------------------


def account_name(prefix: str, user: str) -> str:
    """The dedicated account of Fairway user ``user``: ``prefix`` + the name in [a-z0-9_-], at most
    32 characters (a short hash keeps names that had to be changed distinct)."""
    clean = _NAME_RE.sub("-", user.lower())
    name = prefix + clean
    if clean != user or len(name) > 32 or not clean:
        digest = hashlib.sha256(user.encode()).hexdigest()[:6]
        name = f"{prefix}{clean[: 32 - len(prefix) - 7]}-{digest}"
    return name


def account_gecos(user: str) -> str:
    """The GECOS field of ``user``'s dedicated account: names its Fairway user (checked on reuse)."""
    return "Fairway user " + "".join(c for c in user if c.isprintable() and c not in ":,=\\")[:200]


def dedicated_owner(pw: pwd.struct_passwd) -> str | None:
    """The GECOS of a dedicated account (``Fairway user <name>``), None for any other account."""
    return pw.pw_gecos if pw.pw_gecos.startswith("Fairway user ") else None


_account_lock = threading.Lock()
ACCOUNT_LOCK_FILE = Path("/run/fairway-agent-accounts.lock")
"""Serializes account creation between the agents of one host (the demo runs four). In ``/run``,
which only root writes: not ``/run/lock``, world-writable on Debian, where an attempt held the
lock (every start of a dedicated account of the host waited) or made it a symlink through which
root created a file (iso58; :func:`_open_account_lock`)."""


def _open_account_lock(path: Path) -> int | None:
    """``path`` opened for the account lock: the agent's own regular file, never through a symlink,
    made if missing; None (warned) when anything else lies there: account making then goes on
    unlocked, never blocked by whoever put it there (iso58)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        log.warning("no account lock %s: %s", path, exc.strerror)
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        log.warning("no account lock: %s is not the agent's own regular file (uid %d)", path, st.st_uid)
        return None
    return fd


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True)  # noqa: S603 -- fixed programs, checked names


def ensure_account(prefix: str, user: str, uid_range: tuple[int, int]) -> pwd.struct_passwd:
    """The dedicated account of ``user``, created (uid = gid, from ``uid_range``, no home, no login
    shell) if it does not exist yet; reused otherwise.

    Raises:
        IdentityError: it exists outside ``uid_range``, the range is full or useradd failed.
    """
    import fcntl
    import grp

    name = account_name(prefix, user)
    lo, hi = uid_range
    with _account_lock, contextlib.ExitStack() as stack:
        if (lock := _open_account_lock(ACCOUNT_LOCK_FILE)) is not None:
            stack.callback(os.close, lock)
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            pass
        else:
            if not lo <= pw.pw_uid <= hi:
                raise IdentityError(f"account {name} has uid {pw.pw_uid}, outside uid_range [{lo}, {hi}]")
            other = dedicated_owner(pw)
            if other is not None and other != account_gecos(user):
                raise IdentityError(f"account {name} belongs to another Fairway user ({other})")
            return pw
        used = {p.pw_uid for p in pwd.getpwall()} | {g.gr_gid for g in grp.getgrall()}
        free = next((u for u in range(lo, hi + 1) if u not in used), None)
        if free is None:
            raise IdentityError(f"no free uid left in uid_range [{lo}, {hi}] for {name}")
        try:
            try:
                group_existed = grp.getgrnam(name).gr_gid
            except KeyError:
                group_existed = None
                _run("groupadd", "-g", str(free), name)
            gid = free if group_existed is None else group_existed
            _run("useradd", "-u", str(free), "-g", str(gid), "-M", "-d", "/nonexistent", "-s", "/usr/sbin/nologin",
                 "-c", account_gecos(user), name)  # fmt: skip
        except FileNotFoundError as exc:
            raise IdentityError(f"cannot create account {name}: {exc.filename} not found") from None
        except subprocess.CalledProcessError as exc:
            raise IdentityError(f"cannot create account {name}: {(exc.stderr or '').strip()[:300]}") from None
        log.info("created account %s (uid %d) for Fairway user %s", name, free, user)
        return pwd.getpwnam(name)


@dataclass(slots=True)
class Isolation:
    """The agent's isolation: identity resolution and the cgroup setup, shared by its runtimes."""

    config: IsolationConfig = field(default_factory=IsolationConfig)
    cgroups: CgroupSetup | None = None
    limits: LimitSetup | None = None
    devices: DeviceSetup | None = None
    sockets: str | None = None  # "": abstract unix sockets and signals kept to each attempt (Landlock), else why not
    proc: str | None = None  # "": each attempt gets a /proc showing only its own processes, else why not
    cgroupns: str | None = None  # "": each attempt gets a cgroup namespace and tree of its own, else why not
    min_gid: int = 0  # admin-set gids below it need both root consents (config.min_gid, else the host's GID_MIN)

    def __post_init__(self) -> None:
        if not self.min_gid:
            self.min_gid = self.config.min_gid or first_normal_gid()
        if self.cgroups is None:
            self.cgroups = detect_cgroups(self.config.cgroup, self.config.cgroup_parent)
        if self.limits is None:
            self.limits = detect_limits(self.cgroups)
        if self.devices is None:
            self.devices = detect_devices(self.cgroups)
        if self.sockets is None:
            self.sockets = "the agent is not root" if not self.is_root else landlock_scope_problem()
        if self.proc is None:
            self.proc = "the agent is not root" if not self.is_root else private_proc_problem()
        if self.cgroupns is None:
            self.cgroupns = "the agent is not root" if not self.is_root else cgroup_ns_problem(self.cgroups)

    @property
    def is_root(self) -> bool:
        return os.geteuid() == 0

    def _agent_identity(self) -> Identity:
        uid = os.geteuid()
        try:
            pw = pwd.getpwuid(uid)
            user, home = pw.pw_name, pw.pw_dir
        except KeyError:
            user, home = str(uid), "/"
        return Identity(uid, os.getegid(), tuple(os.getgroups()), user, home, "agent", switch=False)

    def resolve(self, name: str | None, uid: int | None = None, gid: int | None = None,
                groups: tuple[int, ...] = (), *, cluster_allows_root: bool | None = None) -> Identity:  # fmt: skip
        """The identity of an attempt of Fairway user ``name`` (admin-set ``uid``/``gid``/``groups``).

        uid 0 needs both the cluster's consent (``cluster_allows_root``: ``start.allow_root``, the
        cluster's ``allow_root_workloads``) and the host's (``isolation.allow_root``); None (a
        server older than the field) leaves it to the host's setting alone.

        Raises:
            IdentityError: no owner where one is needed, uid 0 or an admin-set system uid (below
                ``nss_min_uid``) or system gid (0 or below ``min_gid``) without both consents, an
                account that cannot be made.
        """
        cfg = self.config
        if cfg.mode == "agent" or not self.is_root:
            ident = self._agent_identity()
        elif uid is not None:
            try:
                pw = pwd.getpwuid(uid)
                user, home, default_gid = pw.pw_name, pw.pw_dir, pw.pw_gid
            except KeyError:
                user, home, default_gid = name or str(uid), "", uid
            else:
                other = dedicated_owner(pw)
                if other is not None and other != account_gecos(name or ""):
                    raise IdentityError(f"uid {uid} is the dedicated account {pw.pw_name} of another user ({other})")
            ident = Identity(uid, default_gid if gid is None else gid, tuple(groups), user, home, "admin")
            if (
                uid != 0
                and system_ids([uid], cfg.nss_min_uid)
                and not (cfg.allow_root and cluster_allows_root is not False)
            ):
                # A system account (postgres, www-data, a service's), never taken by name either
                # (brk41: the server's uid was used whatever it was); root-equivalent to the host.
                raise IdentityError(
                    f"refusing to run an attempt as uid {uid} ({user}), a system account below isolation.nss_min_uid"
                    f" ({cfg.nss_min_uid}): it needs both root consents, or a lower nss_min_uid"
                )
            # The same for the groups an admin set (sec41): a system group (disk, docker, shadow,
            # gid 0) is root-equivalent on the host. A passwd entry's own primary group is the host's.
            admin_gids = ((gid,) if gid is not None else ()) + tuple(groups)
            system = system_ids(admin_gids, self.min_gid)
            if system and not (cfg.allow_root and cluster_allows_root is not False):
                raise IdentityError(
                    f"refusing to run an attempt with group {', '.join(map(group_label, system[:5]))}, a system"
                    f" group below isolation.min_gid ({self.min_gid}): root-equivalent on the host, it needs"
                    " both root consents (or a lower isolation.min_gid; gid 0 always needs them)"
                )
        elif not name:
            raise IdentityError("the start names no owner: this agent runs attempts only as their owner")
        else:
            ident = None
            if cfg.nss:
                with contextlib.suppress(KeyError):
                    pw = pwd.getpwnam(name)  # NSS: /etc/passwd, LDAP, sssd (what getent passwd asks)
                    # Not system accounts, nor another user's dedicated one (a user named fw-bob).
                    if pw.pw_uid >= cfg.nss_min_uid and dedicated_owner(pw) is None:
                        extra = tuple(g for g in os.getgrouplist(name, pw.pw_gid) if g != pw.pw_gid)
                        ident = Identity(pw.pw_uid, pw.pw_gid, extra, pw.pw_name, pw.pw_dir, "nss")
            if ident is None:
                pw = ensure_account(cfg.account_prefix, name, cfg.uid_range)
                ident = Identity(pw.pw_uid, pw.pw_gid, (), pw.pw_name, "", "dedicated")
        if ident.uid == 0 and cluster_allows_root is False:
            raise IdentityError("refusing to run an attempt as root (the cluster's allow_root_workloads is off)")
        if ident.uid == 0 and not cfg.allow_root:
            raise IdentityError("refusing to run an attempt as root (isolation.allow_root is false)")
        return ident

    def status(self) -> dict[str, Any]:
        """The host's isolation state (``<state>/isolation.json``, logged at start): how attempts
        run and the warnings an operator must see."""
        assert self.cgroups is not None  # noqa: S101 -- set in __post_init__
        warnings: list[str] = []
        if self.config.mode == "agent":
            warnings.append(
                "isolation.mode is agent: every attempt runs as the agent's own user, and can read the "
                "agent's token, state and the environment of every other attempt"
            )
        elif not self.is_root:
            warnings.append(
                f"the agent does not run as root: attempts run as its own user "
                f"({self._agent_identity().user}), not as their owners, and can read each other's environment "
                "and the agent's token"
            )
        if self.cgroups.kind == "none":
            warnings.append(
                f"no usable cgroup ({self.cgroups.note}): a stop kills the attempt's process tree "
                "(the wrapper is a child subreaper), which misses a process whose wrapper was killed by others"
            )
        assert self.limits is not None  # noqa: S101 -- set in __post_init__
        if self.limits.kind == "none":
            warnings.append(
                f"CPU and memory requests are not enforced by the process runtime here ({self.limits.note}): "
                "attempts can use more than they asked"
            )
        if self.limits.pids == "none" and self.config.pids_max:
            warnings.append(
                f"no pids limit for attempts ({self.limits.pids_note}): one attempt can fork until the host's "
                "process table is full (isolation.pids_max is not enforced)"
            )
        assert self.devices is not None  # noqa: S101 -- set in __post_init__
        if self.devices.kind == "none" and self.is_root and self.config.mode == "owner":
            warnings.append(
                f"no device filter for attempts ({self.devices.note}): the host's other GPUs are hidden by "
                "path only, and a workload that reaches another GPU's device node by another path "
                "(/proc/<pid>/root of a process of its owner) opens it"
            )
        return {
            "mode": self.config.mode,
            "agent_uid": os.geteuid(),
            "identity": "agent" if self.config.mode == "agent" or not self.is_root else "owner",
            "cgroup": self.cgroups.kind,
            "cgroup_parent": str(self.cgroups.parent or ""),
            "cgroup_note": self.cgroups.note,
            "limits": self.limits.kind,
            "pids": self.limits.pids if self.config.pids_max else "off",
            "pids_max": self.config.pids_max,
            "devices": self.devices.kind,
            "abstract_sockets": "private" if not self.sockets else f"shared ({self.sockets})",
            "signals": "private" if not self.sockets else f"shared ({self.sockets})",
            "processes": "private" if not self.proc else f"shared ({self.proc})",
            "cgroup_tree": "private" if not self.cgroupns else f"shared ({self.cgroupns})",
            "container_network": self.config.container_network,
            "allow_root": self.config.allow_root,
            "warnings": warnings,
        }


def attempt_env(spec_env: Mapping[str, str], ident: Identity, agent_path: str | None) -> dict[str, str]:
    """The attempt's environment: its own variables and a minimal PATH, HOME, USER and LOGNAME
    (nothing of the agent's; ``PATH`` is the agent's own only when it runs as the agent's user)."""
    base = {
        "PATH": (agent_path or DEFAULT_PATH) if not ident.switch else DEFAULT_PATH,
        "HOME": ident.home if ident.home and os.path.isdir(ident.home) else "/",
        "USER": ident.user,
        "LOGNAME": ident.user,
    }
    base.update(spec_env)
    return base


TMPFS_PRIVATE = ("/tmp", "/dev/shm")  # noqa: S108 -- made private, not used
"""Where each attempt of a root agent gets a fresh tmpfs of its own (docs/isolation.md)."""
RUN_LOCK = "/run/lock"
"""The host's lock directory (``/var/lock``): world-writable on Debian and Ubuntu, where each attempt
then gets a small tmpfs of its own there too (iso61: one owner's attempt read the file another's had
left there, which stayed on the host after both ended)."""


def shared_run_lock(path: str = RUN_LOCK) -> str:
    """``path`` resolved when it is a world-writable directory (so shared between attempts), else ''."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return ""
    return real if stat.S_ISDIR(st.st_mode) and st.st_mode & 0o002 else ""


PRIVATE_TMP = (*TMPFS_PRIVATE, "/var/tmp")  # noqa: S108 -- made private, not used
"""Where each attempt of a root agent gets a directory of its own: the tmpfs above, and on /var/tmp a
disk-backed directory of its own (:func:`make_private_var_tmp`)."""

VAR_TMP_PREFIX = "fairway-attempt-"


def make_private_var_tmp(attempt_id: int, host: str = "/var/tmp") -> Path | None:  # noqa: S108
    """A new directory of the attempt's on the host's /var/tmp (``host``, resolved), as systemd's
    PrivateTmp makes one: ``<host>/fairway-attempt-<id>-<random>`` (root's, mode 0700: no one else
    on the host reaches it) holding ``tmp/`` (mode 1777), which the wrapper binds over /var/tmp in
    the attempt's mount namespace. Disk-backed, on the file system the host gives /var/tmp (not a
    tmpfs: /var/tmp holds scratch data too large for memory). None where there is nothing to make
    private: no /var/tmp, one that is /tmp or /dev/shm (private already), or a read-only one.
    Raises OSError when it cannot be made (the start then fails)."""
    real = os.path.realpath(host)
    if not os.path.isdir(real) or any(real == t or real.startswith(t + "/") for t in TMPFS_PRIVATE):
        return None
    try:
        base = Path(tempfile.mkdtemp(prefix=f"{VAR_TMP_PREFIX}{attempt_id}-", dir=real))  # a new name, 0700
    except OSError as exc:
        if exc.errno == errno.EROFS:
            return None
        raise
    try:
        (base / "tmp").mkdir()
        os.chmod(base / "tmp", 0o1777)  # noqa: S103 -- as /var/tmp: the attempt's own, sticky
    except OSError:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return base


def private_tmp_keep(paths: list[str], roots: tuple[str, ...] = TMPFS_PRIVATE) -> list[str]:
    """The paths of ``paths`` (resolved) that lie under ``roots`` (/tmp, /dev/shm, /var/tmp where it
    is made private), which the wrapper binds back into the attempt's private ones; none inside
    another (binding it would write to the host's), nor the roots themselves (the attempt then
    starts in its private one)."""
    under = sorted({r for r in map(os.path.realpath, paths) if any(r.startswith(t + "/") for t in roots)})
    keep: list[str] = []
    for path in under:
        if not any(path.startswith(k + "/") for k in keep):
            keep.append(path)
    return keep
