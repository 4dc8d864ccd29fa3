"""The CLI prints other users' strings escaped (issue 14, finding 11): a workload name holding
terminal escapes must not clear the reader's screen in ``fairway ls --all``."""

from __future__ import annotations

import json

import pytest

from fairway_cli.cli import EXIT_OK, _error_text, escape_text
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.cli.test_cli import cli  # noqa: F401 -- the live-server fixture
from tests.conftest import PASSWORD

CLEAR = "\x1b[2J\x1b[H"
TITLE = "\x1b]0;owned\x07"
BIDI = "\u202egnp.exe"


@pytest.fixture
def hostile(teammate, submit_kwargs):
    """A teammate's workload whose name, command and env hold terminal escapes (a name stored
    before submissions refused invisible characters: written into the row)."""
    w = do_submit_workload(
        teammate, **submit_kwargs(name="job", command=["python", TITLE, "a\rb"], env={"X": f"v{CLEAR}"})
    )
    Workload.objects.filter(pk=w.pk).update(name=f"{CLEAR}job{BIDI}")
    w.refresh_from_db()
    return w


def _no_controls(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\u202e" not in text


def test_ls_all_and_show_escape_another_users_strings(cli, researcher, hostile):  # noqa: F811
    assert cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK

    code, out, _err = cli("ls", "--all")
    assert code == EXIT_OK
    _no_controls(out)
    assert "\\x1b[2J\\x1b[Hjob\\u202egnp.exe" in out
    assert len(out.splitlines()) == 2  # header and one row: no line forged

    code, out, _err = cli("show", str(hostile.pk))
    assert code == EXIT_OK
    _no_controls(out)
    assert "\\x1b]0;owned\\x07" in out and "a\\x0db" in out

    # --json keeps the data exact (JSON escapes control characters itself)
    code, out, _err = cli("--json", "show", str(hostile.pk))
    _no_controls(out)
    assert json.loads(out)["name"] == f"{CLEAR}job{BIDI}"


def test_server_error_messages_are_escaped():
    text = _error_text(400, {"name": [f"bad {CLEAR}"], "code": "invalid\x1b"})
    _no_controls(text)
    assert "\\x1b[2J" in text
    assert "\x1b" not in _error_text(404, {"detail": f"gone{TITLE}", "code": "not_found"})


def test_log_text_keeps_lines_and_tabs_only():
    assert escape_text("a\tb\nc\x1b[31md\re\x00", keep="\n\t") == "a\tb\nc\\x1b[31md\\x0de\\x00"
    assert escape_text("\x9b2J \u2028 ok é") == "\\x9b2J \\u2028 ok é"
