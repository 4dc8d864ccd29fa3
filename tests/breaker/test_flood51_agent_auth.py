"""flood51: failed agent authentications are limited per client address.

Before: every connection to ``/ws/agent/`` with a bad or missing host token cost two queries on the
agent-database threads (``open_agent_link``, ``link_refusal``) and one warning line, without any
bound: a flood from one address queued before real agents' hellos and events and filled the log.
Now past ``FAIRWAY_THROTTLE_AGENT_AUTH`` failures from one address (the API's client address:
``FAIRWAY_TRUSTED_PROXIES``) a connection is closed 1013 before any query, and the process logs one
line a minute about it; a good token from elsewhere connects as ever, and a success counts nothing.

Queries are counted on every thread (the agent-database threads run them, not the test's):
``assertNumQueries`` sees only its own thread's connection.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.db.backends import utils as db_utils

from config.asgi import application
from scheduler import agent_auth_limit
from scheduler.consumers import CLOSE_TRY_AGAIN_LATER, CLOSE_UNAUTHORIZED
from scheduler.models import Cluster
from tests.test_gateway_batch import _register, _run


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement run, on any thread."""
    seen: list[str] = []
    lock = threading.Lock()
    real = db_utils.CursorWrapper._execute_with_wrappers

    def counted(self: Any, sql: str, *args: Any, **kwargs: Any) -> Any:
        with lock:
            seen.append(sql)
        return real(self, sql, *args, **kwargs)

    monkeypatch.setattr(db_utils.CursorWrapper, "_execute_with_wrappers", counted)
    yield seen


@pytest.fixture(autouse=True)
def _fresh_refusal_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's once-a-minute line starts afresh (another test may have logged one)."""
    monkeypatch.setattr(agent_auth_limit, "REFUSALS", agent_auth_limit.RefusalLog())


def _rate(settings: Any, rate: str, proxies: int = 0) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "NUM_PROXIES": proxies,
        "DEFAULT_THROTTLE_RATES": {**settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], "agent_auth": rate},
    }


async def _connect(token: str | None, client: str, forwarded: str | None = None) -> tuple[WebsocketCommunicator, Any]:
    """The connection and its close code, or None while it stays open."""
    headers = [] if token is None else [(b"authorization", f"Bearer {token}".encode())]
    if forwarded is not None:
        headers.append((b"x-forwarded-for", forwarded.encode()))
    comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
    comm.scope["client"] = (client, 40000)
    assert (await comm.connect(timeout=5))[0]
    if await comm.receive_nothing(timeout=0.3):
        return comm, None
    out = await comm.receive_output(timeout=5)
    assert out["type"] == "websocket.close", out
    return comm, out


async def _code(token: str | None, client: str, forwarded: str | None = None) -> int | None:
    comm, out = await _connect(token, client, forwarded)
    await comm.disconnect()
    return None if out is None else out["code"]


def _limit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "FAIRWAY_THROTTLE_AGENT_AUTH" in r.getMessage()]


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_bad_token_flood_is_refused_without_queries_and_a_good_agent_still_connects(
    settings: Any, caplog: pytest.LogCaptureFixture, queries: list[str]
) -> None:
    _rate(settings, "5/min")
    [(_host, token)] = _register(Cluster.objects.create(name="flood"), 1, prefix="f")
    caplog.set_level(logging.INFO, logger="scheduler.consumers")
    result: dict[str, Any] = {}

    async def run() -> None:
        # the bound's worth of failures: each asked the database and was logged, as before
        first = [await _code(t, "10.6.6.6") for t in ("fwh_guess", "fwh_guess", "fwh_guess", None, None)]
        assert first == [CLOSE_UNAUTHORIZED] * 5
        result["before"] = len(queries)
        flood = [await _code(f"fwh_guess{i}", "10.6.6.6") for i in range(40)]
        result["flood_queries"] = len(queries) - result["before"]
        assert flood == [CLOSE_TRY_AGAIN_LATER] * 40
        # the refusal says why and when to come back (the agent logs the reason and retries)
        comm, out = await _connect("fwh_guess", "10.6.6.6")
        await comm.disconnect()
        assert "too many failed" in out["reason"] and "try again in" in out["reason"], out
        # a real agent from another address, during the flood
        comm, out = await _connect(token, "10.1.1.1")
        assert out is None, out  # accepted and open
        await comm.disconnect()

    _run(run())
    assert result["flood_queries"] == 0, queries[result["before"] :]
    refused = [r for r in caplog.records if "agent connection refused:" in r.getMessage()]
    assert len(refused) == 5  # one line per failure that reached the database, none per flood attempt
    lines = _limit_lines(caplog)
    assert len(lines) == 1, lines  # 41 refusals, one line
    assert "10.6.6.6" in lines[0] and "5/min" in lines[0], lines


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_successes_do_not_count_and_failures_expire(settings: Any, queries: list[str]) -> None:
    _rate(settings, "2/s")
    [(_host, token)] = _register(Cluster.objects.create(name="expire"), 1, prefix="e")

    async def run() -> None:
        for _ in range(4):  # the same address: a good token is never counted
            comm, out = await _connect(token, "10.2.2.2")
            assert out is None, out
            await comm.disconnect()
        assert [await _code("fwh_bad", "10.2.2.2") for _ in range(3)] == [
            CLOSE_UNAUTHORIZED,
            CLOSE_UNAUTHORIZED,
            CLOSE_TRY_AGAIN_LATER,
        ]
        await asyncio.sleep(1.2)  # the window (1 s) passed: the address's failures are forgotten
        before = len(queries)
        assert await _code("fwh_bad", "10.2.2.2") == CLOSE_UNAUTHORIZED
        assert len(queries) > before  # judged by the database again

    _run(run())


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_the_address_is_the_apis_client_address_behind_the_trusted_proxies(settings: Any) -> None:
    """With one trusted proxy the address is the one it saw (the last of X-Forwarded-For), as for
    the API's login limit: a client varying what it sends before it gets no new counter, and
    another client behind the same proxy has its own."""
    _rate(settings, "2/min", proxies=1)

    async def run() -> None:
        codes = [await _code("fwh_bad", "127.0.0.1", f"1.2.3.{i}, 10.7.7.7") for i in range(4)]
        assert codes == [CLOSE_UNAUTHORIZED] * 2 + [CLOSE_TRY_AGAIN_LATER] * 2
        assert await _code("fwh_bad", "127.0.0.1", "10.8.8.8") == CLOSE_UNAUTHORIZED

    _run(run())


def test_the_bound_is_a_setting_refused_by_name_when_no_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    assert load_settings(monkeypatch)["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]["agent_auth"] == "30/min"
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_THROTTLE_AGENT_AUTH=.* is not a rate"):
        load_settings(monkeypatch, FAIRWAY_THROTTLE_AGENT_AUTH="lots")


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("cache", ["local memory", "redis"])
def test_a_burst_sent_at_once_gets_no_more_checks_than_the_bound(
    settings: Any, request: pytest.FixtureRequest, queries: list[str], cache: str
) -> None:
    """Each connection takes its place before its token is checked, in one atomic step of the
    cache (Redis in production): 30 bad connections sent at once get 5 checks, as the logins'
    burst (sso46), not 30 that all read a count below the bound."""
    if cache == "redis":
        request.getfixturevalue("redis_cache")
    _rate(settings, "5/min")

    async def run() -> list[int | None]:
        return list(await asyncio.gather(*(_code(f"fwh_burst{i}", "10.4.4.4") for i in range(30))))

    codes: list[int | None] = []

    async def collect() -> None:
        codes.extend(await run())

    _run(collect())
    assert sorted(codes, key=str) == sorted([CLOSE_TRY_AGAIN_LATER] * 25 + [CLOSE_UNAUTHORIZED] * 5, key=str)
