"""``fairway exec -it ID -- CMD``: an interactive session in one's own running workload over the
server's ``/ws/exec/`` websocket (docs/jobs.md, "Run a command in a running workload";
``scheduler/exec_session.py`` is the other end). The terminal is put in raw mode for the session
and given back as it was on every way out; its size goes with the first frame and again on each
``SIGWINCH``; the command's exit code is the CLI's."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import sys
import termios
import threading
import tty
from dataclasses import dataclass
from typing import Any, BinaryIO

from fairway_cli.words import COMMAND_TOO_LONG, TRY_LATER_STATUSES, retry_after_s
from fairway_cli.wsclient import OP_BINARY, OP_CLOSE, OP_TEXT, WebSocket, WebSocketError
from fairway_common.limits import STREAM_RETRY_AFTER_KEY

READ_BYTES = 4096
"""Most input sent in one frame."""
CLOSE_TOO_BIG = struct.pack("!H", 1009)
"""RFC 6455's close code of a message too big: the server's ``--ws-max-size`` (docs/deploy.md)."""
MAX_FIRST_FRAME_BYTES = 256 * 1024
"""The largest first frame a server takes: its ``--ws-max-size`` (docs/deploy.md, "Frame size"),
the agent protocol's ``MAX_MESSAGE_BYTES`` (kept equal by tests/breaker/test_brk61.py). A longer
command is refused here, not sent: past a few MiB the server reset the connection midway (brk61)."""


class SessionRefused(Exception):
    """The server refused or ended the session: ``code`` (the API's: ``not_running``,
    ``forbidden``, ``host_offline``, ``agent_too_old``, ``throttled``, ...) and its words;
    ``status``, the API's status of it (the close code's 4000 + status; 0 where none came);
    ``retry_after``, the seconds to wait the close reason says (:func:`close_retry_after`), or None."""

    def __init__(self, code: str, message: str, from_server: bool = True, status: int = 0) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.from_server = from_server  # the server's code and words, not the CLI's ("closed", "broken")
        self.status = status
        self.retry_after: float | None = None

    @property
    def unavailable(self) -> bool:
        """The server is unavailable for a moment (close 4503) or throttles the person (close 4429:
        ``throttled``, ``exec_busy``): the CLI says to try again (``words.try_later_text``)."""
        return self.status in TRY_LATER_STATUSES

    def closed(self, payload: bytes) -> None:
        """The close frame's ``payload`` that followed the refusal: its status, if it says one, and
        when to try again, if its reason says it."""
        if not self.status:
            self.status = close_status(payload)
        if self.retry_after is None:
            self.retry_after = close_retry_after(payload)


CLOSE_WAIT_S = 5.0
"""How long :func:`open_session` waits for the close that follows a refusal (its status)."""


def close_status(payload: bytes) -> int:
    """The API's status of a close frame's ``payload`` (the server closes a refusal with 4000 +
    status: 4503 is 503); 0 for any other close."""
    if len(payload) < 2:
        return 0
    (code,) = struct.unpack("!H", payload[:2])
    return code - 4000 if 4100 <= code < 4600 else 0


def close_retry_after(payload: bytes) -> float | None:
    """The seconds to wait before trying again that a close frame's ``payload`` says: its reason
    ``{"retry_after": N}`` (the server's refusal whose API answer has ``Retry-After: N``; ws47),
    read as that header is (:func:`~fairway_cli.words.retry_after_s`); None for any other reason."""
    try:
        reason = json.loads(payload[2:].decode()) if len(payload) > 2 else None
    except (ValueError, UnicodeDecodeError):
        return None
    seconds = reason.get(STREAM_RETRY_AFTER_KEY) if isinstance(reason, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        return None
    return retry_after_s(str(seconds))


@dataclass(slots=True)
class _End:
    exit_code: int | None = None
    timed_out: bool = False
    why: str = ""  # why the agent ended the command, if it did
    refused: SessionRefused | None = None

    def broke(self, exc: BaseException) -> None:
        """The connection broke before the session ended (an exit code or a refusal came)."""
        if self.exit_code is None and self.refused is None:
            self.refused = SessionRefused("broken", f"the connection broke: {exc}", from_server=False)

    def closed(self, payload: bytes) -> None:
        """The server closed the connection with ``payload``: a refusal met before it reads its status
        (a 503 after the stream started keeps its status, cli46)."""
        if self.refused is not None:
            self.refused.closed(payload)


def websocket_url(server: str, path: str = "/ws/exec/") -> str:
    return server.rstrip("/") + path


def terminal_size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return max(1, min(size.lines, 4096)), max(1, min(size.columns, 4096))


def open_session(
    server: str,
    token: str,
    user_agent: str,
    first: dict[str, Any],
    timeout: float = 30.0,
    path: str = "/ws/exec/",
) -> tuple[WebSocket, dict[str, Any]]:
    """Connect to ``path`` (``/ws/exec/``; ``/ws/port-forward/``: :mod:`fairway_cli.portforward`),
    send the first frame ``first`` and wait for ``started`` or ``checked`` (its frame returned).

    Raises:
        SessionRefused: the server's refusal (or ``unauthorized``: HTTP 401/403 at the upgrade).
        WebSocketError: the server could not be reached or broke the connection.
    """
    frame = json.dumps(first)
    if len(frame.encode()) > MAX_FIRST_FRAME_BYTES:
        raise SessionRefused("invalid_command", COMMAND_TOO_LONG)
    ws = WebSocket(websocket_url(server, path), {"Authorization": f"Token {token}", "User-Agent": user_agent}, timeout)
    try:
        try:
            ws.send_text(frame)
        except OSError as exc:  # brk61: its OSError was a traceback
            raise WebSocketError(f"the connection broke: {exc}") from None
        while True:
            kind, payload = ws.recv()
            if kind == OP_CLOSE:
                if payload[:2] == CLOSE_TOO_BIG:  # past the server's --ws-max-size (its agent protocol's limit)
                    raise SessionRefused("invalid_command", COMMAND_TOO_LONG)
                raise SessionRefused("closed", "the server closed the session before it started", from_server=False)
            if kind != OP_TEXT:
                continue
            frame = json.loads(payload)
            if frame.get("type") == "error":
                refused = SessionRefused(str(frame.get("code")), str(frame.get("message")))
                refused.closed(_close_after(ws))
                raise refused
            if frame.get("type") in ("started", "checked"):
                return ws, frame
    except BaseException:
        ws.close()
        raise


def _close_after(ws: WebSocket) -> bytes:
    """The close frame's payload that follows a refusal (b"" if none came within :data:`CLOSE_WAIT_S`)."""
    try:
        ws.sock.settimeout(CLOSE_WAIT_S)
        while True:
            kind, payload = ws.recv()
            if kind == OP_CLOSE:
                return payload
    except (OSError, WebSocketError):
        return b""


def _ended(end: _End, frame: dict[str, Any]) -> None:
    """Keep the server's text ``frame`` that ends a session in ``end``: an ``exit`` (its code, whether
    it was idle too long, the agent's words), an ``error`` (its refusal); any other is not an end."""
    if frame.get("type") == "exit":
        end.exit_code, end.timed_out = int(frame["exit_code"]), bool(frame.get("timed_out"))
        end.why = str(frame.get("message") or "")
    elif frame.get("type") == "error":
        end.refused = SessionRefused(str(frame.get("code")), str(frame.get("message")))


def acked(frame: dict[str, Any], credit: threading.Condition, unacked: list[int]) -> None:
    """Take the server's ``ack`` ``frame`` off ``unacked`` (bytes, frames sent and not yet taken in
    by the workload) and wake the sender waiting on ``credit`` (``relay_pipe``'s and port-forward's)."""
    with credit:
        unacked[0] -= int(frame["bytes"])
        unacked[1] -= int(frame["chunks"])
        credit.notify_all()


def _sent(ws: WebSocket, frame: str | bytes, broke: Any) -> bool:
    """Send ``frame`` (text: a control frame; bytes: input); a connection that broke (EPIPE,
    ECONNRESET) is the session's end, told to ``broke`` (brk61: its OSError left ``relay``: a
    BrokenPipeError exited 141 unsaid, as ``fairway ls | head``, a reset was a traceback)."""
    try:
        if isinstance(frame, str):
            ws.send_text(frame)
        else:
            ws.send_binary(frame)
    except OSError as exc:
        broke(exc)
        return False
    return True


def relay(ws: WebSocket, stdin_fd: int, stdout: BinaryIO, raw: bool, window: bool = False) -> int:
    """Relay the session until it ends: ``stdin_fd`` → the command's terminal (raw mode when
    ``raw``: restored on every way out), its output → ``stdout``; resizes on ``SIGWINCH``. Returns
    the command's exit code. ``window`` (the server's ``started`` said so, flow49): input at most
    ``EXEC_TTY_WINDOW`` bytes (``EXEC_TTY_WINDOW_CHUNKS`` frames) ahead of the server's ``ack``s, as
    :func:`relay_pipe`'s (stdin is not read meanwhile: a paste waits in the terminal).

    Raises:
        SessionRefused: the session ended without an exit code (the agent's connection ended, ...).
    """
    from fairway_common.limits import EXEC_TTY_WINDOW, EXEC_TTY_WINDOW_CHUNKS

    end = _End()
    credit = threading.Condition()
    unacked = [0, 0]  # bytes, frames
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)

    def wake(what: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(wake_w, what)

    broke = end.broke

    def read_server() -> None:
        try:
            while True:
                kind, payload = ws.recv()
                if kind == OP_BINARY:
                    stdout.write(payload)
                    stdout.flush()
                elif kind == OP_TEXT:
                    frame = json.loads(payload)
                    if frame.get("type") == "ack":
                        acked(frame, credit, unacked)
                        wake(b"a")
                    else:
                        _ended(end, frame)
                elif kind == OP_CLOSE:
                    end.closed(payload)
                    return
        except (OSError, WebSocketError, ValueError) as exc:
            broke(exc)
        finally:
            wake(b"x")

    def room() -> int:
        """Bytes that may be sent now (READ_BYTES at most)."""
        if not window:
            return READ_BYTES
        with credit:
            if unacked[1] >= EXEC_TTY_WINDOW_CHUNKS:
                return 0
            return max(0, min(READ_BYTES, EXEC_TTY_WINDOW - unacked[0]))

    saved = termios.tcgetattr(stdin_fd) if raw else None
    old_winch = signal.signal(signal.SIGWINCH, lambda *_: wake(b"w")) if raw else None
    reader = threading.Thread(target=read_server, name="fairway-exec-reader", daemon=True)
    try:
        if raw:
            # TCSADRAIN, as ssh: tty.setraw's default TCSAFLUSH dropped what was typed while the
            # session opened, a command typed before the prompt came (try63)
            tty.setraw(stdin_fd, termios.TCSADRAIN)
        reader.start()
        stdin_open = True
        while True:
            size = room() if stdin_open else 0
            ready, _, _ = select.select([wake_r, stdin_fd] if size else [wake_r], [], [])
            if wake_r in ready:
                woke = os.read(wake_r, 64)
                if b"x" in woke:
                    break
                if b"w" in woke:
                    rows, cols = terminal_size(stdin_fd)
                    frame: str | bytes = json.dumps({"type": "resize", "rows": rows, "cols": cols})
                    if not _sent(ws, frame, broke):
                        break
            if size and stdin_fd in ready:
                data = os.read(stdin_fd, size)
                if not data:  # stdin ended (not a terminal): the command's terminal gets an end of file
                    stdin_open, data = False, b"\x04"
                if window:
                    with credit:
                        unacked[0] += len(data)
                        unacked[1] += 1
                if not _sent(ws, data, broke):
                    break
    finally:
        if saved is not None:
            termios.tcsetattr(stdin_fd, termios.TCSADRAIN, saved)
        if old_winch is not None:
            signal.signal(signal.SIGWINCH, old_winch)
        ws.close()
        reader.join(5)
        os.close(wake_r)
        os.close(wake_w)
    if end.exit_code is not None:
        if end.timed_out:
            sys.stderr.write("fairway: the session was idle too long and was ended\n")
        elif end.why:
            sys.stderr.write(f"fairway: {end.why}\n")
        return end.exit_code
    raise end.refused or SessionRefused("broken", "the session ended without an exit code", from_server=False)


def relay_pipe(ws: WebSocket, stdin: BinaryIO, stdout: BinaryIO, stderr: BinaryIO) -> int:
    """Relay a session without a terminal (``fairway exec -i``, pf63) until it ends: ``stdin`` →
    the command's stdin, at most ``EXEC_TTY_WINDOW`` bytes (``EXEC_TTY_WINDOW_CHUNKS`` frames) ahead
    of the server's ``ack``s, its end sent as ``{"type": "eof"}`` (the command reads its end of
    file); its output's frames, each led by its stream's byte (1 stdout, 2 stderr), to ``stdout``
    and ``stderr`` as they came. Returns the command's exit code.

    Raises:
        SessionRefused: the session ended without an exit code.
    """
    from fairway_common.limits import EXEC_TTY_WINDOW, EXEC_TTY_WINDOW_CHUNKS, PORT_CHUNK_BYTES

    end = _End()
    credit = threading.Condition()
    unacked = [0, 0]  # bytes, frames
    done = threading.Event()

    broke = end.broke

    def read_server() -> None:
        try:
            while True:
                kind, payload = ws.recv()
                if kind == OP_BINARY and payload:
                    out = stderr if payload[:1] == b"\x02" else stdout
                    out.write(payload[1:])
                    out.flush()
                elif kind == OP_TEXT:
                    frame = json.loads(payload)
                    if frame.get("type") == "ack":
                        acked(frame, credit, unacked)
                    else:
                        _ended(end, frame)
                elif kind == OP_CLOSE:
                    end.closed(payload)
                    return
        except (OSError, WebSocketError, ValueError) as exc:
            broke(exc)
        finally:
            done.set()
            with credit:
                credit.notify_all()

    reader = threading.Thread(target=read_server, name="fairway-exec-reader", daemon=True)
    reader.start()
    try:
        while not done.is_set():
            with credit:
                while not done.is_set() and (unacked[0] >= EXEC_TTY_WINDOW or unacked[1] >= EXEC_TTY_WINDOW_CHUNKS):
                    credit.wait(1.0)
                room = min(PORT_CHUNK_BYTES, EXEC_TTY_WINDOW - unacked[0])
            if done.is_set():
                break
            data = stdin.read1(room) if hasattr(stdin, "read1") else stdin.read(room)
            if not data:  # its end: the command's stdin is closed once what came before is written
                _sent(ws, json.dumps({"type": "eof"}), broke)
                break
            with credit:
                unacked[0] += len(data)
                unacked[1] += 1
            if not _sent(ws, data, broke):
                break
        done.wait()
    finally:
        ws.close()
        reader.join(5)
    if end.exit_code is not None:
        if end.timed_out:
            sys.stderr.write("fairway: the session was idle too long and was ended\n")
        elif end.why:
            sys.stderr.write(f"fairway: {end.why}\n")
        return end.exit_code
    raise end.refused or SessionRefused("broken", "the session ended without an exit code", from_server=False)
