"""WhiteNoise under the ASGI server without Django's "must consume synchronous iterators" warning.

WhiteNoise (6.x) answers with a ``FileResponse`` whose file is read by a synchronous iterator;
Django's ASGI handler then warns on every static file and consumes it in one thread hop per
block. Under ASGI this middleware hands the same file over as an asynchronous iterator (each
block read in a worker thread), and a response without a file (HEAD, 304 Not Modified, 405) an
empty asynchronous iterator; under WSGI (the test client, ``runserver``) it changes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from whitenoise.middleware import WhiteNoiseMiddleware

BLOCK_BYTES = 64 * 1024


async def _blocks(file: Any) -> AsyncIterator[bytes]:
    read = sync_to_async(file.read, thread_sensitive=False)
    try:
        while chunk := await read(BLOCK_BYTES):
            yield chunk
    finally:
        await sync_to_async(file.close, thread_sensitive=False)()


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield  # an asynchronous generator that yields nothing


class AsgiWhiteNoiseMiddleware(WhiteNoiseMiddleware):
    """``whitenoise.middleware.WhiteNoiseMiddleware`` that streams asynchronously under ASGI."""

    def serve(self, static_file: Any, request: Any) -> Any:  # type: ignore[override]
        response = super().serve(static_file, request)
        if isinstance(request, ASGIRequest):
            # A HEAD, a 304 or a 405 has no file: WhiteNoise then streams an empty tuple, a
            # synchronous iterator all the same (the handler's warning on every HEAD probe).
            file = response.file_to_stream
            response.file_to_stream = None
            response.streaming_content = _nothing() if file is None else _blocks(file)
        return response
