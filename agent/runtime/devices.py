"""A device filter for an attempt's cgroup v2: the eBPF program that refuses the character devices
of the host's other GPUs, whatever path reaches them (docs/isolation.md, "GPUs, process runtime").

cgroup v2 has no ``devices`` controller: device access is decided by programs of type
``BPF_PROG_TYPE_CGROUP_DEVICE`` attached to a cgroup, as runc (``libcontainer/cgroups/devices``),
crun and systemd (``DevicePolicy=``) do. No maintained Python library loads one (bcc needs a
compiler and kernel headers on every GPU host; pyroute2 and the libbpf bindings on PyPI do not),
so the program is written here as its few instructions and loaded with the ``bpf`` syscall through
ctypes. It is a deny list: every device is allowed but the character devices named, for every
access (read, write, mknod). :func:`allows` is the same rule stated plainly, and :func:`run_program`
interprets the instructions, so the property test compares them on any kernel.

The program reads ``struct bpf_cgroup_dev_ctx`` (``include/uapi/linux/bpf.h``): ``access_type``
(``access << 16 | type``), ``major``, ``minor``, three u32; it returns 1 to allow, 0 to refuse.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import signal
import stat
import struct
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path

BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_QUERY = 16
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6
BPF_F_ALLOW_MULTI = 2
BPF_DEVCG_DEV_CHAR = 2

log = logging.getLogger(__name__)

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
_ATTR_SIZE = 128  # the syscall's union bpf_attr, zero past the fields used (the kernel checks)

Device = tuple[int, int]
"""A character device: (major, minor)."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One ``struct bpf_insn``: opcode, dst and src registers (4 bits each), s16 offset, s32 imm."""
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


_LDX_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W: dst = *(u32 *)(src + off)
_AND_K = 0x57  # BPF_ALU64 | BPF_AND | BPF_K: dst &= imm
_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K: if dst != imm goto pc + 1 + off
_MOV_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K: dst = imm
_EXIT = 0x95  # BPF_JMP | BPF_EXIT: return r0


def program(denied: Sequence[Device]) -> bytes:
    """The filter's instructions: r2 = the device type, r3 = major, r4 = minor; for each denied
    (major, minor), five instructions that return 0 when all three match; else return 1."""
    out = [
        _insn(_LDX_W, dst=2, src=1, off=0),
        _insn(_AND_K, dst=2, imm=0xFFFF),
        _insn(_LDX_W, dst=3, src=1, off=4),
        _insn(_LDX_W, dst=4, src=1, off=8),
    ]
    for major, minor in denied:
        out += [
            _insn(_JNE_K, dst=2, off=4, imm=BPF_DEVCG_DEV_CHAR),
            _insn(_JNE_K, dst=3, off=3, imm=major),
            _insn(_JNE_K, dst=4, off=2, imm=minor),
            _insn(_MOV_K, dst=0, imm=0),
            _insn(_EXIT),
        ]
    out += [_insn(_MOV_K, dst=0, imm=1), _insn(_EXIT)]
    return b"".join(out)


def allows(denied: Iterable[Device], dev_type: int, major: int, minor: int) -> bool:
    """The rule, plainly: every device but the denied character devices (the oracle)."""
    return not (dev_type == BPF_DEVCG_DEV_CHAR and (major, minor) in set(denied))


def run_program(code: bytes, access_type: int, major: int, minor: int) -> int:
    """Interpret ``code`` (only the instructions :func:`program` writes) on one device access:
    what the kernel would return. For the property test; raises ValueError on anything else."""
    regs = [0] * 11
    ctx = (access_type, major, minor)
    pc = 0
    while True:
        code_, regs_, off, imm = struct.unpack_from("<BBhi", code, pc * 8)
        dst, src = regs_ & 0xF, regs_ >> 4
        pc += 1
        if code_ == _LDX_W and src == 1:
            regs[dst] = ctx[off // 4]
        elif code_ == _AND_K:
            regs[dst] &= imm
        elif code_ == _JNE_K:
            if regs[dst] != imm:
                pc += off
        elif code_ == _MOV_K:
            regs[dst] = imm
        elif code_ == _EXIT:
            return regs[0]
        else:
            raise ValueError(f"instruction {code_:#x} at {pc - 1}")


def char_devices(nodes: Iterable[str]) -> list[Device]:
    """The (major, minor) of each of ``nodes`` that is a character device (NVML's
    ``/dev/nvidia<minor>``, 195:minor), sorted, once each; files that are not (the fake backend's
    stand-in nodes) or are missing have no device to refuse."""
    out: set[Device] = set()
    for node in nodes:
        try:
            st = os.stat(node)
        except OSError:
            continue
        if stat.S_ISCHR(st.st_mode):
            out.add((os.major(st.st_rdev), os.minor(st.st_rdev)))
    return sorted(out)


def holders(held: Collection[Device], uid: int) -> dict[int, Device]:
    """The live processes of ``uid`` (its real, effective, saved or file-system uid) that hold one
    of the character devices ``held`` open (a descriptor) or mapped (``/proc/<pid>/map_files``,
    which a descriptor closed after its ``mmap`` leaves): pid → the device. Read as root (another
    user's ``fd`` and ``map_files`` are root's to list); what cannot be read is skipped."""
    found: dict[int, Device] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
            uids = status.split("\nUid:", 1)[1].split("\n", 1)[0].split()
        except (OSError, IndexError):
            continue
        if str(uid) not in uids:
            continue
        for kind in ("fd", "map_files"):
            try:
                names = os.listdir(f"/proc/{entry}/{kind}")
            except OSError:
                continue
            for name in names:
                try:
                    st = os.stat(f"/proc/{entry}/{kind}/{name}")
                except OSError:
                    continue
                device = (os.major(st.st_rdev), os.minor(st.st_rdev))
                if stat.S_ISCHR(st.st_mode) and device in held:
                    found[int(entry)] = device
                    break
            if int(entry) in found:
                break
    return found


def kill_device_holders(attempt_id: int, held: set[Device], uid: int, spared: Callable[[], set[int]]) -> None:
    """Kill every process of ``uid`` that holds one of the ended attempt's GPUs' devices ``held`` (a
    descriptor, or a mapping) but those ``spared`` (the processes of running attempts given one of
    those GPUs, read again at each pass), and wait until each is dead (pid63, iso48,
    docs/isolation.md): a descriptor passed out of the attempt over a Unix socket outlived it, and
    with it the GPU, which goes to the next workload; a device filter or device cgroup checks opens
    only. Each is logged as the attempt's."""
    for _ in range(5):  # a holder may pass it on meanwhile: until none is left
        given = spared()
        found = {pid: dev for pid, dev in holders(held, uid).items() if pid not in given}
        if not found:
            return
        for pid, (major, minor) in found.items():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            log.warning(
                "attempt %d: killed process %d (uid %d), which held its GPU's device %d:%d past its end "
                "(passed out of the attempt: docs/isolation.md)",
                attempt_id, pid, uid, major, minor,
            )  # fmt: skip
        for _ in range(200):  # dead (a zombie has closed its files) before the end is reported
            if not any(_alive(pid) for pid in found):
                break
            time.sleep(0.01)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie: a zombie has closed its files)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line[stat_line.rfind(")") + 2 :][:1] not in ("Z", "X", "")


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    """The ``bpf`` syscall; raises OSError with its errno."""
    number = _SYS_BPF.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"bpf: no syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    r = libc.syscall(ctypes.c_long(number), ctypes.c_int(cmd), attr, ctypes.c_uint(_ATTR_SIZE))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return int(r)


def load(denied: Sequence[Device]) -> int:
    """Load the filter refusing ``denied``; returns the program's fd (the caller closes it).
    Raises OSError (EPERM without CAP_BPF/CAP_SYS_ADMIN, EINVAL on a kernel without the type)."""
    code = program(denied)
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"Apache-2.0")
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into(
        "<IIQQ", attr, 0, BPF_PROG_TYPE_CGROUP_DEVICE, len(code) // 8, ctypes.addressof(insns),
        ctypes.addressof(license_),
    )  # fmt: skip
    struct.pack_into("16s", attr, 48, b"fairway_gpus")  # prog_name: what bpftool lists
    return _bpf(BPF_PROG_LOAD, attr)


def _query(cgroup_fd: int) -> tuple[int, int]:
    """(programs attached, their attach flags) of type BPF_CGROUP_DEVICE on one cgroup itself."""
    attr = ctypes.create_string_buffer(_ATTR_SIZE)
    struct.pack_into("<III", attr, 0, cgroup_fd, BPF_CGROUP_DEVICE, 0)
    _bpf(BPF_PROG_QUERY, attr)
    flags, _ids, count = struct.unpack_from("<IQI", attr, 12)
    return count, flags


def overriding_ancestor(cgroup: Path, root: Path) -> Path | None:
    """An ancestor of ``cgroup`` up to ``root`` (the cgroup2 mount, inclusive) with a device
    program attached without ``BPF_F_ALLOW_MULTI``, else None. Attached below one with
    ``BPF_F_ALLOW_OVERRIDE`` our program would replace its (e.g. a container runtime's device
    policy) instead of adding to it; below one with no flag the kernel refuses the attach."""
    for parent in [cgroup.parent, *cgroup.parent.parents]:
        if root != parent and root not in parent.parents:
            break
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            count, flags = _query(fd)
        finally:
            os.close(fd)
        if count and not flags & BPF_F_ALLOW_MULTI:
            return parent
    return None


def attach(cgroup: Path, denied: Sequence[Device], root: Path | None = None) -> None:
    """Attach the filter refusing ``denied`` to ``cgroup`` (a cgroup v2 directory), with
    ``BPF_F_ALLOW_MULTI``: the programs of its ancestors still apply, every one must allow. It lives
    as long as the cgroup (the agent may restart meanwhile). ``root``: the cgroup2 mount, to check
    that no ancestor's program would be overridden (:func:`overriding_ancestor`).

    Raises OSError: the kernel or the agent's privileges lack it, or an ancestor would be overridden."""
    if root is not None and (ancestor := overriding_ancestor(cgroup, root)) is not None:
        raise OSError(errno.EPERM, f"{ancestor} has a device program that a new one would override")
    prog = load(denied)
    try:
        _attach_fd(cgroup, prog, BPF_F_ALLOW_MULTI)
    finally:
        os.close(prog)


def _attach_fd(cgroup: Path, prog: int, flags: int) -> None:
    fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    try:
        attr = ctypes.create_string_buffer(_ATTR_SIZE)
        struct.pack_into("<IIII", attr, 0, fd, prog, BPF_CGROUP_DEVICE, flags)
        _bpf(BPF_PROG_ATTACH, attr)
    finally:
        os.close(fd)


def probe() -> str:
    """'' when this kernel and these privileges load a device filter, else why not (loads and
    frees one, attaches nothing)."""
    try:
        os.close(load([(195, 255)]))
    except OSError as exc:
        return f"cannot load a cgroup device filter (eBPF): {exc.strerror or exc}"
    return ""
