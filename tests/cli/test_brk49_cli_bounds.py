"""brk49: CLI arguments refused before any request, in the CLI's usage words (exit 2). Each failed
before its fix: ``fairway exec ID --timeout 9999999999 -- id`` ended in an ``OverflowError``
traceback from the socket's timeout (the help said "max 600" but the parser took any size), and
``fairway port-forward ID ²`` said Python's ``invalid literal for int()`` while ``8080:٣`` forwarded
to port 3 (``str.isdigit`` takes other scripts' digits)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from agent.protocol import EXEC_MAX_TIMEOUT_S
from fairway_cli.cli import EXIT_USAGE, main


@pytest.fixture(autouse=True)
def _nowhere(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FAIRWAY_URL", "http://127.0.0.1:9")  # never asked: refused before
    monkeypatch.setenv("FAIRWAY_TOKEN", "x")


def _run(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        code = main(list(argv), out=out, err=err)
    except SystemExit as exc:  # argparse's usage error
        code = int(exc.code or 0)
    return code, err.getvalue()


@pytest.mark.parametrize("timeout", [str(EXEC_MAX_TIMEOUT_S + 1), "9999999999", "99999999999999999999"])
def test_exec_timeout_past_the_servers_bound_is_a_usage_error(timeout: str, capsys: Any) -> None:
    code, err = _run("exec", "1", "--timeout", timeout, "--", "id")
    text = err + capsys.readouterr().err
    assert code == EXIT_USAGE, text
    assert f"at most {EXEC_MAX_TIMEOUT_S}" in text and "Traceback" not in text, text


@pytest.mark.parametrize("ports", ["²", "8080:٣", "８０８０"])
def test_port_forward_ports_are_ascii_digits(ports: str) -> None:
    code, err = _run("port-forward", "1", ports)
    assert code == EXIT_USAGE, err
    assert "give PORT or LOCAL:REMOTE" in err and "invalid literal" not in err, err
