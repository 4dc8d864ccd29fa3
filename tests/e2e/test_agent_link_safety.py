"""The agent link's safety (issue 14): one live connection per host, token rotation and revocation
cut connections, attempt identities fenced across a database restore, hello held to the
registered GPU inventory, malformed frames refused without changing anything.

Websocket tests run the ASGI app in-process (channels' WebsocketCommunicator, in-memory layer).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.utils import timezone

from agent import protocol
from config.asgi import application
from scheduler import gateway, lifecycle
from scheduler.models import GPU, Attempt, AttemptGPU, Cluster, Host, HostEvent, Workload

pytestmark = [pytest.mark.timeout(30), pytest.mark.django_db(transaction=True)]

GPUS = [(0, "GPU-a", "H100", 80000), (1, "GPU-b", "H100", 80000)]


@pytest.fixture
def host_token(db: None) -> tuple[Host, str]:
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="link", allow_root_workloads=True)
    return do_register_host(cluster, "h1", GPUS)


def _communicator(token: str) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, "/ws/agent/", headers=[(b"authorization", f"Bearer {token}".encode())])


def _gpu(index: int, uuid: str, model: str = "H100", memory_mb: int = 80000) -> dict[str, Any]:
    return {"index": index, "uuid": uuid, "model": model, "memory_mb": memory_mb, "health": "healthy"}


def _hello(gpus: list[dict[str, Any]] | None = None, attempts: list[dict[str, Any]] | None = None, **extra: Any) -> str:
    body = {
        "v": 1,
        "type": "hello",
        "id": 1,
        "host": "h1",
        "agent_version": "test",
        "gpus": gpus if gpus is not None else [_gpu(i, u, m, mem) for i, u, m, mem in GPUS],
        "attempts": attempts or [],
    }
    return json.dumps({**body, **extra})


def _event(seq: int, attempt_id: int, state: str, exit_code: int | None = None, message: str = "") -> dict:
    return {
        "v": 1,
        "type": "attempt",
        "id": seq,
        "attempt_id": attempt_id,
        "state": state,
        "exit_code": exit_code,
        "age_s": None,
        "message": message,
    }


async def _receive(comm: WebsocketCommunicator, wait: float = 5) -> protocol.Message:
    return protocol.decode(await comm.receive_from(timeout=wait), allowed=protocol.SERVER_MESSAGE_TYPES)


async def _welcomed(token: str) -> WebsocketCommunicator:
    comm = _communicator(token)
    assert (await comm.connect())[0]
    await comm.send_to(text_data=_hello())
    assert isinstance(await _receive(comm), protocol.Welcome)
    return comm


async def _until_closed(comm: WebsocketCommunicator, wait: float = 3) -> tuple[int | None, list[Any]]:
    """(close code or None if still open after ``wait`` seconds, messages received before)."""
    seen: list[Any] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while (left := deadline - loop.time()) > 0:
        try:
            out = await comm.receive_output(timeout=left)
        except TimeoutError:
            break
        if out["type"] == "websocket.close":
            return out.get("code"), seen
        seen.append(protocol.decode(out["text"], allowed=protocol.SERVER_MESSAGE_TYPES))
    return None, seen


def _place_sync(host: Host, secret: str = "s3cret", pk: int | None = None) -> Attempt:  # noqa: S107 -- test env
    from accounts.models import User
    from budgets.models import Budget

    user, _ = User.objects.get_or_create(username="link-user")
    budget, _ = Budget.objects.get_or_create(name="link-budget")
    w = Workload.objects.create(
        name="w",
        owner=user,
        budget=budget,
        cluster=host.cluster,
        gpu_model="H100",
        gpu_count=1,
        command=["sleep", "1"],
        env={"API_KEY": {"value": secret, "secret": True}},
        min_runtime_s=60,
        submitted_at=timezone.now(),
        seq=Workload.objects.count() + 1,
        state=Workload.State.STARTING,
    )
    a = Attempt.objects.create(pk=pk, workload=w, number=1, host=host, allocated=True, placed_at=timezone.now())
    AttemptGPU.objects.create(attempt=a, gpu=host.gpus.get(index=0))
    return a


_place = sync_to_async(_place_sync)


async def _push(host: Host) -> None:
    await get_channel_layer().group_send(gateway.host_group(host.pk), {"type": "desired.state"})


# --- finding 1 and 8: one live connection per host; rotate and revoke cut it -----------------------


def test_a_second_connection_with_the_host_token_closes_the_first(host_token):
    """Finding 1: a second connection beside the real agent was accepted and got the next start
    (secret env included). Now the newest connection wins: the older one is closed with 4409
    before any start, and only the live one is sent the start."""
    asyncio.run(_second_connection(*host_token))


async def _second_connection(host: Host, token: str) -> None:
    real = await _welcomed(token)
    other = await _welcomed(token)

    code, before = await _until_closed(real)
    assert code == 4409 and before == []

    attempt = await _place(host)
    await _push(host)
    start = await _receive(other)
    assert isinstance(start, protocol.Start) and start.attempt_id == attempt.wire_id
    assert start.env["API_KEY"] == "s3cret"
    assert (await _until_closed(real, 0.5))[1] == []  # the closed one got nothing
    await other.disconnect()


def test_a_stale_connection_whose_close_was_lost_is_fenced_and_gets_no_start(host_token):
    """Finding 8: whatever the channel layer loses, a connection that is not the host's live one
    (a newer one was accepted in another web process) is sent no start: it is closed instead."""
    asyncio.run(_stale_connection(*host_token))


async def _stale_connection(host: Host, token: str) -> None:
    comm = await _welcomed(token)
    # another process accepted a newer connection; its agent.superseded never reached us
    await Host.objects.filter(pk=host.pk).aupdate(link_generation=host.link_generation + 100)
    await _place(host)
    await _push(host)

    code, before = await _until_closed(comm)
    assert code == 4409
    assert not any(isinstance(m, protocol.Start) for m in before)


def test_a_stale_connections_heartbeats_keep_no_host_alive_and_its_hello_is_refused(host_token, settings):
    asyncio.run(_stale_heartbeats(*host_token))


async def _stale_heartbeats(host: Host, token: str) -> None:
    comm = _communicator(token)
    assert (await comm.connect())[0]
    await Host.objects.filter(pk=host.pk).aupdate(link_generation=host.link_generation + 100)
    await comm.send_to(text_data=_hello())
    code, before = await _until_closed(comm)
    assert code == 4409 and before == []  # no welcome, no start
    assert not await HostEvent.objects.filter(host=host, kind="hello").aexists()


def test_a_stale_connection_cannot_end_the_hosts_attempts(host_token):
    """A connection that is no longer the host's live one speaks for it no more: its attempt
    events are not recorded, it is closed."""
    asyncio.run(_stale_event(*host_token))


async def _stale_event(host: Host, token: str) -> None:
    attempt = await _place(host)
    comm = await _welcomed(token)
    assert isinstance(await _receive(comm), protocol.Start)
    await Host.objects.filter(pk=host.pk).aupdate(link_generation=host.link_generation + 100)
    await comm.send_to(text_data=json.dumps(_event(2, attempt.wire_id, "failed_to_start", message="fake")))

    code, before = await _until_closed(comm)
    assert code == 4409 and not any(isinstance(m, protocol.Ack) for m in before)
    assert (await Attempt.objects.aget(pk=attempt.pk)).ended_at is None


def test_rotating_a_host_token_closes_its_open_connections_at_once(host_token):
    """Finding 8: rotating a token did not cut the open connections."""
    asyncio.run(_rotate(*host_token))


async def _rotate(host: Host, token: str) -> None:
    from scheduler.services import do_rotate_host_token

    comm = await _welcomed(token)
    new_token = await sync_to_async(do_rotate_host_token)(None, host)

    code, _ = await _until_closed(comm)
    assert code == 4401
    # the old token is refused, the new one accepted
    old = _communicator(token)
    assert (await old.connect())[0]
    assert (await _until_closed(old))[0] == 4401
    fresh = await _welcomed(new_token)
    await fresh.disconnect()


def test_removing_a_host_closes_its_connection_with_the_host_removed_code(host_token):
    """sec41: removal closed the open connection with 4401 ("host token removed"), which the agent
    retries; it is 4410 now, at once and at every later connect (tests/e2e/test_host_removed.py
    runs the real agent on it)."""
    asyncio.run(_remove(*host_token))


async def _remove(host: Host, token: str) -> None:
    from scheduler.services import do_remove_host

    comm = await _welcomed(token)
    await sync_to_async(do_remove_host)(None, host, "decommissioned")
    assert (await _until_closed(comm))[0] == protocol.CLOSE_HOST_REMOVED == 4410
    again = _communicator(token)
    assert (await again.connect())[0]
    assert (await _until_closed(again))[0] == 4410


def test_revoking_a_host_token_closes_its_connections_and_refuses_the_token(host_token):
    asyncio.run(_revoke(*host_token))


async def _revoke(host: Host, token: str) -> None:
    from scheduler.services import do_revoke_host_token

    comm = await _welcomed(token)
    await sync_to_async(do_revoke_host_token)(None, host)

    assert (await _until_closed(comm))[0] == 4401
    again = _communicator(token)
    assert (await again.connect())[0]
    assert (await _until_closed(again))[0] == 4401
    kinds = [e async for e in HostEvent.objects.filter(host=host).values_list("kind", flat=True)]
    assert "token_revoked" in kinds


def test_the_admin_actions_rotate_and_revoke_host_tokens(host_token, admin_client, monkeypatch):
    host, _token = host_token
    closed: list[tuple[list[int], str]] = []
    monkeypatch.setattr(
        gateway, "close_host_links", lambda ids, reason="token", before=None: closed.append((list(ids), reason))
    )
    url = "/admin/scheduler/host/"

    response = admin_client.post(url, {"action": "rotate_token", "_selected_action": [host.pk]}, follow=True)
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    new_token = next(m.split("new host token ")[1].split(" ")[0] for m in shown if "new host token" in m)
    from scheduler.services import authenticate_host_token

    assert authenticate_host_token(new_token) == host
    response = admin_client.post(url, {"action": "revoke_token", "_selected_action": [host.pk]}, follow=True)
    assert response.status_code == 200
    assert authenticate_host_token(new_token) is None
    assert closed == [([host.pk], "rotated"), ([host.pk], "revoked")]


# --- finding 3: attempt identity fenced across a restore -------------------------------------------


def test_after_a_restore_a_reused_attempt_id_does_not_match_the_agents_old_record(host_token):
    """Finding 3 (simulated restore): the agent remembers attempt 7's exit; the database is reset
    so that a new attempt gets primary key 7 again. Its start must not be the old attempt: the
    agent answers a start it does not know by starting it, so its exit is the new run's."""
    asyncio.run(_restore(*host_token))


async def _restore(host: Host, token: str) -> None:
    old = await _place(host, secret="old")
    old_pk, old_wire = old.pk, old.wire_id
    # "restore": the attempt rows after the dump are gone, the next attempt reuses the primary key
    await Workload.objects.filter(pk=old.workload_id).adelete()
    new = await _place(host, pk=old_pk)  # as the restored sequence would number it
    assert new.pk == old_pk and new.wire_id != old_wire

    comm = _communicator(token)
    assert (await comm.connect())[0]
    # the agent still holds the old attempt's unacknowledged exit (exit 0)
    old_exit = {"attempt_id": old_wire, "state": "exited", "exit_code": 0, "age_s": 5.0}
    await comm.send_to(text_data=_hello(attempts=[old_exit]))
    assert isinstance(await _receive(comm), protocol.Welcome)
    start = await _receive(comm)
    assert isinstance(start, protocol.Start) and start.attempt_id == new.wire_id
    assert start.env["API_KEY"] == "s3cret"
    refreshed = await Attempt.objects.aget(pk=new.pk)
    assert refreshed.ended_at is None  # the old exit did not end the new attempt

    # an exit naming the old identity is ignored; the new one's own exit is recorded
    await comm.send_to(text_data=json.dumps(_event(2, old_wire, "exited", 0)))
    assert isinstance(await _receive(comm), protocol.Ack)
    assert (await Attempt.objects.aget(pk=new.pk)).ended_at is None
    await comm.send_to(text_data=json.dumps(_event(3, new.wire_id, "started")))
    assert isinstance(await _receive(comm), protocol.Ack)
    await comm.send_to(text_data=json.dumps(_event(4, new.wire_id, "exited", 3)))
    assert isinstance(await _receive(comm), protocol.Ack)
    ended = await Attempt.objects.aget(pk=new.pk)
    assert (ended.end_reason, ended.exit_code) == ("failed", 3)
    await comm.disconnect()


# --- finding 6: hello held to the registered GPU inventory -------------------------------------------


def test_a_hello_adding_gpus_of_another_model_changes_no_inventory_and_cordons_the_host(host_token):
    """Finding 6: a hello added A100s to an H100 host; H100 work went to them and submissions
    without a model failed. Now the registered GPUs stay, the report awaits an admin."""
    asyncio.run(_foreign_gpus(*host_token))


async def _foreign_gpus(host: Host, token: str) -> None:
    comm = _communicator(token)
    assert (await comm.connect())[0]
    gpus = [_gpu(i, u, m, mem) for i, u, m, mem in GPUS] + [_gpu(2, "GPU-x", "A100"), _gpu(3, "GPU-y", "A100")]
    await comm.send_to(text_data=_hello(gpus=gpus))
    assert isinstance(await _receive(comm), protocol.Welcome)  # running work keeps being managed
    await comm.disconnect()

    models = [m async for m in GPU.objects.filter(host=host).order_by("index").values_list("model", flat=True)]
    assert models == ["H100", "H100"]
    refreshed = await Host.objects.aget(pk=host.pk)
    assert refreshed.state == Host.State.CORDONED
    assert [g["uuid"] for g in refreshed.pending_inventory["gpus"]] == ["GPU-a", "GPU-b", "GPU-x", "GPU-y"]
    assert await HostEvent.objects.filter(host=host, kind="inventory_held").aexists()


def test_a_changed_inventory_needs_an_admins_approval(host_token):
    host, _token = host_token
    same_model = [lifecycle.GpuReport(i, u, m, mem) for i, u, m, mem in GPUS] + [
        lifecycle.GpuReport(2, "GPU-c", "H100", 80000)
    ]
    lifecycle.host_hello(host, agent_version="t", gpus=same_model, running=[])
    assert GPU.objects.filter(host=host).count() == 2

    lifecycle.do_approve_host_inventory(None, host)

    host.refresh_from_db()
    assert GPU.objects.filter(host=host).count() == 3
    assert (host.state, host.pending_inventory) == (Host.State.ACTIVE, None)
    assert HostEvent.objects.filter(host=host, kind="inventory_approved").exists()


def test_an_inventory_of_mixed_models_cannot_be_approved_and_a_matching_hello_resumes(host_token):
    from config.errors import ServiceError

    host, _token = host_token
    mixed = [lifecycle.GpuReport(0, "GPU-a", "H100", 80000), lifecycle.GpuReport(1, "GPU-b", "A100", 80000)]
    lifecycle.host_hello(host, agent_version="t", gpus=mixed, running=[])
    with pytest.raises(ServiceError) as refused:
        lifecycle.do_approve_host_inventory(None, host)
    assert refused.value.code == "mixed_models"
    assert list(GPU.objects.filter(host=host).values_list("model", flat=True)) == ["H100", "H100"]

    registered = [lifecycle.GpuReport(i, u, m, 81559) for i, u, m, _mem in GPUS]  # memory may differ
    lifecycle.host_hello(host, agent_version="t", gpus=registered, running=[])
    host.refresh_from_db()
    assert (host.state, host.pending_inventory) == (Host.State.ACTIVE, None)
    assert set(GPU.objects.filter(host=host).values_list("memory_mb", flat=True)) == {81559}


def test_a_hello_matching_the_registered_inventory_changes_nothing(host_token):
    host, _token = host_token
    lifecycle.host_hello(
        host, agent_version="t", gpus=[lifecycle.GpuReport(i, u, m, mem) for i, u, m, mem in GPUS], running=[]
    )
    host.refresh_from_db()
    assert (host.state, host.pending_inventory) == (Host.State.ACTIVE, None)
    assert not HostEvent.objects.filter(host=host, kind="inventory_held").exists()


# --- finding 10 (websocket part): malformed frames change nothing --------------------------------------


def test_a_lone_surrogate_in_a_frame_is_refused_and_the_connection_goes_on(host_token):
    """Finding 10: surrogates in websocket frames: the exit was not recorded (the database could
    not store it). Now the frame is answered with ``error`` (invalid), nothing changes, and the
    next valid exit is recorded."""
    asyncio.run(_surrogates(*host_token))


async def _surrogates(host: Host, token: str) -> None:
    attempt = await _place(host)
    comm = await _welcomed(token)
    assert isinstance(await _receive(comm), protocol.Start)
    await comm.send_to(text_data=json.dumps(_event(2, attempt.wire_id, "started")))
    assert isinstance(await _receive(comm), protocol.Ack)

    bad = json.dumps(_event(3, attempt.wire_id, "exited", 1, message="boom")).replace("boom", "\\ud800boom")
    await comm.send_to(text_data=bad)
    err = await _receive(comm)
    assert isinstance(err, protocol.Error) and (err.code, err.ref) == (protocol.ERR_INVALID, 3)
    assert (await Attempt.objects.aget(pk=attempt.pk)).ended_at is None

    await comm.send_to(text_data=json.dumps(_event(4, attempt.wire_id, "exited", 1, message="boom")))
    assert isinstance(await _receive(comm), protocol.Ack)
    ended = await Attempt.objects.aget(pk=attempt.pk)
    assert (ended.end_reason, ended.exit_code) == ("failed", 1)
    await comm.disconnect()


@pytest.mark.parametrize(
    "hello",
    [
        _hello(agent_version="1.0\ud800"),
        _hello(gpus=[_gpu(0, "GPU-a"), _gpu(1, "GPU-b", memory_mb=2**40)]),
        _hello(gpus=[_gpu(0, "GPU-a\udc00"), _gpu(1, "GPU-b")]),
    ],
    ids=["surrogate-version", "memory-2^40", "surrogate-uuid"],
)
def test_a_malformed_hello_is_refused_and_changes_nothing(host_token, hello):
    asyncio.run(_malformed_hello(*host_token, hello))


async def _malformed_hello(host: Host, token: str, hello: str) -> None:
    comm = _communicator(token)
    assert (await comm.connect())[0]
    await comm.send_to(text_data=hello)
    err = await _receive(comm)
    assert isinstance(err, protocol.Error) and err.code == protocol.ERR_INVALID
    await comm.send_to(text_data=_hello())  # the connection survives
    assert isinstance(await _receive(comm), protocol.Welcome)
    await comm.disconnect()
    gpus = [g async for g in GPU.objects.filter(host=host).order_by("index").values_list("uuid", "memory_mb")]
    assert gpus == [("GPU-a", 80000), ("GPU-b", 80000)]
    assert await HostEvent.objects.filter(host=host, kind="hello").acount() == 1
