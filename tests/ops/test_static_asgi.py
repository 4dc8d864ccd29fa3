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


async def _asgi(method: str, path: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> list[dict]:
    """One request through Django's own ASGI handler (as uvicorn calls it): the messages it sends."""
    from django.core.handlers.asgi import ASGIHandler

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    requested = False
    never = asyncio.Event()

    async def receive() -> dict:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await never.wait()  # no disconnect while the handler answers
        return {"type": "http.disconnect"}

    sent: list[dict] = []

    async def send(message: dict) -> None:
        sent.append(message)

    await ASGIHandler()(scope, receive, send)
    return sent


def _answer(messages: list[dict]) -> tuple[int, dict[bytes, bytes], bytes]:
    start = next(m for m in messages if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
    return start["status"], dict(start["headers"]), body


def test_head_and_not_modified_under_asgi_without_warning():
    """ops30b: a HEAD of a static file (and a conditional GET answered 304) came back from
    WhiteNoise with an empty *synchronous* iterator, which the ASGI handler warned about
    ("StreamingHttpResponse must consume synchronous iterators") on every probe."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _answer(asyncio.run(_asgi("GET", "/static/fairway/fairway.css")))
        head = _answer(asyncio.run(_asgi("HEAD", "/static/fairway/fairway.css")))
        etag = got[1][b"ETag"]
        again = _answer(asyncio.run(_asgi("GET", "/static/fairway/fairway.css", ((b"if-none-match", etag),))))
    assert (got[0], got[2]) == (200, CSS.read_bytes())
    assert (head[0], head[2]) == (200, b"")
    assert head[1][b"Content-Length"] == str(len(CSS.read_bytes())).encode()
    assert (again[0], again[2]) == (304, b"")
