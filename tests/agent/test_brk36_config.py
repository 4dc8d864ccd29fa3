"""Break session 36: the agent's own numbers (its config and its hello) are read as the rest of
Fairway reads numbers, and a host's memory is at least what one attempt runs in."""

from __future__ import annotations

import json

import pytest

from agent import protocol
from agent.config import ConfigError, load_config

BASE = {"FAIRWAY_SERVER": "ws://s/", "FAIRWAY_TOKEN": "t"}


@pytest.mark.parametrize(
    ("key", "text"),
    [
        ("GPUS", "1_0"),  # int() read 10
        ("GPUS", "٣"),  # Arabic-Indic 3
        ("CPUS", "１２"),  # fullwidth 12
        ("LOG_MAX_BYTES", "1_000"),
        ("HEARTBEAT", "٥"),  # float() read 5.0
        ("BACKOFF_MAX", "1_0"),
    ],
)
def test_an_environment_number_of_other_digits_is_refused_naming_it(key: str, text: str) -> None:
    # Given a number in the agent's environment written with other digits or an underscore
    # When the agent loads its config, Then it refuses it, naming the key (it was read as a number)
    with pytest.raises(ConfigError, match=rf"bad value for {key.lower()}: .*ASCII digits"):
        load_config({}, None, {**BASE, f"FAIRWAY_{key}": text})


def test_plain_numbers_in_the_environment_still_load() -> None:
    config = load_config({}, None, {**BASE, "FAIRWAY_GPUS": " 4 ", "FAIRWAY_HEARTBEAT": "0.5", "FAIRWAY_CPUS": "12"})
    assert (config.gpus, config.heartbeat, config.cpus) == (4, 0.5, 12)


@pytest.mark.parametrize("memory", [64, "64", 64_000, (6 << 20) - 1])
def test_a_host_memory_below_what_one_attempt_runs_in_is_refused_at_load(memory: object) -> None:
    # ``memory: 64`` meant as gigabytes is 64 bytes: every start on the host failed (a limit of 8
    # bytes per GPU), and every explicit memory request was refused as more than any host has.
    with pytest.raises(ConfigError, match=r"bad value for memory: .*is bytes and must be at least 6291456"):
        load_config({"memory": memory}, None, BASE)
    assert load_config({"memory": 6 << 20}, None, BASE).memory == 6 << 20


def test_a_hello_reporting_less_memory_than_one_attempt_runs_in_is_invalid() -> None:
    hello = {"v": 1, "type": "hello", "id": 1, "host": "h", "agent_version": "1", "gpus": [], "attempts": []}
    with pytest.raises(protocol.ProtocolError, match="memory"):
        protocol.decode(json.dumps({**hello, "memory": 64}), allowed={"hello"})
    assert protocol.decode(json.dumps({**hello, "memory": 64 << 30}), allowed={"hello"}).memory == 64 << 30
