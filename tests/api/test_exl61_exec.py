"""exl61, ``fairway exec``'s leftovers at the API and ``/ws/exec/`` (docs/jobs.md, "Run a command in
a running workload"): a gang member's host by ``rank`` (one-shot and interactive; the agent side:
tests/agent/test_exl61_exec.py), the refusal of an attempt its agent re-adopted, a per-web-process
cap on interactive sessions, and a session whose reader stopped reading ended within a bound."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from config.asgi import application
from scheduler import exec_session, lifecycle
from scheduler.models import Attempt, Host
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.api.test_exec_api import agent_answers, running, url
from tests.api.test_exec_session import _fake_agent, _refused, _run, _take, first_frame, token_of

__all__ = ["agent_answers", "running"]  # fixtures, used by name

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


async def _started(
    layer: Any, agent: str, token: str, frame: dict[str, Any], ref: int
) -> tuple[WebsocketCommunicator, str]:
    """A session opened with ``frame``, taken by the fake agent's connection as ``ref``, started; and
    its consumer's channel."""
    comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
    assert (await comm.connect())[0]
    await comm.send_to(text_data=json.dumps(frame))
    opened = await asyncio.wait_for(layer.receive(agent), 10)
    await _take(layer, opened["reply_to"], opened, agent, ref)
    assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
    return comm, opened["reply_to"]


@pytest.fixture
def gang(researcher: Any, cluster: Any, submit_kwargs: Any) -> tuple[Any, Attempt, list[Host]]:
    """A running 16-GPU gang of the researcher's on a100-1 and a100-2: its hosts, rank 0 first."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=16))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    names = attempt.host_names()
    assert len(names) == 2, names
    return w, attempt, [Host.objects.get(name=name) for name in names]


def test_a_one_shot_command_runs_on_the_host_of_the_rank_asked(gang, researcher_client, agent_answers) -> None:
    w, attempt, (first, second) = gang
    got = researcher_client.post(url(w.pk), {"command": ["hostname"], "rank": 1}, format="json")
    assert got.status_code == 200, got.json()
    got = researcher_client.post(url(w.pk), {"command": ["hostname"]}, format="json")
    assert got.status_code == 200, got.json()
    assert [(host, wire) for host, wire, *_ in agent_answers[1:]] == [
        (second.pk, attempt.wire_id),
        (first.pk, attempt.wire_id),
    ]


def test_a_rank_out_of_range_is_400_naming_the_valid_range(gang, researcher_client, agent_answers) -> None:
    w, _attempt, _hosts = gang
    got = researcher_client.post(url(w.pk), {"command": ["id"], "rank": 2}, format="json")
    assert (got.status_code, got.json()["code"]) == (400, "invalid_rank"), got.json()
    said = " ".join(got.json()["rank"])
    assert "rank 0 to 1" in said and "2 hosts" in said, got.json()
    for bad in (-1, True, "1"):
        got = researcher_client.post(url(w.pk), {"command": ["id"], "rank": bad}, format="json")
        assert (got.status_code, got.json()["code"]) == (400, "invalid_rank"), (bad, got.json())
    assert agent_answers[1:] == []


def test_a_rank_past_one_hosts_attempt_says_it_runs_on_one(running, researcher_client, agent_answers) -> None:
    single, _ = running
    got = researcher_client.post(url(single.pk), {"command": ["id"], "rank": 1}, format="json")
    assert (got.status_code, got.json()["code"]) == (400, "invalid_rank"), got.json()
    said = " ".join(got.json()["rank"])
    assert "one host" in said and "rank is 0" in said, got.json()
    assert agent_answers[1:] == []


def test_the_ranks_host_offline_is_named(gang, researcher_client, agent_answers) -> None:
    w, _attempt, (_first, second) = gang
    Host.objects.filter(pk=second.pk).update(state=Host.State.OFFLINE)
    got = researcher_client.post(url(w.pk), {"command": ["id"], "rank": 1}, format="json")
    assert (got.status_code, got.json()["code"]) == (409, "host_offline"), got.json()
    assert second.name in got.json()["detail"]
    assert researcher_client.post(url(w.pk), {"command": ["id"]}, format="json").status_code == 200


def test_an_interactive_session_opens_on_the_host_of_the_rank_asked(gang, researcher) -> None:
    w, attempt, (_first, second) = gang
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(second.pk)
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect())[0]
        await comm.send_to(text_data=json.dumps(first_frame(w, rank=1)))
        opened = await asyncio.wait_for(layer.receive(agent), 10)
        assert (opened["type"], opened["attempt_id"]) == ("exec.pipe.open", attempt.wire_id)
        await _take(layer, opened["reply_to"], opened, agent, 3)
        started = json.loads(await comm.receive_from(timeout=10))
        assert started == {"type": "started", "attempt": 1, "host": second.name}
        await comm.disconnect()

    _run(run())
    frame, code = _run(_refused(token, first_frame(w, rank=5)))
    assert (frame["code"], code) == ("invalid_rank", 4400)
    assert "0 to 1" in frame["message"]


def test_a_readopted_attempt_is_refused_saying_why_and_what_to_do(running, researcher_client, agent_answers):
    w, _attempt = running
    agent_answers[0].answer = {"error": "exec_readopted", "message": "attempt 77 was re-adopted"}
    got = researcher_client.post(url(w.pk), {"command": ["id"]}, format="json")
    assert (got.status_code, got.json()["code"]) == (409, "exec_readopted"), got.json()
    said = got.json()["detail"]
    assert "restarted" in said and "memory" in said and f"fairway logs {w.pk}" in said, said
    assert "attempt 77" not in said  # the wire id means nothing to its owner (the page's ids may hold 77)


def test_a_web_process_holds_a_bounded_number_of_sessions(running, researcher, settings) -> None:
    w, attempt = running
    settings.FAIRWAY_EXEC_MAX_SESSIONS = 1
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, reply_to = await _started(layer, agent, token, first_frame(w), ref=3)
        frame, code = await _refused(token, first_frame(w))
        assert (frame["code"], code) == ("exec_busy", 4429), frame
        assert "FAIRWAY_EXEC_MAX_SESSIONS" not in frame["message"] and "1 interactive session" in frame["message"]
        await comm.disconnect()
        await asyncio.wait_for(layer.receive(agent), 10)  # its close
        again = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
        assert (await again.connect())[0]
        await again.send_to(text_data=json.dumps(first_frame(w)))
        assert (await asyncio.wait_for(layer.receive(agent), 10))["type"] == "exec.pipe.open"
        await again.disconnect()

    _run(run())
    assert exec_session.sessions_held() == 0


def test_a_reader_that_stopped_reading_ends_the_session_within_a_bound(running, researcher, monkeypatch) -> None:
    """A client gone without a word (its machine off, a cable out) whose socket's buffers are full:
    the send to it never returns and the transport's keepalive close waits on the same buffers; the
    session ends once a send has waited ``READER_STALL_S``."""
    w, attempt = running
    token = token_of(researcher)
    monkeypatch.setattr(exec_session, "READER_STALL_S", 0.3)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, reply_to = await _started(layer, agent, token, first_frame(w), ref=4)

        async def stuck(self: Any, text_data: Any = None, bytes_data: Any = None, close: Any = False) -> None:
            if bytes_data is not None:
                await asyncio.sleep(3600)  # uvicorn's send waiting for a buffer that never drains

        monkeypatch.setattr(exec_session.ExecSessionConsumer, "send", stuck)
        await layer.send(reply_to, {"type": "exec.tty.output", "data": "x" * 100})
        got = await asyncio.wait_for(layer.receive(agent), 5)
        assert (got["type"], got["ref"]) == ("exec.tty.close", 4)
        await comm.disconnect()

    _run(run())


def test_a_send_to_a_reader_gone_meanwhile_closes_the_session(running, researcher, monkeypatch) -> None:
    """The reader's socket lost while output was on its way: uvicorn's send raises
    ``ClientDisconnected``; the handler failing there left the session (the agent's command, this
    process's count of sessions) for the idle timeout, its disconnect never handled."""
    w, attempt = running
    token = token_of(researcher)

    async def run() -> None:
        layer, agent = await _fake_agent(attempt.host_id)
        comm, reply_to = await _started(layer, agent, token, first_frame(w), ref=5)
        assert exec_session.sessions_held() == 1

        async def lost(self: Any, text_data: Any = None, bytes_data: Any = None, close: Any = False) -> None:
            raise OSError("ClientDisconnected")  # uvicorn's is an OSError

        monkeypatch.setattr(exec_session.ExecSessionConsumer, "send", lost)
        await layer.send(reply_to, {"type": "exec.tty.output", "data": "x"})
        got = await asyncio.wait_for(layer.receive(agent), 5)
        assert (got["type"], got["ref"]) == ("exec.tty.close", 5)
        assert exec_session.sessions_held() == 0
        await comm.disconnect()

    _run(run())
