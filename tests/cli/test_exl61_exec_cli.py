"""exl61: ``fairway exec``'s leftovers in the CLI: ``--rank`` (one-shot and -it), the -it refusals
in the one-shot's wording (``(code)`` at the end), ``-i`` without ``-t`` (pf63: piped, no longer refused)."""

from __future__ import annotations

from typing import Any

import pytest

from fairway_cli.cli import EXIT_API
from scheduler import gateway, lifecycle
from scheduler.models import Attempt, Host
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli, run_cli_streams


@pytest.fixture
def gang(researcher: Any, cluster: Any, submit_kwargs: Any) -> tuple[Any, list[Host]]:
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=16))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    return w, [Host.objects.get(name=name) for name in attempt.host_names()]


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    hosts: list[int] = []

    def fake(host_id: int, wire_id: int, command: list[str], timeout_s: int, max_output: int) -> dict:
        hosts.append(host_id)
        return {"exit_code": 0, "stdout": "ok\n", "stderr": "", "truncated": False, "timed_out": False}

    monkeypatch.setattr(gateway, "request_exec", fake)
    return hosts


def _on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from fairway_cli import cli, session

    monkeypatch.setattr(cli.os, "isatty", lambda _fd: True)
    monkeypatch.setattr(cli.sys.stdin, "fileno", lambda: 0, raising=False)
    monkeypatch.setattr(session, "terminal_size", lambda _fd: (24, 80))


def test_rank_picks_the_gang_members_host(monkeypatch, researcher, gang, asked) -> None:
    w, (first, second) = gang
    code, out, _err = run_cli_streams(monkeypatch, researcher, "exec", str(w.pk), "--rank", "1", "--", "hostname")
    assert (code, out) == (0, "ok\n")
    run_cli_streams(monkeypatch, researcher, "exec", str(w.pk), "--", "hostname")
    assert asked == [second.pk, first.pk]
    err = run_cli(monkeypatch, researcher, "exec", str(w.pk), "--rank", "2", "--", "id", expect=EXIT_API)
    assert "invalid_rank" in err and "rank 0 to 1" in err, err


def test_rank_past_a_single_hosts_attempt_names_the_flag(monkeypatch, researcher, submit_kwargs, cluster, asked):
    w = do_submit_workload(researcher, **submit_kwargs())
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    err = run_cli(monkeypatch, researcher, "exec", str(w.pk), "--rank", "1", "--", "id", expect=EXIT_API)
    assert "runs on one host" in err and "leave out --rank" in err, err
    assert asked == []


def test_an_interactive_session_asks_for_the_rank(monkeypatch, researcher, gang) -> None:
    from fairway_cli import session

    w, _hosts = gang
    firsts: list[dict[str, Any]] = []

    def refuse(_server: str, _token: str, _agent: str, first: dict[str, Any], *_a: Any, **_k: Any) -> Any:
        firsts.append(first)
        raise session.SessionRefused("exec_busy", "This server holds 1 interactive session(s), as many as it may.")

    monkeypatch.setattr(session, "open_session", refuse)
    _on_a_terminal(monkeypatch)
    err = run_cli(monkeypatch, researcher, "exec", "-it", "--rank", "1", str(w.pk), "--", "bash", expect=EXIT_API)
    assert firsts[0]["rank"] == 1
    # the one-shot's wording: the server's words, then its code (was: no code)
    assert err.rstrip().endswith("as many as it may. (exec_busy)"), err


def test_stdin_without_a_terminal_is_piped(monkeypatch, researcher, gang, asked) -> None:
    """exl61 refused ``-i`` without ``-t``; pf63 pipes stdin to the command (kubectl's ``exec -i``):
    the session's first frame asks for no terminal (the whole path: tests/e2e/test_pf63_exec_bytes_e2e.py)."""
    from fairway_cli import session

    w, _hosts = gang
    firsts: list[dict[str, Any]] = []

    def refuse(_server: str, _token: str, _agent: str, first: dict[str, Any], *_a: Any, **_k: Any) -> Any:
        firsts.append(first)
        raise session.SessionRefused("agent_too_old", "The agent of host a100-1 must be upgraded.")

    monkeypatch.setattr(session, "open_session", refuse)
    err = run_cli(monkeypatch, researcher, "exec", "-i", str(w.pk), "--", "tar", "x", expect=EXIT_API)
    assert firsts == [{"workload": w.pk, "attempt": None, "command": ["tar", "x"], "tty": False}]
    assert err.rstrip().endswith("must be upgraded. (agent_too_old)"), err
    assert asked == []
