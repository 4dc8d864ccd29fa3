"""exec47: ``fairway exec ID -- CMD`` writes the command's output as it is: the API's
``stdout_base64`` and ``stderr_base64`` to the CLI's stdout and stderr as bytes (``> file``,
``| tar x``); on a terminal its control characters escaped, as before; a server older than the
fields still prints its text (the whole path: tests/e2e/test_exec47_bytes_e2e.py)."""

from __future__ import annotations

import base64
import io
import json
from typing import Any

import pytest

from scheduler import gateway
from tests.cli.inprocess import run_cli_bytes

OUT = bytes(range(256)) + b"\xc3"
ERR = b"\x00err \xff"


@pytest.fixture
def running(started_workload: tuple[Any, Any]) -> Any:
    return started_workload[0]


@pytest.fixture
def answer(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    said: dict[str, Any] = {"exit_code": 4, "truncated": False, "timed_out": False}
    said["stdout_base64"], said["stderr_base64"] = base64.b64encode(OUT).decode(), base64.b64encode(ERR).decode()
    monkeypatch.setattr(gateway, "request_exec", lambda *_args: dict(said))
    return said


def test_the_commands_bytes_are_written_as_they_are(monkeypatch, researcher, running, answer) -> None:
    code, out, err = run_cli_bytes(monkeypatch, researcher, "exec", str(running.pk), "--", "cat", "data.tar")
    assert (code, out, err) == (4, OUT, ERR)


def test_on_a_terminal_they_are_escaped_as_before(monkeypatch, researcher, running, answer) -> None:
    code, out, err = run_cli_bytes(monkeypatch, researcher, "exec", str(running.pk), "--", "cat", "f", tty=True)
    assert code == 4 and b"\x1b" not in out and b"\x00" not in out and b"\\x1b" in out and b"\\x00" in out
    assert "\ufffd" in out.decode()  # bytes that are not UTF-8 show as U+FFFD there
    assert err == "\\x00err \ufffd".encode()


def test_json_carries_both_and_a_text_command_prints_the_same(monkeypatch, researcher, running, answer) -> None:
    code, out, _err = run_cli_bytes(monkeypatch, researcher, "exec", "--json", str(running.pk), "--", "cat", "f")
    done = json.loads(out)
    assert (
        code == 4 and base64.b64decode(done["stdout_base64"]) == OUT and done["stdout"] == OUT.decode(errors="replace")
    )
    answer.update(stdout_base64=base64.b64encode("héllo ✓\n".encode()).decode(), stderr_base64="")
    code, out, err = run_cli_bytes(monkeypatch, researcher, "exec", str(running.pk), "--", "echo", "héllo ✓")
    assert (code, out, err) == (4, "héllo ✓\n".encode(), b"")


def test_an_older_servers_text_is_printed(monkeypatch, researcher, running) -> None:
    old = {"exit_code": 0, "stdout": "héllo \ufffd\n", "stderr": "", "truncated": False, "timed_out": False}
    from fairway_cli import cli

    def call(self: Any, method: str, path: str, **_kw: Any) -> dict[str, Any]:
        return dict(old)

    monkeypatch.setattr(cli.Api, "call", call)
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", "in-process")
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    assert cli.main(["exec", str(running.pk), "--", "cat", "f"], out=out, err=err) == 0
    out.flush()
    assert out.buffer.getvalue() == "héllo \ufffd\n".encode()  # type: ignore[attr-defined]
