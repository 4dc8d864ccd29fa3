"""The agent websocket in-process (channels' WebsocketCommunicator): authentication, validation, dispatch."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator

from agent import protocol
from config.asgi import application
from scheduler.lifecycle import charged_seconds
from scheduler.models import Attempt, AttemptGPU, Cluster, Host, Workload

pytestmark = [pytest.mark.timeout(30), pytest.mark.django_db(transaction=True)]


@pytest.fixture
def host_token(db: None) -> tuple[Host, str]:
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="gw", allow_root_workloads=True)
    return do_register_host(cluster, "h1", [(0, "GPU-a", "H100", 80000), (1, "GPU-b", "H100", 80000)])


def _communicator(token: str | None) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return WebsocketCommunicator(application, "/ws/agent/", headers=headers)


def _hello(host: str = "h1", attempts: list[dict[str, Any]] | None = None) -> str:
    return json.dumps(
        {
            "v": 1,
            "type": "hello",
            "id": 1,
            "host": host,
            "agent_version": "test",
            "gpus": [
                {"index": 0, "uuid": "GPU-a", "model": "H100", "memory_mb": 80000, "health": "healthy"},
                {"index": 1, "uuid": "GPU-b", "model": "H100", "memory_mb": 80000, "health": "healthy"},
            ],
            "attempts": attempts or [],
        }
    )


async def _receive(comm: WebsocketCommunicator) -> protocol.Message:
    return protocol.decode(await comm.receive_from(timeout=5), allowed=protocol.SERVER_MESSAGE_TYPES)


def test_a_bad_token_is_refused_with_4401(host_token):
    asyncio.run(_test_a_bad_token_is_refused_with_4401(host_token))


async def _test_a_bad_token_is_refused_with_4401(host_token):
    comm = _communicator("not-a-token")
    connected, _ = await comm.connect()
    assert connected  # accepted only to say why: the close code tells the agent not to retry blindly
    out = await comm.receive_output(timeout=5)
    assert out == {"type": "websocket.close", "code": 4401, "reason": ""} or out.get("code") == 4401


def test_hello_is_welcomed_and_bad_frames_get_errors_without_closing(host_token):
    asyncio.run(_test_hello_is_welcomed_and_bad_frames_get_errors_without_closing(host_token))


async def _test_hello_is_welcomed_and_bad_frames_get_errors_without_closing(host_token):
    host, token = host_token
    comm = _communicator(token)
    assert (await comm.connect())[0]

    await comm.send_to(text_data="{not json")
    err = await _receive(comm)
    assert isinstance(err, protocol.Error) and err.code == protocol.ERR_BAD_JSON

    await comm.send_to(text_data=_hello(host="someone-else"))
    err = await _receive(comm)
    assert isinstance(err, protocol.Error) and "h1" in err.message

    await comm.send_to(text_data=_hello())
    welcome = await _receive(comm)
    assert isinstance(welcome, protocol.Welcome) and welcome.host == "h1"

    await comm.send_to(text_data=json.dumps({"v": 1, "type": "heartbeat", "id": 2, "gpus": "nope", "running": []}))
    err = await _receive(comm)
    assert isinstance(err, protocol.Error) and err.ref == 2
    await comm.disconnect()

    refreshed = await Host.objects.aget(pk=host.pk)
    assert refreshed.agent_version == "test" and refreshed.last_heartbeat is not None


def test_the_desired_state_is_sent_after_hello_and_unknown_attempts_are_stopped(host_token):
    asyncio.run(_test_the_desired_state_is_sent_after_hello_and_unknown_attempts_are_stopped(host_token))


async def _test_the_desired_state_is_sent_after_hello_and_unknown_attempts_are_stopped(host_token):
    host, token = host_token
    attempt_id = await _place(host)
    comm = _communicator(token)
    assert (await comm.connect())[0]

    await comm.send_to(
        text_data=_hello(attempts=[{"attempt_id": 777, "state": "running", "exit_code": None, "age_s": None}])
    )
    messages = [await _receive(comm) for _ in range(3)]

    assert isinstance(messages[0], protocol.Welcome)
    start, stop = messages[1], messages[2]
    assert isinstance(start, protocol.Start) and start.attempt_id == attempt_id
    assert start.gpu_uuids == ["GPU-a"] and start.command == ["sleep", "1"]
    assert isinstance(stop, protocol.Stop) and (stop.attempt_id, stop.reason) == (777, "not_wanted")

    # the agent confirms the start: the attempt is running, the event acknowledged
    await comm.send_to(
        text_data=json.dumps(
            {
                "v": 1,
                "type": "attempt",
                "id": 5,
                "attempt_id": attempt_id,
                "state": "started",
                "exit_code": None,
                "age_s": None,
                "message": "",
            }
        )
    )
    ack = await _receive(comm)
    assert isinstance(ack, protocol.Ack) and ack.ack == 5
    attempt = await Attempt.objects.aget(wire_id=attempt_id)
    assert attempt.started_at is not None
    await comm.disconnect()


async def _place(host: Host, placed_ago: float = 0.0) -> int:
    from datetime import timedelta

    from asgiref.sync import sync_to_async
    from django.utils import timezone

    def place() -> int:
        from accounts.models import User
        from budgets.models import Budget

        user = User.objects.create_user("gw-user")
        budget = Budget.objects.create(name="gw-budget")
        w = Workload.objects.create(
            name="w",
            owner=user,
            budget=budget,
            cluster=host.cluster,
            gpu_model="H100",
            gpu_count=1,
            command=["sleep", "1"],
            min_runtime_s=60,
            submitted_at=timezone.now(),
            seq=1,
            state=Workload.State.STARTING,
        )
        placed_at = timezone.now() - timedelta(seconds=placed_ago)
        a = Attempt.objects.create(workload=w, number=1, host=host, allocated=True, placed_at=placed_at)
        AttemptGPU.objects.create(attempt=a, gpu=host.gpus.get(index=0))
        return a.wire_id  # what the agent link names it by

    return await sync_to_async(place)()


def _attempt_frame(seq: int, attempt_id: int, state: str, age_s: float | None, exit_code: int | None = None) -> str:
    """An agent's ``attempt`` frame, as the agent encodes it."""
    event = protocol.AttemptEvent(attempt_id, state, exit_code=exit_code, age_s=age_s)  # type: ignore[arg-type]
    return protocol.encode(dataclasses.replace(event, id=seq))


def _seconds_ago(at: Any) -> float:
    from django.utils import timezone

    return (timezone.now() - at).total_seconds()


def test_a_hello_dates_a_start_the_server_never_got_and_the_exit_after_it_is_charged(host_token):
    """Demo under load: ``started`` lost with a connection; the agent's next hello lists the
    attempt running with the age of its start (even when it has exited since: its exit follows)."""
    asyncio.run(_test_a_hello_dates_a_start_the_server_never_got(host_token))


async def _test_a_hello_dates_a_start_the_server_never_got(host_token):
    host, token = host_token
    attempt_id = await _place(host, placed_ago=120)
    comm = _communicator(token)
    assert (await comm.connect())[0]

    # When the hello reports it running since 50 s, and then its exit 10 s ago
    await comm.send_to(
        text_data=_hello(attempts=[{"attempt_id": attempt_id, "state": "running", "exit_code": None, "age_s": 50.0}])
    )
    assert isinstance(await _receive(comm), protocol.Welcome)
    await comm.send_to(text_data=_attempt_frame(2, attempt_id, "exited", 10.0, exit_code=0))
    ack = await _receive(comm)

    # Then no start is sent again, and the attempt is charged the 40 s it ran
    assert isinstance(ack, protocol.Ack) and ack.ack == 2
    attempt = await Attempt.objects.aget(wire_id=attempt_id)
    assert attempt.started_at is not None and 49 <= _seconds_ago(attempt.started_at) <= 52
    assert attempt.end_reason == "succeeded" and attempt.ended_at is not None
    # 40 s in whole seconds of start and end (lifecycle.charged_seconds): 41 when the 40 s cross one more
    assert attempt.charged_gpu_seconds == charged_seconds(attempt.started_at, attempt.ended_at) in (40, 41)
    await comm.disconnect()


def test_a_running_attempt_reported_without_its_start_age_is_sent_its_start_again(host_token):
    """An agent older than the dated hello (or one still pulling the image) reports the attempt
    running with no age: the server sends its start once more; the agent's ``running`` answer
    confirms it (before: the start was never confirmed, the attempt failed to start after
    START_TIMEOUT although it ran)."""
    asyncio.run(_test_a_running_attempt_reported_without_its_start_age(host_token))


async def _test_a_running_attempt_reported_without_its_start_age(host_token):
    host, token = host_token
    attempt_id = await _place(host, placed_ago=120)
    comm = _communicator(token)
    assert (await comm.connect())[0]

    await comm.send_to(
        text_data=_hello(attempts=[{"attempt_id": attempt_id, "state": "running", "exit_code": None, "age_s": None}])
    )
    assert isinstance(await _receive(comm), protocol.Welcome)
    start = await _receive(comm)
    assert isinstance(start, protocol.Start) and start.attempt_id == attempt_id
    await comm.send_to(text_data=_attempt_frame(2, attempt_id, "running", 40.0))
    ack = await _receive(comm)

    assert isinstance(ack, protocol.Ack) and ack.ack == 2
    attempt = await Attempt.objects.aget(wire_id=attempt_id)
    assert attempt.started_at is not None and 39 <= _seconds_ago(attempt.started_at) <= 42
    # once: the heartbeat that lists it running sends nothing more
    await comm.send_to(
        text_data=json.dumps({"v": 1, "type": "heartbeat", "id": 3, "gpus": [], "running": [attempt_id]})
    )
    assert await comm.receive_nothing(timeout=1.5)
    await comm.disconnect()


def test_a_graceful_shutdown_writes_the_buffered_heartbeats(host_token, settings):
    # A flush period longer than the test: only the disconnect can write the heartbeat
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 600, "HEARTBEAT_S": 2400}
    asyncio.run(_test_a_graceful_shutdown_writes_the_buffered_heartbeats(host_token))


async def _test_a_graceful_shutdown_writes_the_buffered_heartbeats(host_token):
    host, token = host_token
    comm = _communicator(token)
    assert (await comm.connect())[0]
    await comm.send_to(text_data=_hello())
    assert isinstance(await _receive(comm), protocol.Welcome)
    hello_at = (await Host.objects.aget(pk=host.pk)).last_heartbeat
    await asyncio.sleep(0.05)
    await comm.send_to(text_data=json.dumps({"v": 1, "type": "heartbeat", "id": 2, "gpus": [], "running": []}))
    await asyncio.sleep(0.2)  # handled (buffered in the hub), not written
    assert (await Host.objects.aget(pk=host.pk)).last_heartbeat == hello_at
    # uvicorn's graceful shutdown (SIGTERM) closes every agent socket with 1012
    await comm.disconnect(code=1012)
    written = (await Host.objects.aget(pk=host.pk)).last_heartbeat
    assert written is not None and hello_at is not None and written > hello_at


def test_an_exit_dated_before_a_stop_it_was_heard_running_after_ends_with_the_stop(host_token):
    """brk35: an exit report's ``age_s`` dated the end before a cancel the attempt was still
    running at (a heartbeat after the cancel listed it), so it ended ``succeeded`` and was charged
    less; the end is never before the last frame that said it ran, and the cancel's reason wins
    (DESIGN.md §4)."""
    asyncio.run(_test_an_exit_dated_before_a_stop_it_was_heard_running_after(host_token))


async def _test_an_exit_dated_before_a_stop_it_was_heard_running_after(host_token):
    from datetime import timedelta

    from django.utils import timezone

    host, token = host_token
    attempt_id = await _place(host, placed_ago=300)
    await Attempt.objects.filter(wire_id=attempt_id).aupdate(
        stop_requested_at=timezone.now() - timedelta(seconds=30), stop_reason="canceled"
    )
    comm = _communicator(token)
    assert (await comm.connect())[0]
    await comm.send_to(
        text_data=_hello(attempts=[{"attempt_id": attempt_id, "state": "running", "exit_code": None, "age_s": 290.0}])
    )
    assert isinstance(await _receive(comm), protocol.Welcome)
    # The agent lists it running after the cancel, then says it exited 0 "100 s ago"
    await comm.send_to(
        text_data=json.dumps({"v": 1, "type": "heartbeat", "id": 2, "gpus": [], "running": [attempt_id]})
    )
    heard = timezone.now()
    await comm.send_to(text_data=_attempt_frame(3, attempt_id, "exited", 100.0, exit_code=0))
    while not isinstance(ack := await _receive(comm), protocol.Ack):
        pass  # the stop the server sends
    assert ack.ack == 3

    attempt = await Attempt.objects.aget(wire_id=attempt_id)
    assert attempt.end_reason == "canceled" and attempt.exit_code == 0
    assert attempt.ended_at is not None and attempt.ended_at >= heard - timedelta(seconds=2)
    await comm.disconnect()
