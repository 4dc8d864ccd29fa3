"""Redis round trips of one API request (issue 15), counted with a redis-py hook, not timed.

A plain submission talks to Redis three times, the fewest DRF's order allows: the memos' versions
(``config.memo.request_tokens``, one ``MGET``: the token must be known to authenticate), the
user's throttle (``config.throttling``, one ``EVALSHA``: after authentication and permissions, as
DRF orders them) and, once the response is built, one redis-py pipeline with the tick's "pending"
marker (``SET NX``, ``scheduler.tasks.request_tick``) and the submission histogram's increments
(``scheduler.histograms.observe_many``), which were a round trip each (``config.redis_trip``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis.connection
import redis.exceptions
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from config import redis_trip
from scheduler import histograms, tasks

URL = "/api/v1/workloads/"
CLUSTERS = [1, 2, 3, 9101, 9102]  # ids whose markers a test may set (the test database's first clusters too)


def _commands(packed: bytes) -> list[list[bytes]]:
    """The commands of one packed request (RESP arrays of bulk strings, as redis-py packs them)."""
    out, i = [], 0
    while i < len(packed):
        j = packed.index(b"\r\n", i)
        n, i = int(packed[i + 1 : j]), j + 2
        args = []
        for _ in range(n):
            j = packed.index(b"\r\n", i)
            size, i = int(packed[i + 1 : j]), j + 2
            args.append(packed[i : i + size])
            i += size + 2
        out.append(args)
    return out


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, redis_cache: str, settings: Any) -> Iterator[list[Any]]:
    """The tick's messages, recorded, not sent; the tick's and the histograms' client on
    ``REDIS_URL`` (its markers and histograms are deleted afterwards)."""
    settings.REDIS_URL = os.environ["REDIS_URL"]
    tasks._redis.cache_clear()
    tasks.reset_debounce(CLUSTERS)
    histograms.reset()
    messages: list[Any] = []
    monkeypatch.setattr(tasks.tick, "send_with_options", lambda **kw: messages.append(kw["args"]))
    try:
        yield messages
    finally:
        settings.REDIS_URL = os.environ["REDIS_URL"]
        tasks._redis.cache_clear()
        tasks.reset_debounce(CLUSTERS)
        histograms.reset()
        tasks._redis.cache_clear()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch, sent: list[Any]) -> list[list[bytes]]:
    """Every round trip to Redis (one ``send_packed_command``: a command, or a pipeline's
    commands) as its command names."""
    seen: list[list[bytes]] = []
    real = redis.connection.AbstractConnection.send_packed_command

    def send_packed_command(self: Any, command: Any, check_health: bool = True) -> None:
        parts = [command] if isinstance(command, (bytes, str, memoryview)) else command
        packed = b"".join(p.encode() if isinstance(p, str) else bytes(p) for p in parts)
        seen.append([args[0].upper() for args in _commands(packed)])
        return real(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", send_packed_command)
    return seen


@pytest.mark.django_db(transaction=True)  # the service's commit runs its hooks inside the request
def test_a_plain_submission_makes_three_redis_round_trips(trips, sent, researcher_client, submission, cluster):
    assert researcher_client.post(URL, data=submission(), format="json").status_code == 201  # warm: connections
    # No tick pending: this request sets the marker and one message goes (dramatiq's own enqueue,
    # recorded here), after three round trips.
    tasks.reset_debounce([cluster.pk])
    sent.clear()
    trips.clear()
    assert researcher_client.post(URL, data=submission(), format="json").status_code == 201
    assert trips == [[b"MGET"], [b"EVALSHA"], [b"SET", b"HINCRBY", b"HINCRBY", b"HINCRBYFLOAT"]]
    assert sent == [(cluster.pk,)]
    # That tick pending, once this process's window is over: the marker is asked, no message goes.
    tasks._own_tick_until.clear()
    trips.clear()
    assert researcher_client.post(URL, data=submission(), format="json").status_code == 201
    assert trips == [[b"MGET"], [b"EVALSHA"], [b"SET", b"HINCRBY", b"HINCRBY", b"HINCRBYFLOAT"]]
    assert sent == [(cluster.pk,)]
    # Within the window: the marker is not asked (scheduler.tasks.request_tick).
    tasks._own_tick_until[cluster.pk] = float("inf")
    trips.clear()
    assert researcher_client.post(URL, data=submission(), format="json").status_code == 201
    assert trips == [[b"MGET"], [b"EVALSHA"], [b"HINCRBY", b"HINCRBY", b"HINCRBYFLOAT"]]
    # Every observation arrived: four submissions counted.
    raw = histograms._raw(histograms.SUBMISSION_DURATION)
    assert raw[f"{cluster.pk}{histograms.SEP}count"] == 4.0


def _redis_state() -> tuple[Any, ...]:
    client = tasks._redis()
    hists = {h.name: histograms._raw(h) for h in histograms.ALL}
    return hists, [client.pttl(tasks._marker_key(c)) > 0 for c in (9101, 9102)]


@hsettings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    debounce=st.sampled_from([0.0, 0.5]),
    requests=st.lists(
        st.tuples(
            # a tick asked for cluster 1 or 2, or a submission's duration observed
            st.lists(st.one_of(st.integers(1, 2), st.floats(0, 20)), max_size=6),
            st.booleans(),  # the first cluster's tick begins afterwards (clears its marker)
            st.sampled_from([0.0, 0.1, 0.3]),  # seconds until the next request
        ),
        max_size=8,
    ),
)
def test_deferred_writes_do_what_the_writes_at_once_did(sent, settings, monkeypatch, debounce, requests):
    """The oracle: the same requests' tick asks and observations, each sent at once (outside
    ``one_trip``) and deferred to the request's end (inside): the same tick messages, the same
    markers and histograms in Redis; deferred, one pipeline per request at most."""
    settings.FAIRWAY = {**settings.FAIRWAY, "TICK_DEBOUNCE_S": debounce}
    clock = [1000.0]
    monkeypatch.setattr(tasks.time, "monotonic", lambda: clock[0])
    real_send = redis_trip.send
    pipelines: list[int] = []
    monkeypatch.setattr(redis_trip, "send", lambda writes: pipelines.append(len(writes)) or real_send(writes))
    outcomes = []
    for deferred in (False, True):
        tasks.reset_debounce(CLUSTERS)
        histograms.reset()
        sent.clear()
        for ops, tick_begins, pause in requests:
            pipelines.clear()
            with redis_trip.one_trip() if deferred else contextlib.nullcontext():
                for op in ops:
                    if isinstance(op, int):
                        tasks.request_tick(9100 + op)
                    else:
                        histograms.observe(histograms.SUBMISSION_DURATION, op, str(op > 5))
            if deferred:
                assert len(pipelines) <= 1
            if tick_begins:
                tasks._clear_marker(9101)
            clock[0] += pause
        outcomes.append((list(sent), _redis_state()))
    assert outcomes[0] == outcomes[1]


def test_a_lost_connection_fails_the_tick_s_ask_not_the_metric(sent, settings, monkeypatch):
    """Deferred as at once: a Redis error reaches the caller of ``request_tick`` (at the end of the
    request, after every write had its results), never an observation's."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens
    tasks._redis.cache_clear()
    histograms.observe(histograms.SUBMISSION_DURATION, 0.01, "1")  # at once: logged, not raised
    with redis_trip.one_trip():
        histograms.observe(histograms.SUBMISSION_DURATION, 0.01, "1")
    with pytest.raises(redis.exceptions.ConnectionError):
        tasks.request_tick(9101)
    with pytest.raises(redis.exceptions.ConnectionError), redis_trip.one_trip():
        assert tasks.request_tick(9101) is None  # decided at the block's end
        histograms.observe(histograms.SUBMISSION_DURATION, 0.01, "1")
    assert sent == []
