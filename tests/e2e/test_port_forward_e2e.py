"""End to end: ``fairway port-forward`` (the CLI) → ``/ws/port-forward/`` → channel layer → the agent's
websocket → a real agent (process runtime, fake GPUs, root with owner isolation) → a TCP connection
made inside the running attempt's containment as its owner → a Python HTTP server in the workload
(docs/jobs.md, "Reach a port in a running workload"): 5 MB each way intact, two connections at once,
nothing listening said and the next connection still served, another user and a workload not running
refused, Ctrl-C, and the workload's end closing its connections and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from fairway_cli.wsclient import OP_TEXT, WebSocket
from tests.e2e.test_attempt_io import _cancel
from tests.e2e.test_exec_e2e import running_attempt
from tests.e2e.test_exec_tty_e2e import AS_OWNERS, owner_stack

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("unshare") is None, reason="a private /tmp and owner identities need root"
    ),
]

INSIDE, EMPTY, LOCAL, LOCAL_EMPTY = 8311, 8319, 8312, 8313  # this branch's ports (8310-8319)
BIG = 5_000_000
SERVER = f"""
import hashlib, http.server, random
random.seed(7)
BIG = random.randbytes({BIG})
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = BIG if self.path == "/big" else b"%d" % __import__("os").getuid()
        if self.path == "/peer":  # the uid of the socket that connected here (/proc/net/tcp)
            me, peer = ":%04X" % {INSIDE}, ":%04X" % self.client_address[1]
            rows = [r.split() for r in open("/proc/net/tcp").read().splitlines()[1:]]
            body = [r[7] for r in rows if r[1].endswith(peer) and r[2].endswith(me)][0].encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        body = hashlib.sha256(self.rfile.read(int(self.headers["Content-Length"]))).hexdigest().encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", {INSIDE}), H)
print("ready", flush=True)
server.serve_forever()
"""


@pytest.fixture
def clis() -> Iterator[list[subprocess.Popen[str]]]:
    """The CLIs a test started, ended with it (one left listening would hold its port)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for cli in started:
        if cli.poll() is None:
            cli.kill()
            cli.wait(10)


def forward(stack: Any, clis: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    cli = subprocess.Popen(  # noqa: S603 -- our own CLI, fixed arguments
        [sys.executable, "-m", "fairway_cli", "--server", stack.base_url, "port-forward", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FAIRWAY_TOKEN": stack.token, "HOME": str(stack.state_dir.parent)},
        # Ctrl-C as a shell gives it: an xdist worker ignores SIGINT, and so would its children
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 -- takes no lock
    )  # fmt: skip
    clis.append(cli)
    return cli


def get(port: int, path: str, body: bytes | None = None) -> bytes:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body)  # noqa: S310 -- local
    with urllib.request.urlopen(req, timeout=30) as answer:  # noqa: S310
        return bytes(answer.read())


def first_line(cli: subprocess.Popen[str]) -> str:
    assert cli.stdout is not None and cli.stderr is not None
    line = cli.stdout.readline().strip()
    if not line:  # it ended: why
        return cli.stderr.read()
    return line


@AS_OWNERS
def test_a_port_in_the_workload_is_reached_through_the_forward(stack: Any, clis: list[subprocess.Popen[str]]) -> None:
    from accounts.models import User
    from accounts.services import create_api_token

    owner_stack(stack)  # rita's uid and owner isolation (its sleeping workload is not used here)
    pk = stack.submit("org/beta", gpus=1, min_runtime=60, duration=0, command=["python3", "-c", SERVER], name="web")
    running_attempt(stack, pk)

    # When rita forwards a local port to the workload's HTTP server
    cli = forward(stack, clis, str(pk), f"{LOCAL}:{INSIDE}")
    assert first_line(cli) == f"Forwarding 127.0.0.1:{LOCAL} -> workload {pk} port {INSIDE} (Ctrl-C to stop)"

    # Then 5 MB come back intact, 5 MB go up intact, and the connection was made as rita
    random.seed(7)
    big = random.randbytes(BIG)
    began = time.monotonic()
    assert get(LOCAL, "/big") == big
    down_s = time.monotonic() - began
    began = time.monotonic()
    assert get(LOCAL, "/", big).decode() == hashlib.sha256(big).hexdigest()
    up_s = time.monotonic() - began
    print(f"5 MB through the forward: down {down_s:.2f} s, up {up_s:.2f} s")
    assert get(LOCAL, "/uid") == b"62058"  # the server's own uid: the owner's (OWNER_UID)
    assert get(LOCAL, "/peer") == b"62058"  # the connection's too: made as rita, not the agent's root

    # and two connections at once: the first half sent, the second served whole, then the first
    first = socket.create_connection(("127.0.0.1", LOCAL), timeout=30)
    first.sendall(b"GET /uid HTTP/1.0\r\n")
    assert get(LOCAL, "/uid") == b"62058"
    first.sendall(b"\r\n")
    answer = b""
    while chunk := first.recv(65536):
        answer += chunk
    assert answer.startswith(b"HTTP/1.0 200") and answer.endswith(b"62058"), answer
    first.close()

    # When nothing listens on the workload's port
    empty = forward(stack, clis, str(pk), f"{LOCAL_EMPTY}:{EMPTY}")
    assert first_line(empty).startswith(f"Forwarding 127.0.0.1:{LOCAL_EMPTY} ")
    for _ in range(2):  # Then each connection is closed and said so, and the CLI listens on
        conn = socket.create_connection(("127.0.0.1", LOCAL_EMPTY), timeout=30)
        assert conn.recv(100) == b""
        conn.close()
    assert empty.stderr is not None
    said = empty.stderr.readline()
    assert f"Nothing listens on port {EMPTY} in workload {pk}" in said, said
    assert empty.poll() is None
    # and Ctrl-C ends it cleanly
    empty.send_signal(signal.SIGINT)
    assert empty.wait(10) == 0

    # When another user tries, or the workload does not run, it is refused, nothing listening
    other = User.objects.create_user("olga", password="not-used")
    ws = WebSocket(stack.base_url + "/ws/port-forward/", {"Authorization": f"Token {create_api_token(other)[1]}"})
    ws.send_text(json.dumps({"workload": pk, "port": INSIDE}))
    kind, payload = ws.recv()
    assert kind == OP_TEXT and json.loads(payload)["code"] == "forbidden", payload
    ws.close()
    held = stack.submit("org/alpha", gpus=1, min_runtime=60, duration=0, command=["true"], hold=True)
    refused = forward(stack, clis, str(held), "8314:80")
    assert refused.wait(20) == 1
    assert refused.stderr is not None and f"Workload {held} is pending, held" in refused.stderr.read()

    # When the workload ends while a connection is open
    idle = socket.create_connection(("127.0.0.1", LOCAL), timeout=30)
    idle.sendall(b"GET /big HTTP/1.0\r\n")  # the request not finished: the connection stays open
    time.sleep(0.5)
    _cancel(stack, pk)
    # Then its connection is closed and the CLI says the workload ended, exiting non-zero
    assert idle.recv(100) == b""
    idle.close()
    assert cli.wait(20) == 1
    assert cli.stderr is not None
    said = cli.stderr.read()
    assert f"workload {pk} no longer takes connections" in said, said
