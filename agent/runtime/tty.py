"""An interactive session's pseudo-terminal (``exec_tty``, ``fairway exec -it``: docs/jobs.md).

The runtime starts the command in the attempt's containment with the terminal's slave side as its
stdin, stdout and stderr (its controlling terminal); the agent keeps the master side here: what the
person types is written to it, what the command writes is read from it, a resize is ``TIOCSWINSZ``
on it (the kernel sends the command ``SIGWINCH``), and a close hangs it up (``SIGHUP`` to its
process group) and then kills its process tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import signal
import struct
import termios
from collections.abc import Callable

TTY_READ_BYTES = 16 * 1024
"""Most bytes one read of the terminal takes."""
TTY_MAX_PENDING_INPUT = 256 * 1024
"""Input the command has not read yet that the agent keeps; past it the session ends (a paste into
a command that reads nothing must not grow the agent's memory without bound)."""
TTY_HANGUP_GRACE_S = 5.0
"""After the hangup (``SIGHUP``) of a closed session, how long before its process tree is killed. A
command that ends on the hangup ends the wait at once; 5 s leaves an editor time to write its
recovery file, and a loaded host time to deliver the hangup (1 s before: on a host at load 8 a
`sleep` hung up was killed, exit 137 for 129)."""


def set_size(fd: int, rows: int, cols: int) -> None:
    """``TIOCSWINSZ``: the terminal of ``fd`` is ``rows`` × ``cols``."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class InputOverflow(Exception):
    """More input is waiting than :data:`TTY_MAX_PENDING_INPUT`."""


class TtySession:
    """The master side ``master`` (non-blocking) of the terminal of ``proc`` (its own session and
    process group, ``pgid``); ``kill_tree`` kills a process and its descendants (the runtime's)."""

    def __init__(self, master: int, proc: asyncio.subprocess.Process, kill_tree: Callable[[int], None]) -> None:
        self.master = master
        self.proc = proc
        self.pgid = proc.pid
        self._kill_tree = kill_tree
        self._pending = bytearray()
        self._writing = False
        self._closed = False
        self._queued = self._done = 0  # bytes of input queued, written, ever
        self._waiting: list[tuple[int, int, Callable[[int], None]]] = []  # (end, size, written) not yet written
        os.set_blocking(master, False)

    async def read(self) -> bytes:
        """The next output (at most :data:`TTY_READ_BYTES`); ``b""`` once every holder of the
        terminal's other side has gone (the command and what it started ended)."""
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                return os.read(self.master, TTY_READ_BYTES)
            except BlockingIOError:
                pass
            except OSError as exc:  # EIO: the other side is closed everywhere
                if exc.errno == errno.EIO:
                    return b""
                raise
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(self.master, _set_done, ready)
            try:
                await ready
            finally:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(self.master)
        return b""

    async def read_stream(self) -> tuple[str, bytes]:
        """:meth:`read` as a stream's (``exec_pipe``'s ``exec_data``): a terminal has one, ``stdout``."""
        return "stdout", await self.read()

    def close_stdin(self) -> None:
        """The end of the input (``exec_data`` ``eof``): a terminal's is its end-of-file character."""
        self.write(b"\x04")

    def write(self, data: bytes, written: Callable[[int], None] | None = None) -> None:
        """Queue ``data`` for the command's terminal (written as it reads; ``written``: told its
        length once all of it is, as a pipe's input is acknowledged).

        Raises:
            InputOverflow: more than :data:`TTY_MAX_PENDING_INPUT` bytes wait.
        """
        if self._closed:
            return
        if len(self._pending) + len(data) > TTY_MAX_PENDING_INPUT:
            raise InputOverflow(f"more than {TTY_MAX_PENDING_INPUT} bytes of input the command does not read")
        self._pending += data
        if written is not None:
            self._waiting.append((self._queued + len(data), len(data), written))
        self._queued += len(data)
        self._flush()

    def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending and not self._closed:
            try:
                n = os.write(self.master, self._pending)
            except BlockingIOError:
                break
            except OSError:  # the terminal went away: the input goes nowhere
                self._pending.clear()
                break
            del self._pending[:n]
            self._done += n
            while self._waiting and self._waiting[0][0] <= self._done:
                _end, size, written = self._waiting.pop(0)
                written(size)
        want = bool(self._pending) and not self._closed
        if want and not self._writing:
            loop.add_writer(self.master, self._flush)
        elif not want and self._writing:
            with contextlib.suppress(ValueError, OSError):
                loop.remove_writer(self.master)
        self._writing = want

    def resize(self, rows: int, cols: int) -> None:
        with contextlib.suppress(OSError):
            set_size(self.master, rows, cols)

    async def close(self) -> None:
        """Hang the terminal up (``SIGHUP`` to the command's process group), then kill its process
        tree; the master side is closed once the command has ended (:meth:`finish`)."""
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pgid, signal.SIGHUP)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), TTY_HANGUP_GRACE_S)
        # what it started (its own process groups: a shell's jobs) goes with it
        await asyncio.to_thread(self._kill_tree, self.pgid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, signal.SIGKILL)

    def finish(self) -> None:
        """Release the master side (no more reads or writes)."""
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        for remove in (loop.remove_reader, loop.remove_writer):
            with contextlib.suppress(ValueError, OSError):
                remove(self.master)
        with contextlib.suppress(OSError):
            os.close(self.master)
