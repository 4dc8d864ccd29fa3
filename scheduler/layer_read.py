"""A websocket consumer's channel-layer read, ended by a message to its own channel, never cancelled.

Channels' ``AsyncConsumer.__call__`` cancels a connection's two reads when it stops (the socket's
and the channel layer's) and awaits both. On channels-redis one ``RedisChannelLayer.receive`` of
the process at a time holds the process's shared Redis read (a BZPOPMIN of every
``specific.<prefix>!`` channel of the process: all its agents' connections', sessions' and
forwards'); cancelled, that read is a BZPOPMIN cancelled inside redis-py:

- right after Redis popped a message, the message is lost, whichever connection of the process it
  was for (stream63: the ``exec.tty.close`` an interactive session's or a forward's consumer had just
  sent its agent's connection, so the agent's command ran on to the idle timeout);
- on a SIGTERM'd web process, where every agent connection ends at once, such a read at times
  never ended, so uvicorn waited for the connection until ``--timeout-graceful-shutdown`` and the
  process manager's SIGKILL came first; a read left running, cancelled again later (sig27's
  bound), hung ``asyncio.run``'s end (sig28).

:class:`LayerReadConsumer` is Channels' consumer with its own ``__call__``: the socket's read
(uvicorn's queue) is cancelled as before, but the channel layer's is ended by a message: the
connection sends :data:`READ_END` to its own channel and reads until it comes (what comes before it
is for a closed connection and is dropped), so no Redis command is ever interrupted. The agents'
connections (:class:`scheduler.consumers.AgentConsumer`) and the streams' (``/ws/exec/``,
``/ws/port-forward/``: :class:`scheduler.exec_session.AttemptStreamConsumer`) use it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from typing import Any

from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer

from scheduler import gateway

READ_END = "layer.read.end"
"""Message type a connection sends its own channel to end its channel-layer read (:class:`LayerReadConsumer`)."""
READ_END_S = 10.0
"""How long an ending connection waits for its channel-layer read to end on :data:`READ_END`."""
READ_END_LOCAL_TURNS = 10
"""Event-loop turns a :data:`READ_END` put in the layer's own buffer may take to end the read
before one is sent through Redis (the read holding the process's shared Redis read waits there)."""


def _end_read_locally(layer: Any, channel: str) -> bool:
    """Put :data:`READ_END` in channels-redis's in-process buffer of ``channel`` (a process-local
    ``!`` channel: its ``receive`` returns what that buffer holds, first come); False for any
    other layer. The buffer is channels-redis's own (``RedisChannelLayer.receive_buffer``, 4.x);
    without it the message goes through the layer as before."""
    buffers = getattr(layer, "receive_buffer", None)
    if "!" not in channel or not isinstance(buffers, collections.defaultdict):
        return False
    buffers[channel].put_nowait({"type": READ_END})
    return True


class LayerReadConsumer(AsyncWebsocketConsumer):
    """Channels' websocket consumer whose channel-layer read is ended by :data:`READ_END`, never
    cancelled (the module's docstring); a read that failed for want of the layer (Redis
    unreachable) is read no more and handed to :meth:`layer_read_failed`."""

    READ_OF = "connection"
    """What the connection is, in the warnings about its read."""

    async def layer_read_failed(self, exc: BaseException) -> None:
        """This connection's channel-layer read failed: the layer (Redis) cannot be reached
        (``gateway.LAYER_UNREACHABLE``); nothing more is read from it."""
        raise NotImplementedError

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Channels' ``AsyncConsumer.__call__``, ending its channel-layer read without cancelling it."""
        self.scope = scope
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.channel_name = await self.channel_layer.new_channel()
        self.channel_receive = functools.partial(self.channel_layer.receive, self.channel_name)
        self.base_send = send
        reads = {"socket": receive, "layer": self.channel_receive}
        tasks = {name: asyncio.ensure_future(read()) for name, read in reads.items()}
        try:
            while True:
                await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
                for name, task in list(tasks.items()):
                    if not task.done():
                        continue
                    if name == "layer" and isinstance(task.exception(), gateway.LAYER_UNREACHABLE):
                        del tasks["layer"]  # Redis went away (db61): no more reads
                        await self.layer_read_failed(task.exception())  # type: ignore[arg-type]
                        continue
                    await self.dispatch(task.result())
                    tasks[name] = asyncio.ensure_future(reads[name]())
        except StopConsumer:
            pass
        finally:
            tasks["socket"].cancel()
            with contextlib.suppress(BaseException):
                await tasks["socket"]
            if "layer" in tasks:
                await self._end_layer_read(tasks["layer"])

    async def _end_layer_read(self, read: asyncio.Future[Any]) -> None:
        """End the channel-layer read ``read`` with a :data:`READ_END` message to this connection's
        channel, never by cancelling it; bounded by :data:`READ_END_S`, past which the read is left
        to end when the message comes.

        On channels-redis the message is first put in the layer's own buffer of this channel
        (:func:`_end_read_locally`), where the read waits unless it is the one holding the
        process's shared Redis read: no Redis round trip. Sent through Redis, each connection's
        message took its turn in that one read, a message at a time (two round trips and an event
        loop turn each): 1,000 agents leaving at once left reads waiting past the 10 s bound,
        reads cancelled, and a web process that needed SIGKILL at its stop (web29). Through Redis
        it is sent only when the local message did not end the read within
        :data:`READ_END_LOCAL_TURNS` turns of the event loop (the read holding the shared read
        waits for a message from Redis, not on the buffer), or for other layers."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_END_S
        if _end_read_locally(self.channel_layer, self.channel_name):
            for _ in range(READ_END_LOCAL_TURNS):  # a read waiting on the buffer ends in ~3 turns
                if read.done():
                    break
                await asyncio.sleep(0)
        if not read.done() and not await self._send_read_end(read):
            return
        while True:
            await asyncio.wait([read], timeout=max(0.0, deadline - loop.time()))
            if not read.done():
                self._logger().warning("the channel read of a closed %s did not end in %gs", self.READ_OF, READ_END_S)
                return
            if read.cancelled() or read.exception() is not None or read.result().get("type") == READ_END:
                return
            read = asyncio.ensure_future(self.channel_receive())  # a message for the closed connection

    async def _send_read_end(self, read: asyncio.Future[Any]) -> bool:
        """Send :data:`READ_END` through the channel layer; False when it could not be sent (Redis
        unreachable), after cancelling ``read``, which nothing else can end then (once, awaited)."""
        sent = asyncio.ensure_future(self.channel_layer.send(self.channel_name, {"type": READ_END}))
        await asyncio.wait([sent], timeout=READ_END_S)
        if sent.done() and not sent.cancelled() and sent.exception() is None:
            return True
        self._logger().warning("could not end the channel read of a closed %s; cancelling it", self.READ_OF)
        if not sent.done():
            sent.cancel()
        read.cancel()
        with contextlib.suppress(BaseException):
            await read
        return False

    def _logger(self) -> logging.Logger:
        """The logger of the consumer's own module (an agent's read in ``scheduler.consumers``)."""
        return logging.getLogger(type(self).__module__)

    async def layer_read_end(self, message: dict[str, Any]) -> None:
        """:data:`READ_END` read while the connection runs: not possible (sent only at its end)."""
