"""WhiteNoise under the ASGI server without Django's "must consume synchronous iterators" warning.

WhiteNoise (6.x) answers with a ``FileResponse`` whose file is read by a synchronous iterator;
Django's ASGI handler then warns on every static file and consumes it in one thread hop per
block. Under ASGI this middleware hands the same file over as an asynchronous iterator (each
block read in a worker thread); under WSGI (the test client, ``runserver``) it changes nothing.
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


class AsgiWhiteNoiseMiddleware(WhiteNoiseMiddleware):
    """``whitenoise.middleware.WhiteNoiseMiddleware`` that streams asynchronously under ASGI."""

    def serve(self, static_file: Any, request: Any) -> Any:  # type: ignore[override]
        response = super().serve(static_file, request)
        if isinstance(request, ASGIRequest) and response.file_to_stream is not None:
            file = response.file_to_stream
            response.file_to_stream = None
            response.streaming_content = _blocks(file)
        return response
