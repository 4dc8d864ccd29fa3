"""try62: ``fairway port-forward --json`` printed the text line: its help says "print JSON". With
it, one JSON object says where the forward listens, for a script that starts it in the background."""

from __future__ import annotations

import json
import socket

import pytest

from fairway_cli import portforward
from fairway_cli.cli import EXIT_API
from tests.cli.inprocess import run_cli_streams

pytestmark = pytest.mark.django_db


def test_json_says_where_it_listens(monkeypatch, researcher) -> None:
    seen: list[tuple[str, int]] = []

    def serve(fwd, listener, err, still_running, stop):  # the workload ends at once
        seen.append(listener.getsockname()[:2])
        return "The workload has already ended (canceled)."

    monkeypatch.setattr(portforward.Forward, "check", lambda self: None)
    monkeypatch.setattr(portforward, "serve", serve)
    with socket.socket() as probe:  # a free local port
        probe.bind(("127.0.0.1", 0))
        local = probe.getsockname()[1]
    code, out, err = run_cli_streams(monkeypatch, researcher, "port-forward", "--json", "42", f"{local}:6006")
    assert code == EXIT_API and "no longer takes connections" in err
    assert json.loads(out) == {"address": "127.0.0.1", "port": local, "workload": 42, "remote_port": 6006}
    assert seen == [("127.0.0.1", local)]
    code, out, _err = run_cli_streams(monkeypatch, researcher, "port-forward", "42", f"{local}:6006")
    assert out == f"Forwarding 127.0.0.1:{local} -> workload 42 port 6006 (Ctrl-C to stop)\n"
