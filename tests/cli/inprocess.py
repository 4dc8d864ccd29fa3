"""Run the ``fairway`` CLI with its API calls answered in-process (no live server: fast, and the
server's clock is whatever the test froze)."""

from __future__ import annotations

import io
from typing import Any
from urllib.parse import urlencode

from rest_framework.test import APIClient

from fairway_cli import cli as fairway_cli


def run_cli(monkeypatch: Any, user: Any, *argv: str, expect: int = 0) -> str:
    """``fairway ARGV`` as ``user``; returns stdout (stderr on a failure the test did not expect)."""
    code, out, err = run_cli_streams(monkeypatch, user, *argv)
    assert code == expect, err or out
    return out if code == 0 else err


def run_cli_streams(monkeypatch: Any, user: Any, *argv: str) -> tuple[int, str, str]:
    """``fairway ARGV`` as ``user``: its exit code, stdout and stderr."""
    answer_in_process(monkeypatch, user)
    out, err = io.StringIO(), io.StringIO()
    code = fairway_cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run_cli_bytes(monkeypatch: Any, user: Any, *argv: str, tty: bool = False) -> tuple[int, bytes, bytes]:
    """``fairway ARGV`` as ``user`` with stdout and stderr as a process has them (text over bytes:
    ``sys.stdout.buffer``), terminals when ``tty``: its exit code and the bytes of each."""
    answer_in_process(monkeypatch, user)

    class Stream(io.TextIOWrapper):
        def isatty(self) -> bool:
            return tty

    out, err = Stream(io.BytesIO(), encoding="utf-8"), Stream(io.BytesIO(), encoding="utf-8")
    code = fairway_cli.main(list(argv), out=out, err=err)
    out.flush()
    err.flush()
    return code, out.buffer.getvalue(), err.buffer.getvalue()  # type: ignore[attr-defined]


def answer_in_process(monkeypatch: Any, user: Any) -> None:
    """The CLI's API calls answered in-process, as ``user``."""
    api = APIClient()
    api.force_authenticate(user)

    def call(
        self: Any, method: str, path: str, *, body: Any = None, params: Any = None, auth: bool = True, raw: bool = False
    ) -> Any:
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        url = f"/api/v1/{path.lstrip('/')}"
        if method == "GET":
            response = api.get(url, clean)
        else:  # a write's params go in its query string, as requests sends them
            query = f"?{urlencode(clean)}" if clean else ""
            response = getattr(api, method.lower())(url + query, body or {}, format="json")
        if response.status_code == 204:
            return None
        if raw and response.status_code == 200:
            return response.content.decode()
        data = response.json()
        if response.status_code >= 400:  # read as the CLI's HTTP layer reads it
            raise fairway_cli.answer_error("http://in-process", response.status_code, data)
        return fairway_cli.escaped(data) if self.escape else data

    monkeypatch.setattr(fairway_cli.Api, "call", call)
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", "in-process")
