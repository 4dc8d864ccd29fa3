"""The push of desired state (``scheduler.gateway.push_desired_state``) sends its hosts' group
messages at once, bounded, not one host after another (docs/benchmarks/api_load.md, "Seventh
pass"); a host whose send fails does not stop the others (their next heartbeat flush repairs it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from scheduler import gateway


class _Layer:
    """A channel layer that records its group sends and how many were in flight at once."""

    def __init__(self, fail: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.fail = fail

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for _ in range(3):  # a few round trips: every other send gets its turn meanwhile
                await asyncio.sleep(0)
            if group in self.fail:
                raise ConnectionError(group)
            self.sent.append((group, message))
        finally:
            self.in_flight -= 1


@pytest.fixture
def layer(monkeypatch: pytest.MonkeyPatch) -> _Layer:
    fake = _Layer(fail={gateway.host_group(3)})
    monkeypatch.setattr(gateway, "get_channel_layer", lambda: fake)
    return fake


def test_a_push_sends_every_hosts_message_at_once(layer: _Layer) -> None:
    gateway.push_desired_state([5, 1, 2, 1])
    assert sorted(g for g, _ in layer.sent) == [gateway.host_group(h) for h in (1, 2, 5)]
    assert all(m == {"type": "desired.state"} for _, m in layer.sent)
    assert layer.most_in_flight == 3  # not one after another


def test_a_push_of_many_hosts_keeps_a_bounded_number_in_flight(layer: _Layer) -> None:
    hosts = range(10, 10 + 3 * gateway.GROUP_SENDS_IN_FLIGHT)
    gateway.push_desired_state(hosts)
    assert len(layer.sent) == len(hosts)
    assert layer.most_in_flight == gateway.GROUP_SENDS_IN_FLIGHT


def test_a_failed_host_does_not_stop_the_others(layer: _Layer, caplog: pytest.LogCaptureFixture) -> None:
    gateway.push_desired_state([1, 2, 3, 4])  # never raises
    assert sorted(g for g, _ in layer.sent) == [gateway.host_group(h) for h in (1, 2, 4)]
    assert "hosts [3] failed" in caplog.text
