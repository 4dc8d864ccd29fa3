"""pf63: ``fairway hosts``' STATE column shows a drain scheduled for later (it read only "active"),
and a refusal of ``fairway exec`` reads the same one-shot and interactive (``-it``: its prefix
differed, ``fairway_cli.cli._stream_refusal``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from fairway_cli.cli import EXIT_API
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli


def _state_cell(listing: str, name: str) -> str:
    header, *rows = listing.splitlines()
    start, end = header.index("STATE"), header.index("GPUS")
    return next(row[start:end].strip() for row in rows if row.startswith(name + " "))


def test_the_state_column_shows_a_drain_scheduled_for_later(monkeypatch, admin, researcher, hosts) -> None:
    """Given a drain scheduled in two days on a100-1 and a drain now in three hours on another,
    when anyone lists the hosts, then their STATE cells say so (its instant and who: the line
    below, the server's words), and an unscheduled host's reads its state alone."""
    names = sorted(hosts)
    assert "a100-1" in names and len(names) > 1
    other = next(n for n in names if n != "a100-1")
    at = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)
    run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", "--at", at.strftime("%Y-%m-%dT%H:%MZ"))
    run_cli(monkeypatch, admin, "hosts", "drain-now", other, "--in", "3h")
    listing = run_cli(monkeypatch, researcher, "hosts")
    assert _state_cell(listing, "a100-1") == "active (drain scheduled)", listing
    assert _state_cell(listing, other) == "active (drain now scheduled)", listing
    assert "a100-1: drain scheduled at " in listing  # the server's summary, as before
    run_cli(monkeypatch, admin, "hosts", "cancel-drain", other)
    assert _state_cell(run_cli(monkeypatch, researcher, "hosts"), other) == "active"
    one = run_cli(monkeypatch, researcher, "hosts", "a100-1")
    assert "state:     active (drain scheduled)" in one, one


def test_a_refusal_reads_the_same_one_shot_and_interactive(
    monkeypatch: pytest.MonkeyPatch, researcher: Any, submit_kwargs: Any, cluster: Any
) -> None:
    """Given a pending workload, when its owner runs a command in it, one-shot and with -it, then
    both say the server's refusal in one wording (the -it one began "workload N: ")."""
    from fairway_cli import cli, session

    w = do_submit_workload(researcher, **submit_kwargs())
    one_shot = run_cli(monkeypatch, researcher, "exec", str(w.pk), "--", "id", expect=EXIT_API)
    api = APIClient()
    api.force_authenticate(researcher)
    body = api.post(f"/api/v1/workloads/{w.pk}/exec/", {"command": ["id"]}, format="json").json()
    assert body["code"] == "not_running"

    def refuse(*_args: Any, **_kwargs: Any) -> Any:  # the websocket's refusal: the same code and words
        raise session.SessionRefused(body["code"], body["detail"])

    monkeypatch.setattr(session, "open_session", refuse)
    monkeypatch.setattr(cli.os, "isatty", lambda _fd: True)
    monkeypatch.setattr(cli.sys.stdin, "fileno", lambda: 0, raising=False)
    monkeypatch.setattr(session, "terminal_size", lambda _fd: (24, 80))
    interactive = run_cli(monkeypatch, researcher, "exec", "-it", str(w.pk), "--", "bash", expect=EXIT_API)
    assert interactive == one_shot, (interactive, one_shot)
    assert one_shot.count(f"orkload {w.pk}") == 1, one_shot  # named once, not "workload N: Workload N ..."
