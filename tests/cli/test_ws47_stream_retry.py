"""ws47: a stream refused for a moment says when to try again, as an API request's answer does.

An API request's 429 with ``Retry-After: 7`` ends with "try again in 7 s"; ``fairway exec -i``,
``-it`` and ``fairway port-forward`` refused the same way (close 4429) said "try again shortly":
the server gave no seconds. Its close reason now carries them (``{"retry_after": 7}``,
scheduler.exec_session; tests/api/test_ws47_retry_after.py), and so may an HTTP 429 or 503 at the
upgrade (its ``Retry-After``); the CLI reads both as it reads the header (``words.retry_after_s``)
and says them in the one wording (``words.try_later_text``)."""

from __future__ import annotations

import json
import struct

import pytest

from fairway_cli import session
from fairway_cli.cli import EXIT_TEMPFAIL, _stream_refusal, _stream_unreached
from fairway_cli.words import MAX_RETRY_AFTER_S, THROTTLED_WORDS, UNAVAILABLE_TEXT
from fairway_cli.wsclient import WebSocketError
from tests.cli.test_cli46_streams import DATABASE_UNAVAILABLE
from tests.cli.test_cli46b_try_later import THROTTLED, _api_429
from tests.cli.wsfake import STREAMS, fake_server
from tests.cli.wsfake import run_cli as _main

RETRY_7 = json.dumps({"retry_after": 7})


@pytest.mark.parametrize("argv", STREAMS, ids=["-i", "-it", "port-forward"])
def test_a_throttled_stream_says_the_servers_seconds_as_an_api_429_does(monkeypatch, tmp_path, argv) -> None:
    _code, _out, api_err = _api_429(monkeypatch, tmp_path, THROTTLED, retry_after="7")
    with fake_server(refusal=THROTTLED, close=4429, reason=RETRY_7) as server:
        code, out, err = _main(monkeypatch, tmp_path, server.url, *argv)
    assert (code, out) == (EXIT_TEMPFAIL, ""), err
    assert err.splitlines()[-1] == api_err.splitlines()[-1] == f"  {THROTTLED_WORDS}: try again in 7 s", err


@pytest.mark.parametrize("argv", STREAMS, ids=["-i", "-it", "port-forward"])
def test_a_429_at_the_upgrade_says_its_retry_after(monkeypatch, tmp_path, argv) -> None:
    with fake_server(status=429, retry_after="7") as server:
        code, _out, err = _main(monkeypatch, tmp_path, server.url, *argv)
    assert code == EXIT_TEMPFAIL, err
    assert err.splitlines()[-1] == f"  {THROTTLED_WORDS}: try again in 7 s", err


def test_a_503_streams_seconds_are_kept_and_said_as_an_api_503s() -> None:
    refused = session.SessionRefused(DATABASE_UNAVAILABLE["code"], DATABASE_UNAVAILABLE["message"])
    refused.closed(struct.pack("!H", 4503) + json.dumps({"retry_after": 2}).encode())
    error = _stream_refusal(refused, 42)
    assert (error.exit_code, error.status, error.retry_after) == (EXIT_TEMPFAIL, 503, 2.0)
    assert error.message.splitlines()[-1] == f"  {UNAVAILABLE_TEXT}"  # an API 503's line (it names no seconds)
    unreached = _stream_unreached("http://x", WebSocketError("the server refused the websocket: HTTP 503", 503, "2"))
    assert (unreached.exit_code, unreached.retry_after) == (EXIT_TEMPFAIL, 2.0)


@pytest.mark.parametrize(
    ("reason", "seconds"),
    [
        (b"", None),  # the server's refusals before ws47, and every one without a Retry-After
        (b'{"retry_after": 99999}', float(MAX_RETRY_AFTER_S)),  # at most, as a header's
        (b"not json", None),
        (b'{"retry_after": "soon"}', None),
        (b"[1]", None),
    ],
)
def test_a_close_reason_is_read_as_a_retry_after_header_is(reason, seconds) -> None:
    refused = session.SessionRefused("throttled", "Request was throttled.")
    refused.closed(struct.pack("!H", 4429) + reason)
    assert refused.retry_after == seconds
