"""cli46b: a 429 (``throttled``: the person's request rate; ``exec_busy``: the commands and sessions at
once) is "try again later", as a 503 is (cli46): it exited 1, as a refusal of the request. Every place
the CLI meets one (an API request's 429, a websocket's close 4429, an HTTP 429 at its upgrade) exits
75 (``EXIT_TEMPFAIL``) with the server's words and one line: when to try again, in the
``Retry-After``'s seconds where the server gave them."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from fairway_cli import cli as fairway_cli
from fairway_cli.cli import EXIT_TEMPFAIL, main
from fairway_cli.words import THROTTLED_WORDS
from tests.cli.wsfake import STREAMS, fake_server
from tests.cli.wsfake import run_cli as _main

THROTTLED = {"code": "throttled", "message": "Request was throttled. Expected available in 7 seconds."}
EXEC_BUSY = {"code": "exec_busy", "message": "Host gpu1 runs too many commands at once; try again."}


def _api_429(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, refusal: dict[str, str], retry_after: str = ""):
    answer = requests.Response()
    answer.status_code = 429
    answer.headers["Content-Type"] = "application/json"
    if retry_after:
        answer.headers["Retry-After"] = retry_after
    answer._content = b'{"detail": "%s", "code": "%s"}' % (refusal["message"].encode(), refusal["code"].encode())
    monkeypatch.setattr(requests.Session, "request", lambda *_a, **_k: answer)
    return _main(monkeypatch, tmp_path, "http://fairway.example.org", "exec", "42", "--", "id")


def test_an_api_429_exits_75_and_says_when_to_try_again(monkeypatch, tmp_path) -> None:
    code, out, err = _api_429(monkeypatch, tmp_path, THROTTLED, retry_after="7")
    assert (code, out) == (EXIT_TEMPFAIL, ""), err  # was 1, a refusal of the request
    assert f"{THROTTLED['message']} (throttled)" in err.splitlines()[0], err
    assert err.splitlines()[-1] == f"  {THROTTLED_WORDS}: try again in 7 s", err


def test_an_api_429_without_retry_after_says_shortly(monkeypatch, tmp_path) -> None:
    code, _out, err = _api_429(monkeypatch, tmp_path, EXEC_BUSY)
    assert code == EXIT_TEMPFAIL, err
    assert "(exec_busy)" in err and err.splitlines()[-1] == f"  {THROTTLED_WORDS}: try again shortly", err


@pytest.mark.parametrize("argv", STREAMS, ids=["-i", "-it", "port-forward"])
@pytest.mark.parametrize("refusal", [THROTTLED, EXEC_BUSY], ids=lambda r: r["code"])
def test_a_stream_throttled_exits_75_in_the_same_words(monkeypatch, tmp_path, argv, refusal) -> None:
    with fake_server(refusal=refusal, close=4429) as server:  # scheduler.exec_session: 4000 + the status
        code, out, err = _main(monkeypatch, tmp_path, server.url, *argv)
    assert (code, out) == (EXIT_TEMPFAIL, ""), err  # was 1
    assert err.startswith(f"fairway: workload 42: {refusal['message']} ({refusal['code']})\n"), err
    assert err.splitlines()[-1] == f"  {THROTTLED_WORDS}: try again shortly", err


@pytest.mark.parametrize("argv", STREAMS, ids=["-i", "-it", "port-forward"])
def test_a_429_at_the_upgrade_exits_75(monkeypatch, tmp_path, argv) -> None:
    with fake_server(status=429) as server:
        code, _out, err = _main(monkeypatch, tmp_path, server.url, *argv)
    assert code == EXIT_TEMPFAIL, err  # was 3, "cannot be reached"
    assert "HTTP 429" in err and err.splitlines()[-1] == f"  {THROTTLED_WORDS}: try again shortly", err


def test_the_exit_codes_table_names_the_429(capsys) -> None:
    table = " ".join(fairway_cli.exit_codes_text().split())
    assert f"{EXIT_TEMPFAIL} " in table and "(429)" in table
    assert main(["--help"]) == 0
    assert table in " ".join(capsys.readouterr().out.split())
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert table in " ".join(readme.split())
