"""try63: ``fairway exec -it 7 -- sh`` and a command typed at once, before the shell's prompt
came: the line was echoed, then lost. ``relay`` put the terminal in raw mode with ``tty.setraw``'s
default ``TCSAFLUSH``, which discards input not yet read; ssh and kubectl keep it (``TCSADRAIN``,
``TCSANOW``), so what was typed while the session opened reaches the command."""

from __future__ import annotations

import io
import os
import pty
import threading

from fairway_cli.session import relay
from fairway_cli.wsclient import OP_CLOSE, OP_TEXT


class _Agent:
    """A websocket whose command waits for its input (at most 2 s), then exits 0."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.got = threading.Event()
        self.ended = False

    def send_binary(self, data: bytes) -> None:
        self.sent.append(data)
        self.got.set()

    def send_text(self, text: str) -> None:
        pass

    def recv(self) -> tuple[int, bytes]:
        if self.ended:
            return OP_CLOSE, b""
        self.got.wait(2)
        self.ended = True
        return OP_TEXT, b'{"type": "exit", "exit_code": 0}'

    def close(self, code: int = 1000) -> None:
        pass


def test_what_was_typed_while_the_session_opened_reaches_the_command():
    master, terminal = pty.openpty()
    try:
        os.write(master, b"echo typed-ahead\n")  # typed before relay made the terminal raw
        agent = _Agent()
        code = relay(agent, terminal, io.BytesIO(), raw=True)  # type: ignore[arg-type]
    finally:
        os.close(master)
        os.close(terminal)

    assert code == 0
    assert b"".join(agent.sent).startswith(b"echo typed-ahead"), agent.sent
