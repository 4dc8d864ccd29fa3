"""A websocket server that answers every connection one way (RFC 6455, enough for the CLI's
client, ``fairway_cli.wsclient``): for the CLI's tests of how it reads the server's refusals of
``/ws/exec/`` and ``/ws/port-forward/`` (the server's own side: tests/api/test_exec_session.py)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fairway_cli import cli as fairway_cli
from fairway_cli import session
from fairway_cli.cli import main
from fairway_cli.wsclient import GUID

STREAMS = [
    ["exec", "-i", "42", "--", "cat"],
    ["exec", "-it", "42", "--", "bash"],
    ["port-forward", "42", "6006"],
]
"""The CLI's three streams to workload 42, each refused the same ways (cli46, cli46b)."""


def run_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, url: str, *argv: str) -> tuple[int, str, str]:
    """``fairway *argv`` against ``url`` as a logged-in user at a terminal: (exit code, stdout, stderr)."""
    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("FAIRWAY_URL", url)
    monkeypatch.setenv("FAIRWAY_TOKEN", "abc123")
    monkeypatch.setattr(fairway_cli.os, "isatty", lambda _fd: True)  # -it: a terminal
    monkeypatch.setattr(fairway_cli.sys.stdin, "fileno", lambda: 0, raising=False)
    monkeypatch.setattr(session, "terminal_size", lambda _fd: (24, 80))
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@dataclass
class FakeServer:
    """Its URL (``http://127.0.0.1:PORT``) and the first frame of each connection (``firsts``)."""

    url: str
    firsts: list[dict[str, Any]] = field(default_factory=list)


def _read_frame(conn: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    _b1, b2 = exactly(2)
    n = b2 & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", exactly(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", exactly(8))
    key = exactly(4) if b2 & 0x80 else b""
    payload = exactly(n)
    return bytes(b ^ key[i % 4] for i, b in enumerate(payload)) if key else payload


def _frame(opcode: int, payload: bytes) -> bytes:
    n = len(payload)
    head = struct.pack("!BB", 0x80 | opcode, n) if n < 126 else struct.pack("!BBH", 0x80 | opcode, 126, n)
    return head + payload


def _serve_one(
    conn: socket.socket,
    server: FakeServer,
    status: int,
    refusal: dict[str, Any] | None,
    close: int,
    reason: str = "",
    retry_after: str = "",
) -> None:
    with conn:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = conn.recv(65536)
            if not chunk:
                return
            request += chunk
        if status != 101:
            header = f"Retry-After: {retry_after}\r\n" if retry_after else ""
            conn.sendall(
                f"HTTP/1.1 {status} Unavailable\r\n{header}Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
            return
        key = next(
            line.split(":", 1)[1].strip()
            for line in request.decode("latin-1").split("\r\n")
            if line.lower().startswith("sec-websocket-key:")
        )
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()  # noqa: S324 -- RFC 6455
        conn.sendall(
            (
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
            ).encode()
        )
        server.firsts.append(json.loads(_read_frame(conn)))
        if refusal is not None:
            conn.sendall(_frame(0x1, json.dumps({"type": "error", **refusal}).encode()))
        conn.sendall(_frame(0x8, struct.pack("!H", close) + reason.encode()))
        with contextlib.suppress(OSError):
            _read_frame(conn)  # the client's close


@contextlib.contextmanager
def fake_server(
    status: int = 101,
    refusal: dict[str, Any] | None = None,
    close: int = 1000,
    reason: str = "",
    retry_after: str = "",
) -> Iterator[FakeServer]:
    """A server on a free local port that answers each websocket: HTTP ``status`` at the upgrade
    (not 101: refused there, with ``Retry-After: retry_after`` where given), else takes the first
    frame, sends ``refusal`` (``{"code", "message"}``) as an error frame, and closes with ``close``
    (4000 + the API's status) and ``reason`` (``{"retry_after": N}``: scheduler.exec_session, ws47)."""
    listener = socket.create_server(("127.0.0.1", 0))
    server = FakeServer(f"http://127.0.0.1:{listener.getsockname()[1]}")
    stop = threading.Event()

    def loop() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(10)
            threading.Thread(
                target=_serve_one, args=(conn, server, status, refusal, close, reason, retry_after), daemon=True
            ).start()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        thread.join(5)
        listener.close()
