"""brk51: a server URL that ``urlsplit`` refuses (an unclosed or bad IPv6 bracket), given by
``--server``, ``$FAIRWAY_URL`` or the saved config, is the CLI's usage error naming it. Before: a
``ValueError: Invalid IPv6 URL`` traceback from the comparison of the saved token's server, before
any command ran."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from fairway_cli.cli import EXIT_USAGE, main, same_server

BAD = ["http://[::1", "http://[zz]:80", "https://fairway]:443"]


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, err.getvalue()


@pytest.fixture
def _home(monkeypatch: Any, tmp_path: Any) -> Any:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("FAIRWAY_URL", raising=False)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)
    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "config.json"))
    return tmp_path


@pytest.mark.parametrize("url", BAD)
def test_a_bad_server_url_in_the_config_is_a_usage_error(url: str, _home: Any) -> None:
    path = _home / "config.json"
    path.write_text(json.dumps({"server": url, "token": "x"}))
    path.chmod(0o600)
    code, err = _run("ls")
    assert code == EXIT_USAGE, err
    assert f"{url!r} is not a server URL" in err, err


@pytest.mark.parametrize("url", BAD)
def test_a_bad_server_url_given_is_a_usage_error(url: str, _home: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("FAIRWAY_TOKEN", "x")
    code, err = _run("--server", url, "ls")
    assert code == EXIT_USAGE, err
    assert f"{url!r} is not a server URL" in err, err
    monkeypatch.setenv("FAIRWAY_URL", url)
    code, err = _run("ls")
    assert code == EXIT_USAGE and f"{url!r} is not a server URL" in err, err


def test_a_url_urlsplit_refuses_is_the_same_server_as_itself_only() -> None:
    assert same_server("http://[::1", "http://[::1")
    assert not same_server("http://[::1", "http://[::1]")
    assert not same_server("http://127.0.0.1:8000", "http://[zz]:80")


@pytest.mark.parametrize(
    "data", [{"server": "http://127.0.0.1:9", "token": ["t0k"]}, {"server": 8000, "token": "t0k"}, {"token": {"a": 1}}]
)
def test_a_config_whose_server_or_token_is_no_text_is_refused(data: dict, _home: Any) -> None:
    """``"token": ["t0k"]`` went to the server as the token "['t0k']" (str() of the list), and
    ``"server": 8000`` was read as the URL "8000"."""
    path = _home / "config.json"
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    code, err = _run("ls")
    assert code == EXIT_USAGE, err
    assert "is not a Fairway CLI config" in err and "['t0k']" not in err, err
