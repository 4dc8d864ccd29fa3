"""Break session 37: the agent reads its config file with the strict loader every hand-written
YAML goes through (fairway_common.strict_yaml): YAML 1.1's octal, base 60 and yes/no are refused,
not silently read as other values, and yes/no/on/off are text (YAML 1.2)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from agent.config import ConfigError, load_config

BASE = {"FAIRWAY_SERVER": "ws://s/", "FAIRWAY_TOKEN": "t"}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("cpus: 010", "'010' is 8"),  # safe_load: 8 CPUs
        ("heartbeat: 1:30", "'1:30' is 90"),  # safe_load: 90 s
        ("heartbeat: 1:30.5", "'1:30.5' is a number in base 60"),  # safe_load: 90.5 s
    ],
)
def test_a_yaml_1_1_surprise_in_the_config_file_is_refused_naming_its_line(
    tmp_path: Path, line: str, said: str
) -> None:
    # Given a config file whose value YAML 1.1 reads as another number or a boolean
    config = tmp_path / "agent.yaml"
    config.write_text(f"gpus: 2\n{line}\n")
    # When the agent loads it, Then it refuses it, naming the line and what YAML 1.1 makes of it
    with pytest.raises(ConfigError, match=rf"line 2: {said}"):
        load_config({}, config, BASE)


def test_decimal_and_quoted_values_read_as_written(tmp_path: Path) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text('cpus: 10\nheartbeat: 90\nhost_name: no\nmodel: "010"\nisolation: {cgroup: off}\n')
    loaded = load_config({}, config, BASE)
    # safe_load named the host "False" (YAML 1.1's boolean no)
    assert (loaded.cpus, loaded.heartbeat, loaded.host_name, loaded.model) == (10, 90.0, "no", "010")
    assert loaded.isolation.cgroup == "off"


def test_the_isolation_environment_value_is_read_strictly_too() -> None:
    with pytest.raises(ConfigError, match="bad value for isolation: .*'010' is 8"):
        load_config({}, None, {**BASE, "FAIRWAY_ISOLATION": "{mode: agent, pids_max: 010}"})
    with pytest.raises(ConfigError, match="bad value for isolation: .*allow_root"):  # yes is text, not true
        load_config({}, None, {**BASE, "FAIRWAY_ISOLATION": "{mode: agent, allow_root: yes}"})


def test_both_served_wheels_ship_the_strict_loader() -> None:
    # The agent's wheel held agent/ only, the CLI's fairway_cli/ only: each imports fairway_common
    from scheduler import agent_install, cli_install

    for module in (agent_install, cli_install):
        archive = zipfile.ZipFile(io.BytesIO(module.build_wheel()))
        assert "fairway_common/strict_yaml.py" in archive.namelist()
        top_level = next(n for n in archive.namelist() if n.endswith("top_level.txt"))
        assert "fairway_common" in archive.read(top_level).decode().split()
