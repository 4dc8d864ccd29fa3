"""exec47: the server's side of a one-shot command's bytes (scheduler.consumers, the API). The
agent's ``exec_data`` (base64) are gathered as bytes, capped in bytes, and answered as they are
(``stdout_base64``, ``stderr_base64``) beside the text as before; an agent older than
``exec_bytes`` (``unknown_type``) is asked ``exec`` again and its text taken as before; a frame
that is not base64, or of a stream an answer has not, ends the command with words."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest

from agent import protocol
from scheduler import gateway
from scheduler.consumers import AgentConsumer, _PendingExec
from scheduler.models import Host

OUT = bytes(range(256)) + b"\xc3"


class _Layer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        self.sent.append((channel, message))


def _consumer() -> tuple[AgentConsumer, _Layer, list[protocol.Message]]:
    c = AgentConsumer()
    c.host, c.seq, c.hello_done, c.closing, c.socket_closed = Host(pk=947, name="h"), 10, True, False, False
    c.channel_layer = layer = _Layer()
    c.exec_requests, c.tty_sessions, c.log_requests = {}, {}, {}
    sent: list[protocol.Message] = []

    async def send_msg(msg: protocol.Message) -> None:
        c.seq += 1
        sent.append(msg)

    c.send_msg = send_msg  # type: ignore[method-assign]
    return c, layer, sent


EVENT = {"attempt_id": 5, "command": ["tar", "c", "."], "timeout_s": 10, "max_output": 1000, "reply_to": "r"}


def _data(ref: int, stream: str, data: bytes) -> protocol.ExecData:
    return protocol.ExecData(ref=ref, stream=stream, data=base64.b64encode(data).decode(), eof=False)  # type: ignore[arg-type]


def _end(ref: int, exit_code: int = 0) -> protocol.ExecResult:
    return protocol.ExecResult(ref=ref, exit_code=exit_code, timed_out=False, truncated=False)


def test_the_agents_bytes_are_answered_as_they_are_and_capped_in_bytes() -> None:
    async def run() -> None:
        c, layer, sent = _consumer()
        await c.exec_request(EVENT)
        assert sent == [protocol.ExecBytes(attempt_id=5, command=["tar", "c", "."], timeout_s=10, max_output=1000)]
        for piece in (OUT[:100], OUT[100:], OUT * 4):  # 257 + 1028 bytes: past the cap of 1000
            await c.dispatch_message(_data(11, "stdout", piece))
        await c.dispatch_message(_data(11, "stderr", b"\x00\xff"))
        await c.dispatch_message(_end(11, 2))
        ((to, reply),) = layer.sent
        assert to == "r" and reply["type"] == "exec.reply" and reply["exit_code"] == 2
        assert base64.b64decode(reply["stdout_base64"]) == (OUT * 5)[:1000] and reply["truncated"] is True
        assert base64.b64decode(reply["stderr_base64"]) == b"\x00\xff"
        assert c.exec_requests == {}

    asyncio.run(run())


def test_an_agent_older_than_exec_bytes_is_asked_exec_and_its_text_taken() -> None:
    async def run() -> None:
        c, layer, sent = _consumer()
        await c.exec_request(EVENT)
        refusal = protocol.Error(code=protocol.ERR_UNKNOWN_TYPE, message="unknown message type 'exec_bytes'", ref=11)
        await c.dispatch_message(refusal)
        assert layer.sent == [] and len(sent) == 2  # asked again, nothing answered yet
        assert type(sent[1]) is protocol.Exec and sent[1] == protocol.Exec(
            attempt_id=5, command=["tar", "c", "."], timeout_s=10, max_output=1000
        )
        await c.dispatch_message(protocol.ExecOutput(ref=12, stream="stdout", data="héllo \ufffd"))
        await c.dispatch_message(_end(12))
        ((_, reply),) = layer.sent
        assert base64.b64decode(reply["stdout_base64"]) == "héllo \ufffd".encode() and reply["stderr_base64"] == ""
        # and this connection's next command is asked as that agent understands at once
        await c.exec_request(EVENT)
        assert type(sent[2]) is protocol.Exec

    asyncio.run(run())


@pytest.mark.parametrize(
    ("frame", "words"),
    [
        ({"stream": "stdout", "data": "not base64!"}, "not base64"),
        ({"stream": "stdin", "data": ""}, "stdin"),
    ],
)
def test_a_frame_a_command_cannot_have_ends_it_with_words(frame: dict[str, Any], words: str) -> None:
    async def run() -> None:
        c, layer, _sent = _consumer()
        await c.exec_request(EVENT)
        await c.dispatch_message(protocol.ExecData(ref=11, eof=False, **frame))
        ((_, reply),) = layer.sent
        assert reply["error"] == "exec_failed" and words in reply["message"], reply
        await c.dispatch_message(_end(11))  # its later frames go nowhere
        assert len(layer.sent) == 1 and c.exec_requests == {}

    asyncio.run(run())


def test_the_cap_counts_bytes_of_an_old_agents_text() -> None:
    waiting = _PendingExec("reply", max_output=5)
    waiting.add("stdout", "ééé".encode())  # 6 bytes of UTF-8
    reply = waiting.reply(protocol.ExecResult(ref=1, exit_code=0, timed_out=False, truncated=False))
    assert base64.b64decode(reply["stdout_base64"]) == "ééé".encode()[:5] and reply["truncated"] is True


@pytest.fixture
def running(started_workload: tuple[Any, Any]) -> Any:
    return started_workload[0]


def test_the_api_answers_the_bytes_beside_the_text(running, researcher_client, monkeypatch) -> None:
    def fake(host_id: int, wire_id: int, command: list[str], timeout_s: int, max_output: int) -> dict:
        return {"exit_code": 0, "stdout_base64": base64.b64encode(OUT).decode(), "stderr_base64": "",
                "truncated": False, "timed_out": False}  # fmt: skip

    monkeypatch.setattr(gateway, "request_exec", fake)
    got = researcher_client.post(f"/api/v1/workloads/{running.pk}/exec/", {"command": ["cat", "f"]}, format="json")
    assert got.status_code == 200, got.json()
    body = got.json()
    assert base64.b64decode(body["stdout_base64"]) == OUT and body["stderr_base64"] == ""
    assert body["stdout"] == OUT.decode(errors="replace") and body["stderr"] == ""
