"""Break session 46b: the agent's own config file and environment. A value the agent cannot use
is refused when the config is loaded, with a clear ``ConfigError``, not later: a ``state_dir``
holding NUL raised a traceback at startup, and a ``host_name`` the server never gives a host
(too long, a lone surrogate, a blank) was taken, then every connection's hello failed (unsendable,
or refused by the server) and the agent reconnected for ever."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import ConfigError, load_config

BASE = {"FAIRWAY_SERVER": "ws://s:8000/ws/agent/", "FAIRWAY_TOKEN": "t"}


@pytest.mark.parametrize(("escape", "said"), [("\\0", "holds NUL"), ("\\uD800", "a lone surrogate")])
def test_a_state_dir_no_path_can_hold_is_refused_at_load(tmp_path: Path, escape: str, said: str) -> None:
    # Given a config file whose state_dir holds a NUL or a lone surrogate (YAML escapes; the
    # environment cannot carry them)
    config = tmp_path / "agent.yaml"
    config.write_text(f'state_dir: "/var/lib/fw{escape}x"\n')
    # When the agent loads it, Then it is refused naming the key (the startup's mkdir raised
    # "ValueError: embedded null byte" or a UnicodeEncodeError with a traceback)
    with pytest.raises(ConfigError, match=rf"bad value for state_dir: .*{said}"):
        load_config({}, config, BASE)


@pytest.mark.parametrize(
    "name",
    ["h" * 300, "h" * 129, "node\ud800", "node 1", "-node", "node\u200b", "nöde", "node/1", ".node"],
)
def test_a_host_name_the_server_never_gives_is_refused_at_load(name: str) -> None:
    # Given a host name no host of the server can have (scheduler.services' rule of a join)
    # When the agent loads it, Then it is refused with the rule, before any connection
    with pytest.raises(
        ConfigError, match=r"bad value for host_name: .*\(1-128 of \[A-Za-z0-9\._-\], starting alphanumeric"
    ):
        load_config({}, None, {**BASE, "FAIRWAY_HOST_NAME": name})


@pytest.mark.parametrize("name", ["gpu-node-01", "n", "a" * 128, "node1.cluster.example.org", "Node_7"])
def test_a_host_name_the_server_gives_is_taken(name: str) -> None:
    assert load_config({}, None, {**BASE, "FAIRWAY_HOST_NAME": name}).host_name == name


def test_the_agent_and_the_server_hold_one_host_name_rule() -> None:
    from agent import protocol
    from scheduler import services
    from scheduler.scenarios import spec

    assert services.HOST_NAME_RE is protocol.HOST_NAME_RE
    assert spec.HOST_NAME_RE is protocol.HOST_NAME_RE
    from scheduler.api.hosts import HostViewSet

    assert HostViewSet.lookup_value_regex == protocol.HOST_NAME_PATTERN


@pytest.mark.parametrize(
    ("model", "said"),
    [("M" * 65, "must be 1-64 characters"), ("H100\u200b", r"U\+200B"), ("H100\u202e", r"U\+202E")],
)
def test_a_model_no_gpu_can_have_is_refused_at_load(model: str, said: str) -> None:
    # Given the simulated GPUs' model, which the hello reports: one the server refuses (a join's
    # rule, scheduler.services._check_gpus) was taken, then every hello was answered "invalid" and
    # the agent's heartbeats "send hello first" for as long as it ran
    # When the agent loads it, Then it is refused with that rule, before any connection
    with pytest.raises(ConfigError, match=rf"bad value for model: .*{said}"):
        load_config({}, None, {**BASE, "FAIRWAY_MODEL": model})


def test_the_agent_and_the_server_hold_one_gpu_text_rule() -> None:
    from fairway_common import gpu_text as common
    from scheduler import gpu_text

    assert gpu_text.gpu_text_problem is common.gpu_text_problem
    assert gpu_text.invisible_problem is common.invisible_problem
