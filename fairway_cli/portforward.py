"""``fairway port-forward ID [LOCAL:]REMOTE``: a local TCP port that reaches a port inside one's own
running workload (TensorBoard, Jupyter; ``kubectl port-forward``, ``ssh -L`` through a login node;
docs/jobs.md, "Reach a port in a running workload"). Each local connection is one websocket to the
server's ``/ws/port-forward/`` (``scheduler/port_forward.py`` is the other end), its bytes both ways,
at most a window ahead of the other side's acknowledgements."""

from __future__ import annotations

import contextlib
import json
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from fairway_cli import session
from fairway_cli.words import TRY_LATER_STATUSES, retry_after_s, try_later_text
from fairway_cli.wsclient import OP_BINARY, OP_CLOSE, OP_TEXT, WebSocket, WebSocketError
from fairway_common.limits import EXEC_TTY_WINDOW, EXEC_TTY_WINDOW_CHUNKS, PORT_CHUNK_BYTES

PATH = "/ws/port-forward/"
POLL_S = 2.0
"""How often the CLI asks whether the workload still runs (``GET workloads/ID/``)."""
FATAL = frozenset({"not_running", "not_found", "forbidden", "not_authenticated", "authentication_failed"})
"""Refusals of one connection that end the forward: every later connection would get them too."""


def parse_ports(spec: str) -> tuple[int, int]:
    """``6006`` → (6006, 6006); ``8888:8889`` → (8888, 8889): the local port, the workload's.

    Raises:
        ValueError: not one or two whole numbers, 1 to 65535, with ``:`` between.
    """
    words = spec.split(":")
    if len(words) > 2 or not all(word.isascii() and word.isdigit() for word in words):  # '²', '٣' (brk49)
        raise ValueError(f"{spec!r}: give PORT or LOCAL:REMOTE, e.g. 6006 or 8888:8889")
    ports = [int(word) for word in words]
    if not all(1 <= port <= 65535 for port in ports):
        raise ValueError(f"{spec!r}: a port is a whole number, 1 to 65535")
    return ports[0], ports[-1]


@dataclass(frozen=True, slots=True)
class Forward:
    """Where each local connection goes: the server, its token, workload ``workload``'s attempt
    ``attempt`` (None: the latest), the port ``port`` inside it, of its gang member ``rank``'s part."""

    server: str
    token: str
    user_agent: str
    workload: int
    attempt: int | None
    port: int
    rank: int = 0

    def first(self, check: bool | str = False) -> dict[str, object]:
        """A connection's first frame; ``check``: its checks only (``True``, or ``"again"``: :meth:`check`'s)."""
        frame: dict[str, object] = {"workload": self.workload, "attempt": self.attempt, "port": self.port}
        if self.rank:
            frame["rank"] = self.rank
        return {**frame, "check": check} if check else frame

    def check(self, again: bool = False) -> dict[str, object]:
        """The server's checks of a connection, none made (owner, running, port): before the forward
        listens, its one count in the server's ``FAIRWAY_THROTTLE_EXEC``; ``again`` (why it ended,
        once the workload no longer runs), not counted (cli46: it counted, and an exec after a
        forward could be throttled by a check the person did not ask for).

        Raises:
            session.SessionRefused: its refusal, in its words.
            WebSocketError: the server could not be reached.
        """
        first = self.first("again" if again else True)
        ws, frame = session.open_session(self.server, self.token, self.user_agent, first, path=PATH)
        ws.close()
        return frame


def relay(ws: WebSocket, conn: socket.socket) -> session.SessionRefused | None:
    """Relay one local connection ``conn`` over its websocket ``ws`` until both sides have ended
    (or either broke); the server's refusal of it, if it ended so."""
    credit = threading.Condition()
    unacked = [0, 0]  # bytes, frames sent and not yet written in the workload
    done = threading.Event()

    def up() -> None:
        try:
            while True:
                with credit:
                    while not done.is_set() and (unacked[0] >= EXEC_TTY_WINDOW or unacked[1] >= EXEC_TTY_WINDOW_CHUNKS):
                        credit.wait(1.0)
                    room = min(PORT_CHUNK_BYTES, EXEC_TTY_WINDOW - unacked[0])
                if done.is_set():
                    return
                data = conn.recv(room)
                if not data:  # the local side ended its sending: so does the workload's connection
                    ws.send_text(json.dumps({"type": "eof"}))
                    return
                with credit:
                    unacked[0] += len(data)
                    unacked[1] += 1
                ws.send_binary(data)
        except (OSError, WebSocketError):
            return

    sender = threading.Thread(target=up, name="fairway-port-forward-up", daemon=True)
    sender.start()
    refused: session.SessionRefused | None = None
    try:
        while True:
            kind, payload = ws.recv()
            if kind == OP_BINARY:
                conn.sendall(payload)
            elif kind == OP_TEXT:
                frame = json.loads(payload)
                if frame.get("type") == "ack":
                    session.acked(frame, credit, unacked)
                elif frame.get("type") == "eof":
                    conn.shutdown(socket.SHUT_WR)
                elif frame.get("type") == "error":
                    refused = session.SessionRefused(str(frame.get("code")), str(frame.get("message")))
            elif kind == OP_CLOSE:
                if refused is not None:
                    refused.closed(payload)
                break
    except (OSError, WebSocketError, ValueError, KeyError, TypeError):
        pass
    finally:
        done.set()
        with credit:
            credit.notify_all()
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)  # wakes the sender's recv
        conn.close()
        ws.close()
        sender.join(5)
    return refused


def serve(
    fwd: Forward, listener: socket.socket, err: TextIO, still_running: Callable[[], bool], stop: threading.Event
) -> str:
    """Accept local connections on ``listener`` and relay each until ``stop`` is set or the
    workload no longer runs (``still_running``, every :data:`POLL_S`; the server's words then,
    returned). Refusals of one connection (nothing listens there) are said and the next waited for."""
    fatal: list[str] = []
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            err.write(f"fairway: {line}\n")
            err.flush()

    def end_with(message: str) -> None:
        with lock:
            fatal.append(message)
        stop.set()

    def refused_so(exc: session.SessionRefused) -> None:
        if exc.unavailable:  # said (a 503 or a 429); the next connection may be taken
            say(try_later_text(exc.status, f"{exc.message} ({exc.code})", exc.retry_after))
        else:
            (end_with if exc.code in FATAL else say)(exc.message)

    def handle(conn: socket.socket) -> None:
        try:
            ws, _started = session.open_session(fwd.server, fwd.token, fwd.user_agent, fwd.first(), path=PATH)
        except session.SessionRefused as exc:
            conn.close()
            refused_so(exc)
            return
        except WebSocketError as exc:
            conn.close()
            said = f"{fwd.server}: {exc}"
            later = exc.status in TRY_LATER_STATUSES
            say(try_later_text(exc.status, said, retry_after_s(exc.retry_after)) if later else said)
            return
        refused = relay(ws, conn)
        if refused is not None:
            refused_so(refused)

    next_poll = time.monotonic() + POLL_S
    while not stop.is_set():
        if select.select([listener], [], [], 0.2)[0]:
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                threading.Thread(target=handle, args=(conn,), name="fairway-port-forward", daemon=True).start()
        if time.monotonic() >= next_poll:
            next_poll = time.monotonic() + POLL_S
            if not still_running():
                try:  # the server's words of why (exec's: pending, held, finished)
                    fwd.check(again=True)
                except session.SessionRefused as exc:
                    if not exc.unavailable:  # a 503 or 429 is not why: asked again at the next poll
                        end_with(exc.message)
                except WebSocketError:
                    pass  # unreachable for a moment: asked again at the next poll
    return fatal[0] if fatal else ""
