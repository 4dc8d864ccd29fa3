"""End to end: ``POST workloads/{id}/exec/`` → channel layer → the agent's websocket → a real agent
(process runtime, fake GPUs, running as root with owner isolation) → the command inside the
running attempt's containment → its output back (docs/jobs.md, "Run a command in a running
workload")."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from scheduler.models import Attempt, HostEvent

pytestmark = [
    pytest.mark.timeout(150),  # the waits' deadlines (START_TIMEOUT_S), not their usual length
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="a private /tmp and owner identities need root"
    ),
]

OWNER_UID = 62058
OWNER_ISOLATION = "{mode: owner, nss: false, uid_range: [62000, 62099], account_prefix: fwt-, allow_root: false}"


def exec_in(stack: Any, workload: int, body: dict[str, Any], timeout: float = 30) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(  # noqa: S310 -- http:// of the local test server
        f"{stack.base_url}/api/v1/workloads/{workload}/exec/",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {stack.token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 -- see above
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


PLACE_TIMEOUT_S = 30
"""The wait for a tick to place a workload (the clock asks every 0.5 s here: 0.2 s on a quiet box)."""
START_TIMEOUT_S = 60
"""The wait for the agent to start a placed attempt (0.2-0.5 s on a quiet box, 3.4 s with 12 busy
loops beside it on 2 cores): a deadline alone, a quiet run waits no longer (left49: the tty test
once timed out at 30 s for the placement and the start together, under load 12-14)."""


def running_attempt(stack: Any, workload: int) -> Attempt:
    """The workload's started attempt once its command wrote "ready": placed by a tick, then started
    by the agent, each waited for apart, so that a timeout says which of them was late."""
    placed = stack.wait_until(
        lambda: Attempt.objects.filter(workload_id=workload).first(), PLACE_TIMEOUT_S, "a tick to place it"
    )
    attempt = stack.wait_until(
        lambda: Attempt.objects.filter(workload_id=workload, started_at__isnull=False).first(),
        START_TIMEOUT_S,
        f"the agent to start attempt {placed.pk}",
    )
    stack.wait_until(lambda: "ready" in stack.attempt_log(attempt.pk), 20, "the command to write its note")
    return attempt


def test_exec_runs_in_the_attempts_containment_end_to_end(stack: Any) -> None:
    # Given an agent that runs attempts as their owners (rita: an admin-set uid), private /tmp each
    from accounts.models import User

    User.objects.filter(username="rita").update(posix_uid=OWNER_UID)
    # the state dir's parents searchable, as /var/lib is: the wrapper binds the attempt's directory
    # with the owner's file-system identity (iso58), and pytest makes its directories 0700
    for parent in stack.state_dir.parents:
        if parent == Path(tempfile.gettempdir()):
            break
        parent.chmod(parent.stat().st_mode | 0o011)
    hellos = stack.hellos()
    stack.stop_agent()
    stack.isolation = OWNER_ISOLATION
    stack.start_agent()
    stack.wait_until(lambda: stack.hellos() > hellos, 20, "the agent's hello with owner isolation")
    # and two running workloads of rita's, each with a note in its own /tmp
    notes = {}
    for word, budget in (("first", "org/alpha"), ("second", "org/beta")):
        command = ["sh", "-c", f"echo {word} > /tmp/note; echo ready; exec sleep 300"]
        notes[word] = stack.submit(budget, gpus=1, min_runtime=60, duration=0, command=command, name=word)
    for pk in notes.values():
        running_attempt(stack, pk)

    # When rita runs commands in the first one
    began = time.monotonic()
    status, who = exec_in(stack, notes["first"], {"command": ["id", "-u"]})
    latency = time.monotonic() - began
    status2, note = exec_in(stack, notes["first"], {"command": ["sh", "-c", "cat /tmp/*"]})
    _, other = exec_in(stack, notes["second"], {"command": ["cat", "/tmp/note"]})  # noqa: S108 -- its own /tmp
    _, env = exec_in(stack, notes["first"], {"command": ["sh", "-c", 'echo "$WANDB_KEY $FAIRWAY_WORKLOAD_ID"']})

    # Then it ran as rita's uid, never root, in that attempt's own /tmp, with its environment
    assert (status, who) == (
        200,
        {
            "exit_code": 0,
            "stdout": f"{OWNER_UID}\n",
            "stderr": "",
            "stdout_base64": base64.b64encode(f"{OWNER_UID}\n".encode()).decode(),  # exec47: as it is
            "stderr_base64": "",
            "truncated": False,
            "timed_out": False,
        },
    ), stack.agent_output()
    took = []
    for _ in range(5):  # warm: the channel layer's loop and connections made by the first
        began = time.monotonic()
        assert exec_in(stack, notes["first"], {"command": ["true"]})[1]["exit_code"] == 0
        took.append(time.monotonic() - began)
    print(f"exec end to end: first {latency * 1000:.0f} ms, then median {sorted(took)[2] * 1000:.0f} ms")
    assert status2 == 200 and note["stdout"] == "first\n", note  # the other attempt's note is not there
    assert other["stdout"] == "second\n"
    assert env["stdout"] == f"not-a-real-key {notes['first']}\n"  # its secret: the owner's own

    # and a command past its timeout is killed (124), output past 1 MiB cut, the exit code passed
    began = time.monotonic()
    status, slow = exec_in(stack, notes["first"], {"command": ["sh", "-c", "echo started; sleep 60"], "timeout": 1})
    print(f"exec past its timeout: {status} in {time.monotonic() - began:.1f} s")
    assert status == 200, slow  # left50: 504 exec_timeout on a loaded box (its kill took 3.5-6 s)
    assert (status, slow["exit_code"], slow["timed_out"], slow["stdout"]) == (200, 124, True, "started\n")
    assert time.monotonic() - began < 8
    status, big = exec_in(stack, notes["first"], {"command": ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"]})
    assert (status, len(big["stdout"]), big["truncated"], big["exit_code"]) == (200, 1 << 20, True, 0)
    status, failed = exec_in(stack, notes["first"], {"command": ["sh", "-c", "echo no >&2; exit 7"]})
    assert (failed["exit_code"], failed["stderr"]) == (7, "no\n")

    # and the CLI does the same: the command's streams to its own, its exit code its own
    cli = subprocess.run(  # noqa: S603 -- our own CLI, fixed arguments
        [sys.executable, "-m", "fairway_cli", "--server", stack.base_url, "exec", str(notes["second"]), "--",
         "sh", "-c", "cat /tmp/note; echo err >&2; exit 5"],
        env={**os.environ, "FAIRWAY_TOKEN": stack.token, "HOME": str(stack.state_dir.parent)},
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert (cli.returncode, cli.stdout, cli.stderr) == (5, "second\n", "err\n")

    # and once the workload has ended, there is nothing to run in
    first = Attempt.objects.get(workload_id=notes["first"])
    from scheduler.services import do_cancel_workload

    do_cancel_workload(User.objects.get(username="rita"), first.workload)
    stack.wait_until(lambda: Attempt.objects.get(pk=first.pk).ended_at, 20, "the cancel to end the attempt")
    status, gone = exec_in(stack, notes["first"], {"command": ["id"]})
    assert (status, gone["code"]) == (409, "not_running")
    assert HostEvent.objects.filter(kind="hello").exists()
