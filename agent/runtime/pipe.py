"""A command's pipes (``exec_pipe`` without a terminal: ``fairway exec -i ID -- CMD``, kubectl's
``exec -i``; docs/jobs.md). The runtime starts the command in the attempt's containment with pipes
for its stdin, stdout and stderr; what the person sends is written to its stdin (each piece's
writer told once it is written: the server's window moves on then), the end of it closes the pipe,
its stdout and stderr are read apart, and a close ends it as a one-shot command's timeout does
(its process tree stopped, then killed)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable

from agent.runtime.tty import TTY_MAX_PENDING_INPUT, TTY_READ_BYTES, InputOverflow


class PipeSession:
    """``proc``'s pipes (its own session and process group); ``kill_tree`` stops a process and its
    descendants (the runtime's). The interface of :class:`agent.runtime.tty.TtySession` that the
    agent's ``exec_pipe`` uses: :meth:`read_stream`, :meth:`write`, :meth:`close_stdin`,
    :meth:`resize`, :meth:`close`, :meth:`finish`."""

    def __init__(self, proc: asyncio.subprocess.Process, kill_tree: Callable[[int], None]) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None  # noqa: S101
        self.proc = proc
        self._kill_tree = kill_tree
        self._out: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue(maxsize=2)
        self._open = 2  # streams not ended
        self._inbox: asyncio.Queue[tuple[bytes, Callable[[int], None] | None] | None] = asyncio.Queue()
        self._pending = 0
        self._closed = False
        self._tasks = [
            asyncio.ensure_future(self._pump("stdout", proc.stdout)),
            asyncio.ensure_future(self._pump("stderr", proc.stderr)),
            asyncio.ensure_future(self._feed()),
        ]

    async def _pump(self, stream: str, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(TTY_READ_BYTES):
                await self._out.put((stream, data))  # waits while the agent's window is closed
        except (OSError, ValueError):
            pass
        finally:
            await self._out.put((stream, b""))

    async def _feed(self) -> None:
        stdin = self.proc.stdin
        assert stdin is not None  # noqa: S101 -- a PIPE
        try:
            while (item := await self._inbox.get()) is not None:
                data, written = item
                stdin.write(data)
                await stdin.drain()
                self._pending -= len(data)
                if written is not None:
                    written(len(data))
        except (OSError, ConnectionError):  # the command closed its stdin: the rest goes nowhere
            pass
        finally:
            with contextlib.suppress(OSError, RuntimeError):
                stdin.close()

    async def read_stream(self) -> tuple[str, bytes]:
        """The next output, ``(stream, bytes)``; ``("", b"")`` once stdout and stderr have both ended."""
        while self._open:
            stream, data = await self._out.get()
            if data:
                return stream, data
            self._open -= 1
        return "", b""

    def write(self, data: bytes, written: Callable[[int], None] | None = None) -> None:
        """Queue ``data`` for the command's stdin (``written``: told its length once written).

        Raises:
            InputOverflow: more than :data:`TTY_MAX_PENDING_INPUT` bytes wait (a client past its window).
        """
        if self._closed:
            return
        if self._pending + len(data) > TTY_MAX_PENDING_INPUT:
            raise InputOverflow(f"more than {TTY_MAX_PENDING_INPUT} bytes of input the command does not read")
        self._pending += len(data)
        self._inbox.put_nowait((data, written))

    def close_stdin(self) -> None:
        """The end of the input: the pipe is closed once what came before is written."""
        if not self._closed:
            self._closed = True
            self._inbox.put_nowait(None)

    def resize(self, rows: int, cols: int) -> None:
        """No terminal: nothing to resize."""

    async def close(self) -> None:
        """End the command: its process tree stopped, then killed (``kill_tree``), and its group."""
        self.close_stdin()
        if self.proc.returncode is None:
            await asyncio.to_thread(self._kill_tree, self.proc.pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def finish(self) -> None:
        """Stop reading and writing."""
        self._closed = True
        for task in self._tasks:
            task.cancel()
