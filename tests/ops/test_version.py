"""One release number: pyproject, server, agent, CLI and the top released entry of CHANGELOG.md;
the agent-protocol compatibility rule as written in scheduler/version.py."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from agent import AGENT_VERSION
from agent.protocol import PROTOCOL_VERSION
from fairway_cli import __version__ as CLI_VERSION
from fairway_cli.cli import build_parser
from scheduler import agent_install, cli_install
from scheduler.version import SERVER_VERSION, accepts_agent

ROOT = Path(__file__).resolve().parents[2]


def test_one_version_everywhere():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["version"] == SERVER_VERSION == AGENT_VERSION == CLI_VERSION
    assert f"fairway_agent-{SERVER_VERSION}-py3-none-any.whl" == agent_install.WHEEL_NAME
    assert f"fairway_cli-{SERVER_VERSION}-py3-none-any.whl" == cli_install.WHEEL_NAME


def test_changelog_names_the_release():
    text = (ROOT / "CHANGELOG.md").read_text()
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", text, re.M)
    assert released and released[0] == SERVER_VERSION
    assert re.search(r"^## \[Unreleased\]", text, re.M)
    assert f"protocol version {PROTOCOL_VERSION}" in text


def test_fairway_version(capsys):
    try:
        build_parser().parse_args(["--version"])
    except SystemExit as exit_:
        assert exit_.code == 0
    assert capsys.readouterr().out.strip() == f"fairway {CLI_VERSION}"


def test_the_server_reports_its_version(client):
    assert client.get("/livez").json()["version"] == SERVER_VERSION


def test_agent_compatibility_rule():
    assert accepts_agent(PROTOCOL_VERSION)
    assert not accepts_agent(PROTOCOL_VERSION + 1)
    assert not accepts_agent(str(PROTOCOL_VERSION))
    assert not accepts_agent(True)
