"""try50b (a new user's day): ``fairway logs ID --tail N`` read as its help and the API say it."""

from __future__ import annotations

import pytest

from fairway_common.limits import MAX_LOG_TAIL_BYTES


def _logs_answer(monkeypatch, answer):
    from fairway_cli import cli as fairway_cli

    asked = []

    def call(self, method, path, **kw):
        asked.append(kw.get("params"))
        return answer

    monkeypatch.setattr(fairway_cli.Api, "call", call)
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", "in-process")
    return fairway_cli, asked


def test_tail_zero_of_a_log_with_text_does_not_call_it_empty(monkeypatch, capsys):
    """``fairway logs 1 --tail 0`` of a 471-byte log said "[#1 attempt 1: the log is empty]": the
    server answered no data from offset 471, the end of a log that is not empty."""
    answer = {"attempt": 1, "parts": [{"rank": 0, "host": "h1", "offset": 471, "data": "", "eof": True, "error": None}]}
    fairway_cli, _ = _logs_answer(monkeypatch, answer)
    assert fairway_cli.main(["logs", "1", "--tail", "0"]) == 0
    seen = capsys.readouterr()
    assert seen.out == ""
    assert "empty" not in seen.err
    assert seen.err == "[#1 attempt 1: none of its log's 471 bytes is within --tail 0]\n"
    # a log that is empty still says so
    answer["parts"][0]["offset"] = 0
    assert fairway_cli.main(["logs", "1", "--tail", "0"]) == 0
    assert capsys.readouterr().err == "[#1 attempt 1: the log is empty]\n"


@pytest.mark.parametrize("tail", [str(MAX_LOG_TAIL_BYTES + 1), "100000"])
def test_a_tail_past_the_servers_bound_is_bad_usage_before_any_request(monkeypatch, capsys, tail):
    """``fairway logs 1 --tail 100000`` went to the server and came back "refused (invalid): tail
    is 0..65536 bytes." with exit 1 (refused by the server), where ``--help`` said only "bytes
    (16384)"; ``--limit 0`` and ``exec --timeout`` are checked here, exit 2 (bad usage)."""
    fairway_cli, asked = _logs_answer(monkeypatch, {})
    assert fairway_cli.main(["logs", "1", "--tail", tail]) == 2
    assert asked == []
    assert f"--tail: must be at most {MAX_LOG_TAIL_BYTES}" in capsys.readouterr().err


def test_the_tail_help_names_its_bounds(monkeypatch, capsys):
    fairway_cli, _ = _logs_answer(monkeypatch, {})
    assert fairway_cli.main(["logs", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"bytes from the end, 0 to {MAX_LOG_TAIL_BYTES} (default 16384)" in help_text


def test_the_server_and_the_agent_read_the_one_bound():
    from agent import client as agent_client
    from scheduler.api import views

    assert views.MAX_LOG_TAIL_BYTES is MAX_LOG_TAIL_BYTES
    assert agent_client.MAX_LOG_TAIL_BYTES is MAX_LOG_TAIL_BYTES


def test_a_refusal_not_of_one_field_reads_without_drfs_key():
    """A wrong password at ``fairway login`` read "refused (invalid_credentials):\\n
    non_field_errors: Wrong username or password.": the API's key for a problem of no one field
    (README "Every error has one format") is no word for a person."""
    from fairway_cli import cli as fairway_cli

    text = fairway_cli._error_text(
        400, {"non_field_errors": ["Wrong username or password."], "code": "invalid_credentials"}
    )
    assert text == "refused (invalid_credentials):\n  Wrong username or password."
    # a field's problem keeps its field's name
    text = fairway_cli._error_text(400, {"tail": ["tail is 0..65536 bytes."], "code": "invalid"})
    assert text == "refused (invalid):\n  tail: tail is 0..65536 bytes."
