"""tryout45: the CLI installer saves the server it came from; every option says what it does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairway_cli import cli as fw
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "fairway" / "config.json"
    monkeypatch.setenv("FAIRWAY_CONFIG", str(path))
    monkeypatch.delenv("FAIRWAY_URL", raising=False)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)
    return path


def test_the_installer_saves_its_server_as_the_default(config_file: Path):
    """`curl SERVER/cli/install.sh | bash` then `fairway login -u X` asked 127.0.0.1:8000."""
    saved, text = fw.adopt_server("https://fairway.example.org/api/v1/")
    assert saved
    assert json.loads(config_file.read_text()) == {"server": "https://fairway.example.org", "token": ""}
    assert config_file.stat().st_mode & 0o777 == 0o600
    assert "https://fairway.example.org" in text and str(config_file) in text
    config = fw.Config.load()
    assert config.server == "https://fairway.example.org"


def test_the_installer_keeps_a_server_the_user_chose(config_file: Path):
    config_file.parent.mkdir(parents=True)
    config_file.write_text(json.dumps({"server": "https://mine.example.org", "token": "fw_x"}))
    saved, text = fw.adopt_server("https://fairway.example.org")
    assert not saved
    assert json.loads(config_file.read_text()) == {"server": "https://mine.example.org", "token": "fw_x"}
    assert "https://mine.example.org" in text and "--server https://fairway.example.org login" in text
    # the same server again (a reinstall to upgrade): nothing to change, and it is the default
    saved, text = fw.adopt_server("https://mine.example.org/")
    assert saved and "already" in text
    assert json.loads(config_file.read_text())["token"] == "fw_x"


def test_the_installer_keeps_a_token_saved_for_the_default_server(config_file: Path):
    """A config with a token and no server logged in to the default: moving it would send that
    token nowhere (it goes only to the server it was saved with)."""
    config_file.parent.mkdir(parents=True)
    config_file.write_text(json.dumps({"token": "fw_x"}))
    saved, text = fw.adopt_server("https://fairway.example.org")
    assert not saved and fw.DEFAULT_SERVER in text
    assert json.loads(config_file.read_text()) == {"token": "fw_x"}


def test_an_unreadable_config_is_said_not_raised(config_file: Path):
    config_file.parent.mkdir(parents=True)
    config_file.write_text("[]")
    saved, text = fw.adopt_server("https://fairway.example.org")
    assert not saved and "not a Fairway CLI config" in text
    assert config_file.read_text() == "[]"


def test_notifications_say_plainly_what_is_not_set(logged_in, settings):  # noqa: F811
    """`fairway notifications` printed "webhook: - -> (no URL)" with no webhook set."""
    code, out, err = logged_in("notifications")
    assert code == fw.EXIT_OK, err
    assert out == (
        "email:   none (--email KINDS sends them)\nwebhook: none (--webhook URL --webhook-kinds KINDS sets one)\n"
    )
    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": ["hooks.example"]}
    code, out, err = logged_in("notifications", "--webhook", "https://hooks.example/x")
    assert code == fw.EXIT_OK, err
    assert "webhook: https://hooks.example/x, for no kinds: nothing is sent (--webhook-kinds KINDS)\n" in out
    code, out, err = logged_in("notifications", "--webhook-kinds", "failed")
    assert code == fw.EXIT_OK, err
    assert "webhook: failed -> https://hooks.example/x\n" in out


def test_every_option_of_every_command_has_help():
    """`fairway ls --help` said nothing of --budget and --limit (nor `show --help` of its id)."""
    import argparse

    missing = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix}{name} ")
            elif not action.help:  # options and positional arguments alike
                missing.append(prefix + ("/".join(action.option_strings) or action.dest))

    walk(fw.build_parser(), "fairway ")
    assert missing == []


def test_the_host_states_in_the_help_are_the_servers():
    from scheduler.models import Host

    assert tuple(Host.State.values) == fw.HOST_STATES
