"""PID 1 of an attempt of the ``process`` runtime: the wrapper that the agent runs (as its own
user, usually root) for each attempt, as ``python -I <this file> EXIT_FILE -- COMMAND...``.

Its command line is what ``ps`` shows as PID 1 inside the attempt (its own PID namespace, pidns61;
``fairway exec ID -- ps -N -p 1 u``), as ``docker-init -- COMMAND`` in a container with ``--init``:
this file's path, the attempt's exit file and the attempt's command (pid63: it was the whole Python
source of the wrapper, ``python -I -c <source>``). Nothing secret is on it: the go (the attempt's
environment, identity, private /tmp, hidden GPUs, capability bounds) comes through a pipe, its
stdin, and the file itself is the agent's installed code, readable as any of its Python.

Run by path with ``-I`` (isolated: no PYTHONPATH, no user site, not even this file's directory on
``sys.path``), it imports the standard library only, never the agent's package: a root process
must not import what the workload's environment could point it at. The agent imports this module
for :data:`TMP_FALLBACK` only (:func:`main` runs as ``__main__``).

What it does is described at :data:`agent.runtime.process.ATTEMPT_INIT`.
"""

import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

TMP_FALLBACK = b"ok tmpdir"
"""The wrapper's "ok" where it could not make the private /tmp and set TMPDIR to its fallback."""


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(125)
    exit_file, cmd = sys.argv[1], sys.argv[3:]
    chunks = []
    while chunk := os.read(0, 1 << 16):  # the go: "1" and a JSON payload, from the agent's pipe
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDWR)  # the command's stdin, as before the pipe
    os.dup2(null, 0)
    os.close(null)
    go = b"".join(chunks)
    if go[:1] != b"1":
        sys.exit(125)
    go = json.loads(go[1:])
    status, (uid, gid, groups) = go["status"], go["ids"]
    env, tmp, hide = go["env"], go["tmp"], go["hide"]
    libc = ctypes.CDLL(None, use_errno=True)
    exit_dir, exit_name = os.open(os.path.dirname(exit_file), os.O_PATH | os.O_DIRECTORY), os.path.basename(exit_file)

    def check(r, what):
        if r != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    def as_owner_fs(fn):  # fn() with the owner's uid, gid and groups for its file accesses, then root's again
        if uid == "-":
            return fn()
        saved = os.getgroups()
        os.setgroups([int(g) for g in groups.split(",") if g] + [int(gid)])
        libc.setfsgid(int(gid))
        libc.setfsuid(int(uid))  # leaving fsuid 0 clears the file-system capabilities too
        try:
            return fn()
        finally:
            libc.setfsuid(0)
            libc.setfsgid(0)
            os.setgroups(saved)

    def detach_unreached():  # from the attempt's mount namespace: what its mountinfo named and it cannot use
        # A mount whose mount point its owner cannot reach (a directory on the way not searchable: a
        # container engine's storage, another owner's container's shm and overlay) and every namespace
        # handle (nsfs: a container's /run/netns/<name>) named other workloads and root's paths to it
        # (iso48); the owner reaches neither by path. Deepest first; one gone with its parent is skipped.
        with open("/proc/self/mountinfo", "rb") as f:
            table = [line.split(b" - ", 1) for line in f.read().splitlines()]
        points = []
        for head, *tail in table:
            point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), head.split()[4])
            if point != b"/":
                points.append((point, bool(tail) and tail[0].startswith(b"nsfs ")))

        def unreached(point):
            try:  # search permission on every directory above it, as the owner; the mount itself untouched
                os.stat(os.path.join(os.path.dirname(point), b"."))  # (a hung NFS server's would block)
            except PermissionError:
                return True
            except OSError:
                return False
            return False

        gone = as_owner_fs(lambda: [p for p, nsfs in points if nsfs or unreached(p)])
        for point in reversed(gone):
            libc.umount2(point, 2)  # MNT_DETACH; EINVAL: detached with a mount above it already

    def refuse(why):  # the attempt cannot start: its command never runs
        os.write(status, ("fail " + why)[:4000].encode(errors="replace"))
        sys.exit(125)

    def outside(init):  # the wrapper in the host's PID namespace: its init's exit code is its own
        os.close(status)  # the init's copy says how the setup went
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # as below: the stop reaches the command itself
            signal.signal(s, lambda *a: None)
        code = os.waitstatus_to_exitcode(os.waitpid(init, 0)[1])
        os._exit(128 - code if code < 0 else code)

    if hide.get("unfiltered"):  # the agent could not attach the device filter (docs/isolation.md)
        print(
            f"fairway: the host's other GPUs are hidden by path only ({hide['unfiltered']})",
            file=sys.stderr,
            flush=True,
        )
    fell_back = init = False  # init: PID 1 of the attempt's own PID namespace (pidns61)
    if tmp is not None:  # a private /tmp and /dev/shm, as systemd's PrivateTmp (docs/isolation.md)
        made = False
        try:
            here = os.getcwd()
            # A mount namespace and, as a container's private IPC, an IPC namespace (System V shared memory,
            # semaphores, message queues): both die with the attempt's last process.
            check(libc.unshare(0x00020000 | 0x08000000), "unshare(CLONE_NEWNS|CLONE_NEWIPC)")
            check(libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None), "make / private")  # MS_REC|MS_PRIVATE
            made = True  # from here on, a failure leaves a half-made /tmp (the host's, or one missing paths)
            if uid not in ("-", "0"):  # the host's mounts its owner cannot reach, named in its mountinfo (iso48)
                detach_unreached()
            if os.path.isdir("/dev/mqueue"):  # the host's POSIX queues by path: this namespace's instead
                check(libc.mount(b"mqueue", b"/dev/mqueue", b"mqueue", 2 | 4 | 8, None), "mqueue on /dev/mqueue")
            # In the new namespace (bindable), and with the owner's file-system identity: the agent resolved
            # them, but a component swapped for a symlink since then must not lead root where the owner
            # cannot reach (iso58: a directory under another owner's 0700 home bound into this /tmp).
            keep = as_owner_fs(lambda: [(p, os.open(p, os.O_PATH)) for p in tmp["keep"]])
            var = os.open(tmp["var"], os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW) if tmp["var"] else -1
            lock = ((tmp["lock"].encode(), b"mode=1777,size=5m"),) if tmp.get("lock") else ()  # as Debian's (iso61)
            for point, opts in ((b"/tmp", b"mode=1777"), (b"/dev/shm", tmp["shm"].encode()), *lock):
                check(libc.mount(b"tmpfs", point, b"tmpfs", 2 | 4, opts), f"tmpfs on {point.decode()}")  # nosuid,nodev
            if var >= 0:  # /var/tmp: the attempt's own directory on the host's disk (not memory), bound over it
                at = tmp["var_at"].encode()
                check(libc.mount(f"/proc/self/fd/{var}".encode(), at, None, 0x1000, None), "bind /var/tmp")  # MS_BIND
                keep_flags = os.statvfs(f"/proc/self/fd/{var}").f_flag & (1 | 8)  # the host's ro, noexec
                # MS_REMOUNT|MS_BIND|MS_NOSUID|MS_NODEV, as the tmpfs
                check(libc.mount(None, at, None, 0x20 | 0x1000 | 2 | 4 | keep_flags, None), "/var/tmp nosuid,nodev")  # noqa: S108 -- a message
                os.close(var)
            os.umask(0o066)  # the skeleton to kept paths (parents too): 0711, reachable, not listable
            for p, f in keep:  # what the attempt needs that lies under them (its directory, its program)
                if os.path.isdir(f"/proc/self/fd/{f}"):
                    os.makedirs(p, 0o711, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(p), 0o711, exist_ok=True)
                    os.close(os.open(p, os.O_WRONLY | os.O_CREAT, 0o600))
                check(libc.mount(f"/proc/self/fd/{f}".encode(), p.encode(), None, 0x1000 | 0x4000, None), f"bind {p}")
                os.close(f)
            for p in tmp["read_only"]:  # the catalog's read-only mounts (docs/jobs.md): each bound onto itself
                check(libc.mount(p.encode(), p.encode(), None, 0x1000 | 0x4000, None), f"bind mount {p}")  # MS_REC
                keep_flags = os.statvfs(p).f_flag & 8  # the host's noexec
                # MS_REMOUNT|MS_BIND|MS_RDONLY|MS_NOSUID|MS_NODEV; no command keeps CAP_SYS_ADMIN to undo it
                check(
                    libc.mount(None, p.encode(), None, 0x20 | 0x1000 | 1 | 2 | 4 | keep_flags, None), f"{p} read-only"
                )
            # the old working directory may be the host's /tmp, now hidden; after the binds, a working
            # directory in a read-only mount is the read-only one
            os.chdir(here)
        except OSError as e:
            if made:
                refuse(f"cannot make the private /tmp, /var/tmp and /dev/shm: {e}")
            print(
                f"fairway: no private /tmp, /var/tmp and /dev/shm ({e}): TMPDIR={tmp['dir']}",
                file=sys.stderr,
                flush=True,
            )
            env.setdefault("TMPDIR", tmp["dir"])
            fell_back = True  # said with "ok": the agent gives exec the same TMPDIR (left60)
            if hide["nodes"]:
                print(f"fairway: the host's other GPUs stay reachable ({e})", file=sys.stderr, flush=True)
        else:  # the other GPUs' device nodes: the stand-in over each, read-only (Slurm's ConstrainDevices)
            try:
                # The stand-in (root's, mode 000, empty) is a file of a tmpfs of the attempt's own, made on a
                # new directory of its fresh /dev/shm and detached from it once bound: the attempt's
                # mountinfo names it "/gpu" of "fairway-stand-in", not a path of the agent's (iso48).
                nodes = [p for p in hide["nodes"] if os.path.exists(p)]  # else unreachable here already
                if nodes:
                    at = f"/dev/shm/.fairway-stand-in-{os.getpid()}"  # noqa: S108 -- its own fresh tmpfs
                    os.mkdir(at, 0)
                    check(libc.mount(b"fairway-stand-in", at.encode(), b"tmpfs", 2 | 4 | 8, b"size=4k"), "stand-in")
                    os.close(os.open(f"{at}/gpu", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0))
                    for p in nodes:
                        check(libc.mount(f"{at}/gpu".encode(), p.encode(), None, 0x1000, None), f"hide {p}")  # MS_BIND
                        # MS_REMOUNT|MS_BIND|MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC
                        check(libc.mount(None, p.encode(), None, 0x20 | 0x1000 | 0xF, None), f"hide {p} read-only")
                    check(libc.umount2(at.encode(), 2), "detach the stand-in's tmpfs")  # MNT_DETACH: its binds stay
                    os.rmdir(at)
            except OSError as e:
                refuse(f"cannot hide the host's other GPUs: {e}")
            if tmp.get("cgroup"):  # a cgroup namespace at the attempt's cgroups, a tree of those only (iso46)
                try:  # before the PID namespace's fork: the wrapper outside it is in it too (exec enters its)
                    check(libc.unshare(0x02000000), "unshare(CLONE_NEWCGROUP)")
                except OSError as e:  # its cgroups' paths are the host's, the agent's cgroup in them
                    print(f"fairway: no cgroup namespace of the attempt's own ({e}): /proc/self/cgroup shows the"
                          " host's cgroup paths", file=sys.stderr, flush=True)  # fmt: skip
                try:
                    for point, own in tmp["cgroup"]:
                        at = point.encode()
                        if own:  # its own cgroup over the hierarchy (MS_BIND); read-only, as a container's
                            check(libc.mount(own.encode(), at, None, 0x1000, None), f"bind {own}")
                        else:  # none of its own there (the agent's cgroup, above other attempts'): an empty tmpfs
                            check(libc.mount(b"tmpfs", at, b"tmpfs", 0, b"mode=555,size=4k"), f"hide {point}")
                        # MS_REMOUNT|MS_BIND|MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC
                        check(libc.mount(None, at, None, 0x20 | 0x1000 | 0xF, None), f"{point} read-only")
                except OSError as e:  # the host's tree, or part of it, in view, as before
                    print(f"fairway: /sys/fs/cgroup shows the host's cgroup tree ({e})", file=sys.stderr, flush=True)
            if tmp.get("proc"):  # a PID namespace and a /proc of the attempt's own (pidns61, iso61)
                try:
                    check(libc.unshare(0x20000000), "unshare(CLONE_NEWPID)")
                except OSError as e:  # iso61's: the host's numbering, hiding what the attempt may not ptrace-read
                    opts = b"hidepid=invisible"
                    print(f"fairway: no PID namespace of the attempt's own ({e})", file=sys.stderr, flush=True)
                else:  # this process stays in the host's: its next child is PID 1 of the attempt's, its init
                    opts = None
                    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0 (the go, the env): both sides of the fork
                    if (pid1 := os.fork()) != 0:
                        outside(pid1)
                    init = True
                try:  # MS_NOSUID|MS_NODEV|MS_NOEXEC; a new instance (Linux 5.8): the host's /proc is untouched
                    check(libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, opts), "proc on /proc")
                except OSError as e:
                    print(f"fairway: /proc shows the host's other processes ({e})", file=sys.stderr, flush=True)
    elif hide["nodes"]:  # a non-root agent makes no mounts
        print(
            "fairway: the host's other GPUs stay reachable (the agent is not root: no mount namespace)",
            file=sys.stderr,
            flush=True,
        )
    if go["scope"]:  # a Landlock domain of the attempt's: no abstract unix socket made outside it, no signal out
        try:
            libc.syscall.restype = ctypes.c_long
            attr = (ctypes.c_uint64 * 3)(0, 0, 1 | 2)  # handled fs, handled net, scoped: ABSTRACT_UNIX_SOCKET|SIGNAL
            rfd = libc.syscall(ctypes.c_long(444), attr, ctypes.c_size_t(24), ctypes.c_uint32(0))  # create_ruleset
            if rfd < 0:
                check(-1, "landlock_create_ruleset")
            check(libc.syscall(ctypes.c_long(446), ctypes.c_int(rfd), ctypes.c_uint32(0)), "landlock_restrict_self")
            os.close(rfd)
        except OSError as e:
            refuse(f"cannot keep the abstract unix sockets and signals to the attempt: {e}")
    if os.geteuid() == 0:  # what a root command may keep: go["caps"], a bit mask
        try:
            c = 0
            while (r := libc.prctl(23, c, 0, 0, 0)) >= 0:  # PR_CAPBSET_READ; an error past the last one
                if r and not go["caps"] >> c & 1:
                    check(libc.prctl(24, c, 0, 0, 0), f"drop capability {c}")  # PR_CAPBSET_DROP
                c += 1
            head, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # v3: 2 × (eff, prm, inh)
            check(libc.capget(head, data), "capget")
            data[2] &= go["caps"] & 0xFFFFFFFF
            data[5] &= go["caps"] >> 32
            check(libc.capset(head, data), "capset")  # root's exec keeps its inheritable set: cut it too
            check(libc.prctl(47, 4, 0, 0, 0), "clear the ambient capabilities")  # PR_CAP_AMBIENT_CLEAR_ALL
        except OSError as e:
            refuse(f"cannot drop the capabilities of a root workload: {e}")
    os.write(status, TMP_FALLBACK if fell_back else b"ok")
    os.close(status)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: no core with the attempt's env; /proc/<pid> is root's
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *a: None)
    # The command writes into a pipe that this wrapper copies into the log (its own stdout), never into
    # the log file itself: with the file in hand it could fallocate() disk past its end (docs/isolation.md).
    # The log is held to the agent's cap (go["log_max"]) as it is copied, by the rule of the agent's own
    # periodic pass (agent.state.cap_log): past the cap on disk, all but its last half punched out of the
    # file's start (iso58: between two passes a flood reached GBs, written as root past the root reserve).
    out_r, out_w = os.pipe()
    libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]

    def pump():
        cap, since = go["log_max"], 0
        while data := os.read(out_r, 1 << 16):
            since += len(data)
            with contextlib.suppress(OSError):  # a full disk drops output; the command never blocks on it
                while data:
                    data = data[os.write(1, data) :]
            if since >= cap // 2:
                since = 0
                with contextlib.suppress(OSError):
                    st = os.fstat(1)
                    if st.st_blocks * 512 > cap and st.st_size > cap:
                        libc.fallocate(
                            1, 2 | 1, 0, st.st_size - cap // 2
                        )  # PUNCH_HOLE|KEEP_SIZE; else the agent's pass

    pumper = threading.Thread(target=pump, daemon=True)  # started once the command is forked: no thread at fork
    waited = {
        signal.SIGCHLD,
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGWINCH,
    }
    if init:  # reaps what is orphaned in the namespace, passes signals on
        signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # taken by sigtimedwait below (the pump thread too)
    kw = dict(umask=0o022, env=env, stdout=out_w, stderr=out_w)
    here = os.getcwd()  # entered as root (the agent's Popen): entered again as the owner, by its path

    def as_owner():  # in the child, past setuid: no_new_privs, and the working directory as the owner reaches it
        signal.pthread_sigmask(signal.SIG_SETMASK, ())  # the command's signals are its own again
        if uid != "-":
            libc.prctl(38, 1, 0, 0, 0)
            os.chdir(here)

    kw.update(preexec_fn=as_owner)
    if uid != "-":
        kw.update(user=int(uid), group=int(gid), extra_groups=[int(g) for g in groups.split(",") if g])
    try:
        child = subprocess.Popen(cmd, **kw)  # noqa: S603 -- the attempt's command
    except (OSError, ValueError) as e:  # ValueError: an env name or value Popen refuses
        print(f"fairway: cannot run {cmd[0]}: {e}", file=sys.stderr, flush=True)
        child = None
    except subprocess.SubprocessError:  # as_owner's chdir: a path swapped since the agent's check (iso58)
        print(f"fairway: cannot run {cmd[0]}: user {go['user']} cannot enter {here}", file=sys.stderr, flush=True)
        child = None
    os.close(out_w)
    pumper.start()

    def wait_as_init(child):  # PID 1: every orphan reaped; a signal sent to it from inside the attempt passed on
        while True:  # (the agent's stop signals every process itself: a second SIGTERM would cut trainers short)
            got = signal.sigtimedwait(waited, 1.0)
            if got is not None and got.si_signo != signal.SIGCHLD:
                if got.si_pid:  # 0: sent from outside the namespace (the agent, whose signal reached the command)
                    with contextlib.suppress(OSError):
                        os.kill(child.pid, got.si_signo)
                continue
            while True:
                try:
                    pid, st = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    pid = 0
                if pid == child.pid:
                    child.returncode = os.waitstatus_to_exitcode(st)
                    return child.returncode
                if pid == 0:
                    break

    if child is None:
        code = 126
    else:
        rc = wait_as_init(child) if init else child.wait()
        code = 128 - rc if rc < 0 else rc
    with open("/proc/uptime") as f:
        up = f.read().split()[0]
    with os.fdopen(
        os.open(exit_name + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=exit_dir), "w"
    ) as f:
        f.write(f"{code} {up}\n")
    os.replace(exit_name + ".tmp", exit_name, src_dir_fd=exit_dir, dst_dir_fd=exit_dir)

    def kids():
        table = {}
        for e in os.listdir("/proc"):
            if e.isdigit():
                with contextlib.suppress(OSError):
                    t = open(f"/proc/{e}/stat").read()  # noqa: SIM115 -- closed at once (refcount)
                    table.setdefault(int(t[t.rfind(")") + 2 :].split()[1]), []).append(int(e))
        out, todo = [], [os.getpid()]
        while todo:
            for c in table.get(todo.pop(), []):
                out.append(c)
                todo.append(c)
        return out

    for _ in range(200):
        left = kids()
        if not left:
            break
        for p in left:
            with contextlib.suppress(OSError):
                os.kill(p, 9)
        time.sleep(0.005)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
    pumper.join(5)  # the output still in the pipe reaches the log before the agent sees the exit
    sys.exit(code)


if __name__ == "__main__":
    main()
