"""Break session 46b: a heartbeat period no shorter than the silence that takes a host offline
(``FAIRWAY_HEARTBEAT_S`` >= ``FAIRWAY_HOST_OFFLINE_AFTER_S``) was taken: every agent, told the
period in its ``welcome``, was silent between heartbeats long enough for the sweep to mark its
host offline (and, from ``FAIRWAY_HOST_LOST_AFTER_S`` on, to end every attempt on every host
``lost``). The server now refuses to start with it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.breaker.test_break26 import load_settings


@pytest.mark.parametrize(
    "env",
    [
        {"FAIRWAY_HEARTBEAT_S": "30"},  # the default offline threshold: 30 s
        {"FAIRWAY_HEARTBEAT_S": "600"},  # past the default lost threshold too (300 s)
        {"FAIRWAY_HEARTBEAT_S": "10", "FAIRWAY_HOST_OFFLINE_AFTER_S": "5"},
        {"FAIRWAY_HEARTBEAT_S": "15.5"},  # one late heartbeat would take the host offline
    ],
)
def test_a_heartbeat_period_a_host_goes_offline_in_is_refused(monkeypatch: pytest.MonkeyPatch, env: dict) -> None:
    with pytest.raises(
        ImproperlyConfigured, match=r"FAIRWAY_HEARTBEAT_S=.* must be at most half of FAIRWAY_HOST_OFFLINE_AFTER_S="
    ):
        load_settings(monkeypatch, **env)


def test_a_heartbeat_period_within_the_offline_threshold_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = load_settings(monkeypatch, FAIRWAY_HEARTBEAT_S="15")["FAIRWAY"]
    assert conf["HEARTBEAT_S"] == 15
