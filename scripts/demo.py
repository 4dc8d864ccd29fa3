#!/usr/bin/env python3
"""``make demo``: a whole Fairway on this machine, replaying a busy half-day of the Philly trace.

Steps (docs/demo.md explains the choices):

1. a fresh embedded database under ``var/demo/`` (SQLite; ``FAIRWAY_VAR_DIR``), ``migrate``;
2. ``seed_demo --hosts 4 --gpus 8 --tokens-out var/demo/tokens.json`` (budget tree, logins, hosts);
3. ``manage.py serve`` on 127.0.0.1:8000 (or a free port if 8000 is taken): web, websockets,
   in-process worker and clock;
4. four agents ``python -m agent run ... --gpus 8 --model H100 --heartbeat 1`` (fake H100s running
   real processes), state under ``var/demo/agents/hN``; waits until every host has heartbeated;
5. ``replay_trace`` of the 500 jobs from job 34805 (day 60), time scale 300, run-time cap 1 h;
6. prints the summary, the admin URL and the logins, then serves until Ctrl-C — or, with
   ``--exit`` (``make demo EXIT=1``), stops at once with the replay's exit code.

Every child runs in its own session, so Ctrl-C reaches only this script, which stops them in
order: replay, agents, the attempts the agents leave running (agents deliberately leave them:
DESIGN.md §5), server. This script is a child subreaper (Linux), so attempts orphaned by their
agent become its children and are found and stopped; children also get SIGTERM should this script
die (``PR_SET_PDEATHSIG``). Logs: ``var/demo/logs/``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from config.private_file import owner_only  # noqa: E402  (stdlib only; the settings' rule too)

DEMO_START_JOB = 34805  # first job of day 60: scripts/find_stretch.py
DEMO_JOBS = 500
DEMO_TIME_SCALE = 300.0  # trace seconds per real second: 13.1 h of submissions in 157 s
DEMO_MAX_DURATION = "1h"  # run-time cap in trace time (12 s real)
DEMO_WALL_TIME_SLACK = 20  # real seconds of wall-time limit beyond each job's run time (replay_trace)
LOGINS = (("admin", "fairway-admin", "operator: everything"), ("researcher", "fairway-demo", "member of every vc-*"))

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


SYSTEM_PYTHON = "/usr/bin/python3"
"""The workloads' Python where this one is unusable by other accounts: ``agent.standin`` needs only
the standard library (and the repository, its working directory)."""


@dataclass(frozen=True)
class DemoIsolation:
    """How the demo's attempts are isolated (docs/isolation.md): the agents' extra environment, the
    Python the workloads run, whether the cluster must allow root workloads."""

    agent_env: dict[str, str]
    workload_python: str
    allow_root: bool = False


def demo_isolation() -> DemoIsolation:
    """As root, agents run each user's attempts under a dedicated account ``fw-<user>``, which must
    be able to run the workloads' Python and enter the repository (their working directory). A
    development Python under a private home (e.g. /root, mode 0700) cannot be run by it: the
    workloads then run the system's Python. Without a usable one, attempts run as the agents' own
    user (root: the cluster allows root workloads), and the demo says so. Not root: attempts run as
    the agents' user, with the warning in each host's state."""
    from agent.runtime.isolation import access_problem, usable_by_others

    if os.geteuid() != 0:
        say("note: not root: attempts run as the agents' own user, not isolated (each host shows the warning)")
        return DemoIsolation({}, PYTHON)
    if usable_by_others(PYTHON):
        return DemoIsolation({}, PYTHON)
    nobody = 2**31 - 3
    if (
        usable_by_others(SYSTEM_PYTHON)
        and access_problem(str(REPO), nobody, set(), 5) is None
        and access_problem(str(REPO / "agent" / "standin.py"), nobody, set(), 4) is None
        and subprocess.run(  # noqa: S603 -- a fixed program
            [SYSTEM_PYTHON, "-c", "import sys; sys.exit(sys.version_info < (3, 9))"], check=False
        ).returncode
        == 0
    ):
        say(f"note: {PYTHON} is not usable by other accounts: workloads run {SYSTEM_PYTHON}, as accounts fw-<user>")
        return DemoIsolation({}, SYSTEM_PYTHON)
    say(f"note: {PYTHON} is not usable by other accounts: attempts run as root, not isolated (docs/isolation.md)")
    return DemoIsolation({"FAIRWAY_ISOLATION": "{mode: agent, allow_root: true}"}, PYTHON, allow_root=True)


class DemoError(Exception):
    """A step of the demo failed; the message says which and where its log is."""


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = _libc() if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the demo process dies (so nothing outlives a kill -9)."""
    if LIBC is not None:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def free_port(preferred: int) -> int:
    """``preferred`` if nothing listens there and it can be bound, else a free port from the kernel."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # As uvicorn does: a port whose old connections linger in TIME_WAIT is still usable,
            # while one with a live listener still fails to bind.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise DemoError("no free TCP port on 127.0.0.1")


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Demo:
    """Owns the child processes and stops them in order."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.isolation = DemoIsolation({}, PYTHON)  # set by prepare()
        self.var = (REPO / args.var_dir).resolve() if not Path(args.var_dir).is_absolute() else Path(args.var_dir)
        self.logs = self.var / "logs"
        self.env = dict(os.environ)
        self.env.update(
            {
                "FAIRWAY_VAR_DIR": str(self.var),
                "DJANGO_SETTINGS_MODULE": "config.settings",
                # A short clock: replay_trace submits from another process, whose tick requests
                # cannot reach this server's in-process worker (embedded stub broker).
                "FAIRWAY_TICK_INTERVAL_S": str(args.tick),
                "FAIRWAY_HEARTBEAT_S": "1",
                "FAIRWAY_GRACE_PERIOD_S": "5",
                # Estimates after every tick that starts, stops or sees new work, 0.5 s later, and
                # every 10 s anyway (one run at a time: tasks.request_estimates); no minimum gap
                # between runs: compressed time, freshness over CPU (docs/estimates.md, "Cost").
                "FAIRWAY_ESTIMATE_INTERVAL_S": "10",
                "FAIRWAY_ESTIMATE_DEBOUNCE_S": "0.5",
                "FAIRWAY_ESTIMATE_MIN_GAP_S": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.pop("DATABASE_URL", None)  # the demo is the embedded mode: SQLite, stub broker
        self.env.pop("REDIS_URL", None)
        self.server: subprocess.Popen[bytes] | None = None
        self.agents: list[subprocess.Popen[bytes]] = []
        self.replay: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._log_files: list[IO[bytes]] = []
        self._stopping = False

    # --- processes ---------------------------------------------------------------------------

    def _spawn(
        self, argv: list[str], log_name: str | None, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        out: IO[bytes] | None = None
        if log_name is not None:
            out = open(self.logs / log_name, "ab")  # noqa: SIM115 - closed in stop()
            self._log_files.append(out)
        return subprocess.Popen(  # noqa: S603 - our own interpreter and fixed arguments
            argv,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT if out is not None else None,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches only the demo, which stops children in order
            # preexec_fn is safe here: this process runs no threads, and the hook only calls prctl.
            preexec_fn=_die_with_parent,
            env=env if env is not None else self.env,
        )

    def manage(self, *argv: str, quiet: bool = True) -> str:
        """Run a management command to completion and return its output (quiet); DemoError with its
        output on failure."""
        result = subprocess.run(  # noqa: S603 - our own interpreter and fixed arguments
            [PYTHON, "manage.py", *argv],
            cwd=REPO,
            env=self.env,
            capture_output=quiet,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        if result.returncode != 0:
            detail = (result.stdout or b"").decode(errors="replace") + (result.stderr or b"").decode(errors="replace")
            raise DemoError(f"manage.py {' '.join(argv)} failed (exit {result.returncode}):\n{detail[-3000:]}")
        return (result.stdout or b"").decode(errors="replace")

    # --- steps -------------------------------------------------------------------------------

    def prepare(self) -> None:
        say(f"fresh demo state in {self.var}")
        if self.var.exists():
            shutil.rmtree(self.var)
        self.logs.mkdir(parents=True)
        # The agents run here too, and their attempts (fw-<user>) could read a database file
        # created 0644: every session key (an admin's web login) and every workload's secret env.
        owner_only(self.var / "fairway.sqlite3")
        self.manage("migrate", "--noinput")
        tokens = self.var / "tokens.json"
        self.manage(
            "seed_demo", "--hosts", str(self.args.hosts), "--gpus", str(self.args.gpus), "--tokens-out", str(tokens)
        )
        say(f"seeded: budgets, logins, {self.args.hosts} hosts × {self.args.gpus} GPUs")
        if self.args.history_days > 0:
            # A week of the trace before the replay, simulated and written as finished work:
            # budgets start with real ratios, the pyramid with a week (docs/demo.md).
            began = time.monotonic()
            out = self.manage(
                "import_history", "philly", "--trace", str(self.args.trace), "--cluster", "philly",
                "--user", "researcher", "--before-job", str(self.args.start), "--days", f"{self.args.history_days:g}",
                # the week's work preempted and waiting at its end is canceled there, saying so: the
                # replay starts from an empty queue (pending, it would run hours of real time on the
                # replay's scaled clock, protected; docs/demo.md)
                "--requeued", "cancel",
            )  # fmt: skip
            # The command's own count ("imported N Philly jobs ..."): an empty week shows here
            # (since mend31 it imported 0 jobs and said nothing; try32).
            counted = next((line for line in out.splitlines() if line.startswith("imported ")), "imported ?")
            say(f"history: {counted} ({time.monotonic() - began:.0f} s)")
        self.isolation = demo_isolation()
        if self.isolation.allow_root:  # attempts run as the agents' user, root: the cluster must allow it
            self.manage(
                "shell", "-c",
                "from scheduler.models import Cluster; Cluster.objects.update(allow_root_workloads=True)",
            )  # fmt: skip

    def start_server(self) -> None:
        self.port = free_port(self.args.port)
        if self.port != self.args.port:
            say(f"port {self.args.port} is taken: using {self.port}")
        self.server = self._spawn(
            [PYTHON, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(self.port), "--log-level", "warning"],
            "server.log",
        )
        deadline = time.monotonic() + 60
        while not port_open(self.port):
            if self.server.poll() is not None:
                raise DemoError(f"the server exited ({self.server.returncode}); see {self.logs / 'server.log'}")
            if time.monotonic() > deadline:
                raise DemoError(f"the server did not listen on port {self.port} within 60 s")
            time.sleep(0.2)
        say(f"server on http://127.0.0.1:{self.port}/ (log {self.logs / 'server.log'})")

    def start_agents(self) -> None:
        tokens = read_tokens(self.var / "tokens.json")
        if len(tokens) < self.args.hosts:
            raise DemoError(f"seed_demo wrote {len(tokens)} host tokens, expected {self.args.hosts}")
        isolation = self.isolation.agent_env
        for name, token in sorted(tokens.items())[: self.args.hosts]:
            state = self.var / "agents" / name
            state.mkdir(parents=True, exist_ok=True)
            # The token goes by environment, not argv, where `ps` would show it.
            env = {**self.env, "FAIRWAY_TOKEN": token, **isolation}
            self.agents.append(
                self._spawn(
                    [
                        PYTHON,
                        "-m",
                        "agent",
                        "run",
                        "--server",
                        f"ws://127.0.0.1:{self.port}/ws/agent/",
                        "--host-name",
                        name,
                        "--gpus",
                        str(self.args.gpus),
                        "--model",
                        "H100",
                        "--state-dir",
                        str(state),
                        "--heartbeat",
                        "1",
                    ],
                    f"agent-{name}.log",
                    env=env,
                )
            )
        self._wait_hosts(sorted(tokens)[: self.args.hosts])

    def _wait_hosts(self, names: list[str]) -> None:
        import django

        django.setup()
        from django.db import connection

        from scheduler.models import Host

        deadline = time.monotonic() + 60
        while True:
            ready = set(
                Host.objects.filter(name__in=names, last_heartbeat__isnull=False).values_list("name", flat=True)
            )
            connection.close()  # never hold the SQLite file between polls
            if len(ready) == len(names):
                break
            for proc, name in zip(self.agents, names, strict=False):
                if proc.poll() is not None:
                    raise DemoError(f"agent {name} exited ({proc.returncode}); see {self.logs / f'agent-{name}.log'}")
            if time.monotonic() > deadline:
                missing = ", ".join(sorted(set(names) - ready))
                raise DemoError(f"hosts {missing} did not heartbeat within 60 s; see {self.logs}")
            time.sleep(0.3)
        say(f"{len(names)} agents connected ({', '.join(names)}), heartbeat 1 s")

    def submit_array(self) -> None:
        """One array (docs/jobs.md) next to the replay: six 1-GPU unallocated members, two at a
        time (``%2``), each with a 10-minute wall-time limit; shown at /workloads/?group=N."""
        code = (
            "from accounts.models import User; from budgets.models import Budget; "
            "from scheduler.services import do_submit_workload; "
            "leaf = Budget.objects.filter(children__isnull=True, archived_at__isnull=True, parent__isnull=False)"
            ".order_by('id').first(); "
            "w = do_submit_workload(User.objects.get(username='researcher'), name='demo-sweep', budget=leaf, "
            "cluster='philly', gpu_model='H100', gpu_count=1, image='', "
            f"command=[{self.isolation.workload_python!r}, '-m', 'agent.standin', '--duration', '40'], "
            "env=None, min_runtime_s=0, max_runtime_s=600, array='0-5%2'); "
            "print(w.group_id)"
        )
        try:
            output = self.manage("shell", "-c", code)
        except DemoError as exc:  # the array is a side show: the replay goes on without it
            say(f"could not submit the demo array: {exc}")
            return
        group = output.strip().splitlines()[-1] if output.strip() else ""
        where = f"http://127.0.0.1:{self.port}/workloads/?group={group}" if group.isdigit() else "/workloads/"
        say(f"submitted array demo-sweep[0-5]%2 (6 × 1 GPU, unallocated, two at a time): see {where}")

    def run_replay(self) -> int:
        a = self.args
        argv = [
            PYTHON,
            "manage.py",
            "replay_trace",
            str(a.trace),
            "--start",
            str(a.start),
            "--limit",
            str(a.limit),
            "--time-scale",
            f"{a.time_scale:g}",
            "--max-duration",
            a.max_duration,
            # A wall-time limit per job (run time + 20 s, as a Slurm user gives --time): the forward
            # simulation of estimated starts knows when running work ends (docs/estimates.md).
            "--wall-time-slack",
            str(DEMO_WALL_TIME_SLACK),
            "--cluster",
            "philly",
            "--gpu-model",
            "H100",
            "--user",
            "researcher",
            "--timeout",
            f"{a.timeout:g}",
            "--workload-python",
            self.isolation.workload_python,
            # CPUs and memory from the GPU count (DESIGN.md §3.3): 6 CPUs and 48G per GPU, under the
            # fake hosts' share (8 and 64G), so the replay places as before and the pages show requests
            "--cpus-per-gpu",
            "6",
            "--memory-per-gpu",
            "48G",
        ]
        say("replaying: " + " ".join(argv[2:]))
        self.replay = self._spawn(argv, None)  # progress bars and the summary go to this terminal
        sampler = CoverageSampler().start()
        try:
            code = self.replay.wait()
        finally:
            sampler.stop()
        self.replay = None
        say(sampler.summary())
        return code

    def serve_forever(self) -> None:
        say("serving until Ctrl-C")
        while True:
            if self.server is not None and self.server.poll() is not None:
                raise DemoError(f"the server exited ({self.server.returncode}); see {self.logs / 'server.log'}")
            reap_orphans()
            time.sleep(1)

    def print_access(self) -> None:
        url = f"http://127.0.0.1:{self.port}"
        print(f"\nWeb UI: {url}/   Admin: {url}/admin/", flush=True)
        for user, password, what in LOGINS:
            print(f"  login {user} / {password}  ({what})", flush=True)
        # the CLI's default server is :8000; the demo may serve on another port (PORT=, or 8000 taken)
        print(f"CLI: .venv/bin/fairway login --server {url} -u researcher   (password as above)", flush=True)
        print(f"Logs: {self.logs}", flush=True)

    def print_kept(self) -> None:
        """What ``--exit`` leaves: it stops at once, so no URL to open, but the replay's database."""
        say(
            "EXIT=1: stopping now. The replay's database stays in "
            f"{self.var} until the next demo; to browse it (logins as above, no agents: its hosts "
            f"go offline): FAIRWAY_VAR_DIR={self.var} .venv/bin/python manage.py serve --port {self.port}"
        )

    # --- stopping ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this demo started, in order; safe to call twice."""
        if self._stopping:
            return
        self._stopping = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say("stopping: replay, agents, attempts, server")
        if self.replay is not None:
            # SIGINT: replay_trace prints the summary of what it did so far.
            terminate([self.replay], timeout=15, sig=signal.SIGINT)
        terminate(self.agents, timeout=10)
        stop_orphans()
        if self.server is not None:
            terminate([self.server], timeout=15)
        stop_orphans()
        for f in self._log_files:
            f.close()
        say("stopped")


class CoverageSampler:
    """Samples, every ``every`` seconds during the replay, how many pending allocated workloads
    carry an estimated start (``scheduler.estimates.estimate_coverage``: held,
    unschedulable and dependency-waiting ones not counted, nor those no tick has seen yet, whose
    reason is not known, nor those no estimates run has read yet: both summed apart and shown),
    and sums the samples."""

    def __init__(self, every: float = 5.0) -> None:
        self.every = every
        self.counted = 0
        self.estimated = 0
        self.unseen = 0
        self.awaiting = 0
        self.samples = 0
        self.worst: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="coverage", daemon=True)

    def start(self) -> CoverageSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        from django.db import connection

        from scheduler.estimates import estimate_coverage

        while not self._stop.wait(self.every):
            try:
                cov = estimate_coverage()
            except Exception as exc:  # a locked SQLite file: skip the sample
                say(f"coverage sample skipped: {exc}")
                continue
            finally:
                connection.close()  # never hold the SQLite file between polls
            self.unseen += cov.unseen
            self.awaiting += cov.awaiting
            if cov.counted:
                self.samples += 1
                self.counted += cov.counted
                self.estimated += cov.estimated
                frac = cov.estimated / cov.counted
                self.worst = frac if self.worst is None else min(self.worst, frac)

    def summary(self) -> str:
        if not self.counted:
            return "estimate coverage: no pending allocated workload was sampled"
        return (
            f"estimate coverage: {self.estimated} of {self.counted} pending allocated workloads "
            f"({100 * self.estimated / self.counted:.1f} %) over {self.samples} samples every {self.every:g} s "
            f"carried an estimated start (worst sample {100 * (self.worst or 0):.1f} %; held, "
            "unschedulable and dependency-waiting ones not counted, nor the "
            f"{self.unseen} not yet seen by a tick, whose reason is not known yet, nor the {self.awaiting} "
            "no estimates run had read yet; counting those: "
            f"{100 * self.estimated / (self.counted + self.unseen + self.awaiting):.1f} %)"
        )


def terminate(procs: list[subprocess.Popen[bytes]], *, timeout: float, sig: signal.Signals = signal.SIGTERM) -> None:
    """Send ``sig`` to each live process's group, wait up to ``timeout`` s, then SIGKILL the group."""
    live = [p for p in procs if p.poll() is None]
    for p in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, sig)
    deadline = time.monotonic() + timeout
    for p in live:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _children() -> list[int]:
    """Pids whose parent is this process (with the subreaper flag: orphaned descendants too)."""
    me = os.getpid()
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[1]) == me:
            pids.append(int(entry.name))
    return pids


def reap_orphans() -> None:
    """Collect exited orphans (attempts re-parented to this subreaper), so no zombie lingers."""
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, _status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return


def stop_orphans(timeout: float = 5.0) -> None:
    """Stop attempt processes left by the agents: SIGTERM their groups, then SIGKILL, and reap them."""
    if LIBC is None or not Path("/proc").is_dir():
        return
    pids = _children()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap_orphans()
        pids = _children()
        if not pids:
            return
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
    time.sleep(0.2)
    reap_orphans()


def read_tokens(path: Path) -> dict[str, str]:
    """Host name → token from seed_demo's ``--tokens-out`` file (JSON object, or ``name token`` lines)."""
    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        if "hosts" in data and isinstance(data["hosts"], dict | list):
            data = data["hosts"]
        else:
            return {str(k): str(v) for k, v in data.items()}
    if isinstance(data, list):
        return {str(item["name"]): str(item["token"]) for item in data}
    if isinstance(data, dict):
        return {str(k): str(v) for k, v in data.items()}
    tokens: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.replace("=", " ").replace(":", " ").split()
        if len(parts) >= 2 and not line.lstrip().startswith("#"):
            tokens[parts[0]] = parts[-1]
    return tokens


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


def after_replay(demo: Any, *, exit_now: bool) -> None:
    """Once the replay is done: with ``--exit`` say what is left and return (the caller stops
    everything), else print the URLs and logins again and serve until Ctrl-C. ``--exit`` printed
    the URLs and logins as well, then stopped the server in the same second (try42)."""
    if exit_now:
        demo.print_kept()
        return
    demo.print_access()
    demo.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the Fairway demo (see docs/demo.md).")
    parser.add_argument("--exit", action="store_true", help="exit when the replay is done (make demo EXIT=1)")
    parser.add_argument("--port", type=int, default=8000, help="preferred port (default 8000; a free one if taken)")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--var-dir", default="var/demo", help="demo state (wiped at start; default var/demo)")
    parser.add_argument("--trace", default="data/philly/philly_jobs.csv")
    parser.add_argument("--start", type=int, default=DEMO_START_JOB)
    parser.add_argument("--limit", type=int, default=DEMO_JOBS)
    parser.add_argument("--time-scale", type=float, default=DEMO_TIME_SCALE)
    parser.add_argument("--max-duration", default=DEMO_MAX_DURATION)
    parser.add_argument("--timeout", type=float, default=900, help="replay: wait after the last submission (s)")
    parser.add_argument(
        "--history-days", type=float, default=7.0, help="days of the trace imported before the replay (0: none)"
    )
    parser.add_argument("--tick", type=float, default=1.0, help="server clock period in seconds (default 1)")
    args = parser.parse_args()

    if LIBC is not None:
        LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    os.chdir(REPO)
    sys.path.insert(0, str(REPO))

    demo = Demo(args)
    os.environ.update(demo.env)  # django.setup() in this process reads the same settings

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    started = time.monotonic()
    code: int | None = None  # the replay's exit code once it ran
    try:
        demo.prepare()
        demo.start_server()
        demo.start_agents()
        demo.submit_array()
        demo.print_access()  # the replay takes minutes: the UI and the CLI can follow it live
        code = demo.run_replay()
        say(f"replay finished with exit code {code} after {time.monotonic() - started:.0f} s of demo")
        after_replay(demo, exit_now=args.exit)
    except KeyboardInterrupt:
        print(flush=True)
        if code is None:  # interrupted before the replay ended
            code = 130
    except DemoError as exc:
        say(f"error: {exc}")
        code = 1
    finally:
        demo.stop()
    say(f"total demo wall time {time.monotonic() - started:.0f} s")
    return 1 if code is None else code


if __name__ == "__main__":
    sys.exit(main())
