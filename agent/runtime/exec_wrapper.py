"""A one-shot command in a running attempt of the ``process`` runtime (``fairway exec``, its
``-it`` session and a forwarded port's connection): run by the agent, as its own user (usually
root), as ``python -I <this file> FD STATUS MNT IPC CGROUP PID UID GID GROUPS COMMAND...``.

Run by path, as the attempt's wrapper (:mod:`agent.runtime.attempt_init`) is: its command line,
world-readable in ``/proc/<pid>/cmdline`` on the host and, from its fork in the attempt's PID
namespace to the command's exec, inside the attempt, is this file's path and its arguments (iso48:
it was ``python -I -c <this whole source>``). Standard library only, never the agent's package.

What it does is described at :data:`agent.runtime.process.EXEC_WRAPPER`.
"""

import contextlib
import ctypes
import fcntl
import json
import os
import signal
import sys
import termios
import time
import warnings  # noqa: F401 -- os.execvpe's (get_exec_path): imported as root, the owner may not read the agent's Python (try51)

fd, status, mnt, ipc, cgns, pid, uid, gid, groups, cmd = *map(int, sys.argv[1:7]), *sys.argv[7:10], sys.argv[10:]
chunks = []
while chunk := os.read(fd, 1 << 16):
    chunks.append(chunk)
os.close(fd)
go = b"".join(chunks)
if go[:1] != b"1":
    sys.exit(125)
go = json.loads(go[1:])
if go.get("connect"):  # imported as root: the owner may not read the agent's Python
    import array  # noqa: F401 -- socket.send_fds's
    import socket
    from importlib.util import module_from_spec, spec_from_file_location

    # its peer-uid check (brk62): the file beside this one (agent.runtime.base.PEER_UID_CHECK)
    found = spec_from_file_location("peer_uid", os.path.join(os.path.dirname(__file__), "peer_uid.py"))
    assert found is not None and found.loader is not None  # noqa: S101 -- the agent's own file
    peer_uid = module_from_spec(found)
    found.loader.exec_module(peer_uid)
    peer_uid_problem = peer_uid.peer_uid_problem
libc = ctypes.CDLL(None, use_errno=True)


def check(r, what):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def kids():
    table = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as f:
                    t = f.read()
            except OSError:
                continue
            table.setdefault(int(t[t.rfind(")") + 2 :].split()[1]), []).append(int(e))
    out, todo = [], [os.getpid()]
    while todo:
        for c in table.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def own_terminal():  # the session's controlling terminal, the command's own as login's: /dev/tty opens for it
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    if uid != "-":  # (the agent opened it as root)
        os.fchown(0, int(uid), -1)


def hang_up(child):  # a terminal's hangup (exec_tty's close) is the command's
    with contextlib.suppress(OSError):
        os.kill(child, signal.SIGHUP)


def reap(child):  # the command's end: what it left behind is killed, then its exit code is ours
    code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    for _ in range(200):
        if not (left := kids()):
            break
        for p in left:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.005)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
    sys.exit(128 - code if code < 0 else code)


try:
    if go.get("tty") and pid < 0:  # an interactive session's terminal (stdin, stdout, stderr): its controlling one
        own_terminal()
    for ns, what in ((ipc, "IPC"), (cgns, "cgroup"), (pid, "PID"), (mnt, "mount")):
        if ns >= 0:
            check(libc.setns(ns, 0), f"enter the attempt's {what} namespace")
            os.close(ns)
    if pid >= 0:
        # The PID namespace is its children's (pidns61): this stays outside, the command's parent (its
        # exit code is ours), as the agent's user; the agent's stop signals the command itself.
        check(libc.prctl(1, signal.SIGKILL, 0, 0, 0), "parent death signal")
        if (child := os.fork()) != 0:
            os.close(status)
            for s in (signal.SIGTERM, signal.SIGINT):
                signal.signal(s, lambda *_: None)
            signal.signal(signal.SIGHUP, lambda *_: hang_up(child))  # as the reaper's, below
            code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
            os._exit(128 - code if code < 0 else code)
        if go.get("tty"):  # a session of its own in the namespace: a shell's process groups are all seen there
            os.setsid()
            own_terminal()
    if go["scope"]:
        libc.syscall.restype = ctypes.c_long
        attr = (ctypes.c_uint64 * 3)(0, 0, 1 | 2)
        rfd = libc.syscall(ctypes.c_long(444), attr, ctypes.c_size_t(24), ctypes.c_uint32(0))
        if rfd < 0:
            check(-1, "landlock_create_ruleset")
        check(libc.syscall(ctypes.c_long(446), ctypes.c_int(rfd), ctypes.c_uint32(0)), "landlock_restrict_self")
        os.close(rfd)
    if go["reap"]:
        # No cgroup (the process-tree fallback): nothing would find what the command leaves behind
        # (a setsid daemon), so this stays its subreaper, as the agent's user (the command, as its
        # owner, cannot kill it), and kills what is left when the command ends.
        check(libc.prctl(36, 1, 0, 0, 0), "subreaper")  # PR_SET_CHILD_SUBREAPER
        check(libc.prctl(1, signal.SIGKILL, 0, 0, 0), "parent death signal")
        if (child := os.fork()) != 0:
            os.close(status)  # the command's own copy says how its setup went
            # a terminal's hangup (exec_tty's close) is the command's: passed on, its end ends this
            signal.signal(signal.SIGHUP, lambda *_: os.kill(child, signal.SIGHUP))
            reap(child)
    if os.geteuid() == 0:
        c = 0
        while (r := libc.prctl(23, c, 0, 0, 0)) >= 0:
            if r and not go["caps"] >> c & 1:
                check(libc.prctl(24, c, 0, 0, 0), f"drop capability {c}")
            c += 1
        head, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()
        check(libc.capget(head, data), "capget")
        data[2] &= go["caps"] & 0xFFFFFFFF
        data[5] &= go["caps"] >> 32
        check(libc.capset(head, data), "capset")
        check(libc.prctl(47, 4, 0, 0, 0), "clear the ambient capabilities")
    if uid != "-":
        os.setgroups([int(g) for g in groups.split(",") if g])
        os.setresgid(int(gid), int(gid), int(gid))
        os.setresuid(int(uid), int(uid), int(uid))
        check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")
    os.chdir(go["cwd"])  # as the attempt's identity, as the attempt's wrapper enters it (iso58)
    check(libc.prctl(1, signal.SIGKILL, 0, 0, 0), "parent death signal")  # after the switch, which clears it
    os.umask(0o022)
except OSError as e:
    os.write(status, ("fail " + str(e))[:4000].encode(errors="replace"))
    os._exit(125)
if go.get("connect"):  # fairway port-forward: its connection, made here, handed to the agent on fd 0
    errors = []
    for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:  # no getaddrinfo: it would look up the idna codec, which the owner may not read
            conn = socket.socket(family, socket.SOCK_STREAM)
            conn.settimeout(10)
            conn.connect((address, go["connect"]))
            break
        except OSError as e:
            errors.append(e)
    else:
        os.write(status, ("refused " + (errors[0].strerror or str(errors[0])))[:4000].encode(errors="replace"))
        os._exit(111)
    if problem := peer_uid_problem(conn, family, address, go["connect"]):
        os.write(status, ("refused " + problem).encode(errors="replace"))
        os._exit(111)
    socket.send_fds(socket.socket(fileno=0), [b"1"], [conn.fileno()])
    os._exit(0)
os.set_inheritable(status, False)
for s in signal.valid_signals():  # an ignored signal stays ignored across exec: Python's SIGPIPE and
    if s not in (signal.SIGKILL, signal.SIGSTOP) and signal.getsignal(s) == signal.SIG_IGN:  # SIGXFSZ,
        signal.signal(s, signal.SIG_DFL)  # a nohup'd agent's SIGHUP; the command's are its own, as the attempt's
try:
    os.execvpe(cmd[0], cmd, go["env"])  # noqa: S606 -- the command, as the attempt runs its own
except OSError as e:
    print(f"fairway: cannot run {cmd[0]}: {e.strerror}", file=sys.stderr, flush=True)
    os._exit(127 if isinstance(e, FileNotFoundError) else 126)
