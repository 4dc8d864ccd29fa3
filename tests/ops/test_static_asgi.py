"""Static files under ASGI: served whole, without Django's synchronous-iterator warning."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

from django.test import AsyncClient

CSS = Path(__file__).resolve().parents[2] / "static" / "fairway" / "fairway.css"


async def _get_static() -> tuple[int, bool, bytes]:
    answer = await AsyncClient().get("/static/fairway/fairway.css")
    return answer.status_code, answer.is_async, b"".join([chunk async for chunk in answer.streaming_content])


def test_static_file_under_asgi_streams_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        status, is_async, body = asyncio.run(_get_static())
    assert (status, is_async) == (200, True)
    assert body == CSS.read_bytes()


def test_static_file_under_wsgi_unchanged(client):
    answer = client.get("/static/fairway/fairway.css")
    assert answer.status_code == 200
    assert not answer.is_async
    assert b"".join(answer.streaming_content) == CSS.read_bytes()
