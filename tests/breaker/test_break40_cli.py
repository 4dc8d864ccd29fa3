"""brk40: the CLI sent the token saved for one server to any other server named by ``--server``
or ``$FAIRWAY_URL`` (a typo, ``http://`` for ``https://``, a stale variable, a host name that
changed hands): the saved token belongs to the server it was saved with."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import fairway_cli.cli as fairway_cli

SAVED = "https://fairway.example.org"


@pytest.fixture
def other_server() -> Iterator[tuple[str, list[str | None]]]:
    """A server that records the Authorization header of every request and answers 401."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 -- http.server's name
            seen.append(self.headers.get("Authorization"))
            body = json.dumps({"code": "not_authenticated", "detail": "no"}).encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def saved_config(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"server": SAVED, "token": "saved-token-0123456789"}))
    path.chmod(0o600)
    monkeypatch.setenv("FAIRWAY_CONFIG", str(path))
    monkeypatch.delenv("FAIRWAY_URL", raising=False)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)
    return path


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = fairway_cli.main(list(argv), out=out, err=err)
    return code, err.getvalue()


@pytest.mark.parametrize("how", ["option", "env"])
def test_the_saved_token_is_not_sent_to_another_server(saved_config, other_server, monkeypatch, how):
    url, seen = other_server
    if how == "env":
        monkeypatch.setenv("FAIRWAY_URL", url)
        code, err = _run("ls")
    else:
        code, err = _run("--server", url, "ls")
    assert seen == [] or seen == [None]
    assert code == fairway_cli.EXIT_AUTH
    assert f"not logged in to {url}" in err and SAVED in err and f"fairway login --server {url}" in err


def test_a_token_given_for_the_command_goes_to_the_server_named(saved_config, other_server, monkeypatch):
    url, seen = other_server
    monkeypatch.setenv("FAIRWAY_TOKEN", "env-token-0123456789")
    code, _err = _run("--server", url, "ls")
    assert seen == ["Token env-token-0123456789"] and code == fairway_cli.EXIT_AUTH


def test_the_saved_token_goes_to_its_own_server_however_written(saved_config, monkeypatch):
    for written in (SAVED, SAVED + "/", SAVED + "/api/v1/"):
        monkeypatch.setenv("FAIRWAY_URL", written)
        config = fairway_cli.Config.load()
        assert config.token == "saved-token-0123456789", written


def test_a_login_to_another_server_keeps_its_own_refusal(saved_config, other_server):
    url, _seen = other_server
    code, err = _run("login", "--server", url, "--token", "t0123456789")
    assert code == fairway_cli.EXIT_AUTH and "refused this token" in err


def test_a_saved_token_readable_by_others_is_made_private_on_reading(saved_config, other_server, monkeypatch):
    """A config copied or written with the umask's 0644 (a shared login node) kept its token
    readable by every user of the machine: ``save`` made it 0600, reading it did not (the agent
    does, agent/__main__.py)."""
    url, _seen = other_server
    saved_config.chmod(0o644)
    monkeypatch.setenv("FAIRWAY_TOKEN", "env-token-0123456789")
    _code, err = _run("--server", url, "ls")
    assert saved_config.stat().st_mode & 0o077 == 0
    assert f"{saved_config} was readable by others (mode 644): made it 0600" in err
