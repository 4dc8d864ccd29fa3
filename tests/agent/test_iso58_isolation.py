"""iso58: attacks from a workload's code on a real agent (root, ``process`` runtime, fake GPUs) and on
the docker runtime (podman); docs/isolation.md. Each test failed before its fix."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_testkit import REPO_ROOT, FakeServer, kill_leftovers, run_async

from agent.gpu.fake import fake_gpu_uuid
from agent.protocol import AttemptEvent, Hello, Owner, Start

TOKEN = "iso58-host-token-" + "k" * 24  # noqa: S105 -- a test token
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None, reason="switching identities needs root and useradd"
)
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # useradd, groupadd


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A scratch directory outside /tmp (attempts of a root agent get a private /tmp), mode 0755,
    holding the agent's state dir ``state``."""
    base = Path(tempfile.mkdtemp(prefix="fw-iso58-", dir="/var/lib"))
    os.chmod(base, 0o755)  # noqa: S103 -- as /var/lib: others may traverse
    try:
        yield base
    finally:
        kill_leftovers(base / "state")
        shutil.rmtree(base, ignore_errors=True)


def agent_argv(url: str, state: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "agent", "run", "--server", url, "--host-name", "h1", "--gpus", "2",
            "--gpu-backend", "fake", "--runtime", "process", "--state-dir", str(state), "--heartbeat", "0.5",
            *extra]  # fmt: skip


# --- the host token on the agent's command line -------------------------------------------------------


def test_an_agent_given_its_token_on_the_command_line_refuses_to_run(tmp_path: Path) -> None:
    """iso58: ``fairway-agent run --token T`` (agent/README's own example) put the host token in the
    agent's command line, which every process of the host reads (``/proc/<pid>/cmdline`` is
    world-readable, Landlock's ptrace scope does not cover it): an owner's attempt printed it, and
    with it connected as the host (its attempts, every other owner's secrets in their ``start``
    messages). The agent now refuses it, saying where the token goes, and never shows it."""
    done = subprocess.run(  # noqa: S603 -- our own agent
        agent_argv("ws://127.0.0.1:9/", tmp_path / "state", "--token", TOKEN),
        cwd=REPO_ROOT, env={"PATH": SBIN_PATH}, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--token" in done.stderr and "FAIRWAY_TOKEN" in done.stderr and "/proc/<pid>/cmdline" in done.stderr
    assert TOKEN not in done.stderr + done.stdout


SCAN = r"""
import glob, sys
token = sys.argv[1][::-1]  # not itself in this command line
found = []
for path in glob.glob("/proc/[0-9]*/cmdline") + glob.glob("/proc/[0-9]*/environ"):
    try:
        if token in open(path, "rb").read().decode(errors="replace"):
            found.append(path)
    except OSError:
        pass
print("found", found, flush=True)
"""


@needs_root
def test_no_attempt_finds_the_host_token_in_any_process(host_dir: Path) -> None:
    """The token given as the agent takes it (FAIRWAY_TOKEN): an owner's attempt that reads every
    process's command line and environment on the host finds it nowhere."""
    scan = host_dir / "scan.py"
    scan.write_text(SCAN)
    scan.chmod(0o755)

    async def scenario() -> None:
        async with FakeServer(heartbeat_s=0.5) as server:
            env = {"PATH": SBIN_PATH, "FAIRWAY_TOKEN": TOKEN,
                   "FAIRWAY_ISOLATION": "{uid_range: [62000, 62099], account_prefix: fwt-, nss: false}"}  # fmt: skip
            agent = subprocess.Popen(  # noqa: S603, ASYNC220 -- our own agent
                agent_argv(server.url, host_dir / "state"), cwd=REPO_ROOT, env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            try:
                await server.expect(lambda m: isinstance(m, Hello), 20)
                await server.send(
                    Start(attempt_id=1, workload_id=1001, image="", command=["python3", str(scan), TOKEN[::-1]],
                          env={}, gpu_uuids=[fake_gpu_uuid("h1", 0)], gpu_indices=[0], grace_s=1,
                          owner=Owner(name="iso-alice"))
                )  # fmt: skip
                ended = await server.expect(
                    lambda m: isinstance(m, AttemptEvent) and m.state in ("exited", "failed_to_start"), 20
                )
                assert isinstance(ended, AttemptEvent) and ended.exit_code == 0, ended
                log = (host_dir / "state" / "attempts" / "1.log").read_text()  # noqa: ASYNC240
                assert "found []" in log, log
            finally:
                agent.send_signal(signal.SIGTERM)
                await asyncio.to_thread(agent.wait, 10)

    run_async(scenario(), timeout=60)
