"""``POST /api/v1/workloads/{id}/exec/`` (docs/jobs.md, "Run a command in a running workload"):
only the owner, only a running attempt whose agent is connected, the command checked as a
submission's, throttled; the agent's answers mapped to codes (the agent itself: tests/agent and
tests/e2e/test_exec_e2e.py)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agent import protocol
from scheduler import gateway, lifecycle
from scheduler.consumers import _exec_refusal, _PendingExec
from scheduler.models import Attempt, Host
from scheduler.services import do_submit_workload


@pytest.fixture
def running(started_workload: tuple[Any, Attempt]) -> tuple[Any, Attempt]:
    return started_workload


@pytest.fixture
def agent_answers(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The agent's side replaced: every request is recorded and answered ``answers[0]``."""
    asked: list[tuple] = []
    answer = {"exit_code": 0, "stdout": "1000\n", "stderr": "", "truncated": False, "timed_out": False}

    def fake(host_id: int, wire_id: int, command: list[str], timeout_s: int, max_output: int) -> dict:
        asked.append((host_id, wire_id, command, timeout_s, max_output))
        return dict(fake.answer)  # type: ignore[attr-defined]

    fake.answer = answer  # type: ignore[attr-defined]
    monkeypatch.setattr(gateway, "request_exec", fake)
    asked.append(fake)  # type: ignore[arg-type]
    return asked


def url(pk: int) -> str:
    return f"/api/v1/workloads/{pk}/exec/"


def test_the_owner_runs_a_command_in_the_running_attempt(running, researcher_client, agent_answers) -> None:
    w, attempt = running
    got = researcher_client.post(url(w.pk), {"command": ["id", "-u"]}, format="json")
    assert got.status_code == 200, got.json()
    assert got.json() == {
        "exit_code": 0,
        "stdout": "1000\n",
        "stderr": "",
        "stdout_base64": "MTAwMAo=",  # exec47: its bytes as they are
        "stderr_base64": "",
        "truncated": False,
        "timed_out": False,
    }
    (asked,) = agent_answers[1:]
    assert asked == (attempt.host_id, attempt.wire_id, ["id", "-u"], 60, protocol.EXEC_MAX_OUTPUT)


@pytest.mark.parametrize("who", ["teammate", "manager", "admin"])
def test_nobody_but_the_owner_may_exec(running, api_client_for, who, request, agent_answers) -> None:
    w, _attempt = running
    got = api_client_for(request.getfixturevalue(who)).post(url(w.pk), {"command": ["id"]}, format="json")
    assert got.status_code == 403 and got.json()["code"] == "forbidden"
    assert "owner" in got.json()["detail"]
    assert agent_answers[1:] == []


def test_a_workload_not_running_is_409_not_running(researcher, submit_kwargs, researcher_client, agent_answers):
    pending = do_submit_workload(researcher, **submit_kwargs(hold=True))  # never placed
    got = researcher_client.post(url(pending.pk), {"command": ["id"]}, format="json")
    assert (got.status_code, got.json()["code"]) == (409, "not_running")
    assert agent_answers[1:] == []


def test_not_running_says_what_to_do(running, researcher, submit_kwargs, researcher_client, agent_answers) -> None:
    """try59: "Workload 3 is not running (it has no running attempt)" of a finished one, and "Workload 1
    is not running (attempt 2 has no running attempt)" of a running one, said neither what it was nor
    what to do: a pending one waits for its start, a finished one's output is in its logs, a wrong
    ``attempt`` names the running one."""

    def detail(pk: int, **body: Any) -> str:
        got = researcher_client.post(url(pk), {"command": ["id"], **body}, format="json")
        assert (got.status_code, got.json()["code"]) == (409, "not_running"), got.json()
        return str(got.json()["detail"])

    w, attempt = running
    said = detail(w.pk, attempt=2)
    assert "has no attempt 2" in said and "its running attempt is 1" in said, said
    pending = do_submit_workload(researcher, **submit_kwargs())
    said = detail(pending.pk)
    assert f"Workload {pending.pk} is pending" in said and "once it has started" in said, said
    assert f"fairway show {pending.pk}" in said, said
    # try60: a held one never starts until released: "try again once it has started" waited for ever
    held = do_submit_workload(researcher, **submit_kwargs(hold=True))
    said = detail(held.pk)
    assert "held by its owner" in said and f"once it is released (fairway release {held.pk})" in said, said
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0)
    w.refresh_from_db()
    said = detail(w.pk)
    assert f"has already ended ({w.state})" in said and f"(fairway logs {w.pk})" in said, said
    assert agent_answers[1:] == []


def test_a_host_offline_is_409_host_offline(running, researcher_client, agent_answers) -> None:
    w, attempt = running
    Host.objects.filter(pk=attempt.host_id).update(state=Host.State.OFFLINE)
    got = researcher_client.post(url(w.pk), {"command": ["id"]}, format="json")
    assert (got.status_code, got.json()["code"]) == (409, "host_offline")


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"command": []}, "command", "invalid_command"),
        ({"command": "id -u"}, "command", "invalid_command"),
        ({"command": ["id", 3]}, "command", "invalid_command"),
        ({"command": ["a\x00b"]}, "command", "invalid_command"),
        ({"command": ["id"], "timeout": 601}, "timeout", "invalid_timeout"),
        ({"command": ["id"], "timeout": 0}, "timeout", "invalid_timeout"),
        ({"command": ["id"], "timeout": "60"}, "timeout", "invalid_timeout"),
        ({"command": ["id"], "attempt": 0}, "attempt", "invalid_attempt"),
        ({"command": ["id"], "tty": True}, "tty", "unknown_field"),
    ],
)
def test_the_body_is_checked(running, researcher_client, agent_answers, body, field, code) -> None:
    w, _attempt = running
    got = researcher_client.post(url(w.pk), body, format="json")
    assert got.status_code == 400 and got.json()["code"] == code and field in got.json(), got.json()
    assert agent_answers[1:] == []


@pytest.mark.parametrize(
    ("answer", "status", "code"),
    [
        ({"error": "exec_timeout", "message": "no answer"}, 504, "exec_timeout"),
        ({"error": "agent_too_old", "message": "unknown message type 'exec'"}, 409, "agent_too_old"),
        ({"error": "host_offline"}, 409, "host_offline"),
        ({"error": "exec_not_running", "message": "attempt 5 is not running"}, 409, "not_running"),
        ({"error": "exec_failed", "message": "cannot enter"}, 409, "exec_failed"),
        ({"error": "exec_unsupported", "message": "restarted"}, 409, "exec_failed"),
        ({"error": "busy"}, 429, "exec_busy"),
    ],
)
def test_the_agents_refusals_are_codes(running, researcher_client, agent_answers, answer, status, code) -> None:
    w, _attempt = running
    agent_answers[0].answer = answer
    got = researcher_client.post(url(w.pk), {"command": ["id"], "timeout": 5}, format="json")
    assert (got.status_code, got.json()["code"]) == (status, code), got.json()
    if code == "agent_too_old":
        assert "must be upgraded" in got.json()["detail"]


def test_exec_is_throttled_per_user(running, researcher_client, agent_answers, settings) -> None:
    rest = dict(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], "exec": "2/min"}
    settings.REST_FRAMEWORK = rest
    w, _attempt = running
    codes = [researcher_client.post(url(w.pk), {"command": ["id"]}, format="json").status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").status_code == 200


def test_the_consumer_caps_output_and_names_an_old_agent() -> None:
    waiting = _PendingExec("reply", max_output=5)
    waiting.add("stdout", b"abc")
    waiting.add("stdout", b"defgh")
    waiting.add("stderr", b"xy")
    reply = waiting.reply(protocol.ExecResult(ref=1, exit_code=0, timed_out=False, truncated=False))
    got = (base64.b64decode(reply["stdout_base64"]), base64.b64decode(reply["stderr_base64"]), reply["truncated"])
    assert got == (b"abcde", b"xy", True)  # exec47: bytes, in base64
    old = _exec_refusal(protocol.Error(code=protocol.ERR_UNKNOWN_TYPE, message="unknown message type 'exec'", ref=4))
    assert old["error"] == "agent_too_old"
    # an agent before exec refuses the frame as an unknown type, naming its id
    frame = protocol.encode(protocol.Exec(attempt_id=5, command=["id"], timeout_s=60, max_output=10, id=9))
    del protocol.MESSAGE_TYPES["exec"]
    try:
        with pytest.raises(protocol.ProtocolError) as refused:
            protocol.decode(frame)
    finally:
        protocol.MESSAGE_TYPES["exec"] = protocol.Exec
    assert (refused.value.code, refused.value.ref) == (protocol.ERR_UNKNOWN_TYPE, 9)


def test_a_web_process_waits_on_a_bounded_number_of_commands(running, researcher_client, monkeypatch) -> None:
    """Each command holds a request thread up to its timeout: past a quarter of the process's
    threads, 429 ``exec_busy``, so ``sleep 600`` a few times cannot hold every thread."""
    from scheduler import execs

    w, _attempt = running
    monkeypatch.setattr(execs, "_in_flight", execs.exec_slots())
    got = researcher_client.post(url(w.pk), {"command": ["id"]}, format="json")
    assert (got.status_code, got.json()["code"]) == (429, "exec_busy")


def test_a_command_too_large_for_one_frame_is_400(running, researcher_client, agent_answers) -> None:
    w, _attempt = running
    wide = ["\U0001f600" * 16384] * 4  # 65,536 characters (a submission's bound), 256 KiB of UTF-8
    got = researcher_client.post(url(w.pk), {"command": wide}, format="json")
    assert (got.status_code, got.json()["code"]) == (400, "invalid_command")
    assert agent_answers[1:] == []
