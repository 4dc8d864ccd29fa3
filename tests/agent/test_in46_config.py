"""agentin46: agent config values the agent cannot use, refused at load with the loader's words."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import ConfigError, load_config

BASE = {"FAIRWAY_SERVER": "ws://s:8000/ws/agent/", "FAIRWAY_TOKEN": "t"}


def _load(tmp_path: Path, line: str) -> object:
    config = tmp_path / "agent.yaml"
    config.write_text(line + "\n")
    return load_config({}, config, BASE)


@pytest.mark.parametrize("value", ["0", "1", str((1 << 20) - 1), "9" * 30])
def test_a_log_cap_that_keeps_nothing_or_cannot_be_held_is_refused(tmp_path: Path, value: str) -> None:
    # log_max_bytes: 0 kept no log at all (cap_log punched away everything every 5 s)
    with pytest.raises(ConfigError, match=r"bad value for log_max_bytes: .*\(must be"):
        _load(tmp_path, f"log_max_bytes: {value}")


def test_a_log_cap_of_a_mebibyte_or_more_is_taken(tmp_path: Path) -> None:
    assert _load(tmp_path, f"log_max_bytes: {1 << 20}").log_max_bytes == 1 << 20  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["ftp://x", "x", "docker.sock", "unix ://x", "ssh://u@h"])
def test_a_docker_url_docker_cannot_reach_is_refused(tmp_path: Path, url: str) -> None:
    with pytest.raises(ConfigError, match=r"bad value for docker_url: .*\(must be a unix://, npipe://, tcp://"):
        _load(tmp_path, f"docker_url: '{url}'")


@pytest.mark.parametrize(
    "url",
    ["", "unix:///var/run/docker.sock", "tcp://10.0.0.2:2376", "http://h:2375", "https://h", "npipe:////./pipe/x"],
)
def test_docker_urls_of_the_engine_are_taken(tmp_path: Path, url: str) -> None:
    assert _load(tmp_path, f"docker_url: '{url}'").docker_url == url  # type: ignore[attr-defined]


def test_no_simulated_gpus_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"bad value for gpus: 0 \(must be >= 1"):
        _load(tmp_path, "gpus: 0")
    with pytest.raises(ConfigError, match=r"bad value for gpus: '0' \(must be >= 1"):
        load_config({}, None, {**BASE, "FAIRWAY_GPUS": "0"})
