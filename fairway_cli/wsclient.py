"""A small blocking websocket client (RFC 6455) for ``fairway exec -it``: the CLI's dependencies
are ``requests`` and PyYAML, neither of which speaks websockets, and a terminal session needs no
more than this: one connection, whole frames, masking, ping/pong, close. ``wss://`` through
:mod:`ssl` with the system's certificates, as ``requests`` checks them."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import socket
import ssl
import struct
import threading
from urllib.parse import urlsplit

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
MAX_MESSAGE_BYTES = 16 << 20
"""Largest message taken from the server (its frames are a few KiB)."""


class WebSocketError(Exception):
    """The connection could not be opened, or broke (``status``: the HTTP status of a refused
    upgrade, 0 otherwise; ``retry_after``: that answer's ``Retry-After`` header, as sent)."""

    def __init__(self, message: str, status: int = 0, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


def _mask(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    if not n:
        return payload
    stream = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(stream, "big")).to_bytes(n, "big")


class WebSocket:
    """A client connection to ``url`` (``http(s)://host[:port]/path``: the server's URL as the CLI
    keeps it, the scheme made ``ws(s)``), ``headers`` sent with the upgrade."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float = 30.0) -> None:
        parts = urlsplit(url)
        secure = parts.scheme in ("https", "wss")
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if secure else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a keystroke is one small frame
            if secure:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except OSError as exc:
            raise WebSocketError(f"cannot reach {host}:{port}: {exc}") from None
        self.sock = sock
        self._buffer = b""
        self._send_lock = threading.Lock()
        self.closed = False
        key = base64.b64encode(os.urandom(16)).decode()
        host_header = host if parts.port is None else f"{host}:{port}"
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: {host_header}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
            *(f"{name}: {value}" for name, value in headers.items()),
        ]
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            head = self._read_until(b"\r\n\r\n", 65536)
        except OSError as exc:
            raise WebSocketError(f"the upgrade failed: {exc}") from None
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        words = status_line.split(" ", 2)
        status = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
        answered = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            answered[name.strip().lower()] = value.strip()
        if status != 101:
            refused = f"the server refused the websocket: HTTP {status}"
            raise WebSocketError(refused, status, answered.get("retry-after"))
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()  # noqa: S324 -- RFC 6455
        if answered.get("sec-websocket-accept") != accept:
            raise WebSocketError("the server's websocket answer is not RFC 6455's")
        sock.settimeout(None)

    def _read_until(self, marker: bytes, limit: int) -> bytes:
        while marker not in self._buffer:
            if len(self._buffer) > limit:
                raise WebSocketError("the server's answer is too long")
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WebSocketError("the server closed the connection")
            self._buffer += chunk
        head, _, self._buffer = self._buffer.partition(marker)
        return head

    def _read_exactly(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise WebSocketError("the server closed the connection")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def send(self, opcode: int, payload: bytes) -> None:
        """One whole frame, masked (a client's frames are: RFC 6455 §5.3)."""
        key = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        with self._send_lock:
            if self.closed and opcode != OP_CLOSE:
                return
            self.sock.sendall(head + key + _mask(payload, key))

    def send_text(self, text: str) -> None:
        self.send(OP_TEXT, text.encode())

    def send_binary(self, data: bytes) -> None:
        self.send(OP_BINARY, data)

    def recv(self) -> tuple[int, bytes]:
        """The next message: ``(OP_TEXT or OP_BINARY, payload)``, or ``(OP_CLOSE, code and
        reason)`` once the server closes (answered). Pings are answered on the way."""
        message = b""
        kind = 0
        while True:
            b1, b2 = self._read_exactly(2)
            opcode, n = b1 & 0x0F, b2 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read_exactly(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read_exactly(8))
            if n > MAX_MESSAGE_BYTES:
                raise WebSocketError(f"a message of {n} bytes")
            key = self._read_exactly(4) if b2 & 0x80 else b""
            payload = self._read_exactly(n)
            if key:
                payload = _mask(payload, key)
            if opcode == OP_PING:
                self.send(OP_PONG, payload)
                continue
            if opcode == OP_PONG:
                continue
            if opcode == OP_CLOSE:
                with self._send_lock:
                    if not self.closed:
                        self.closed = True
                        key = os.urandom(4)
                        code = payload[:2]
                        with contextlib.suppress(OSError):
                            self.sock.sendall(struct.pack("!BB", 0x88, 0x80 | len(code)) + key + _mask(code, key))
                return OP_CLOSE, payload
            if opcode != OP_CONT:
                kind = opcode
            message += payload
            if len(message) > MAX_MESSAGE_BYTES:
                raise WebSocketError("a message too long")
            if b1 & 0x80:
                return kind, message

    def close(self, code: int = 1000) -> None:
        """Send a close frame (once) and shut the socket."""
        with self._send_lock:
            if not self.closed:
                self.closed = True
                key = os.urandom(4)
                with contextlib.suppress(OSError):
                    self.sock.sendall(struct.pack("!BB", 0x88, 0x82) + key + _mask(struct.pack("!H", code), key))
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
