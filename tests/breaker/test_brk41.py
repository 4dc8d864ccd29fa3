"""brk41: leftovers of the previous breaker round (the agent link's frame size at the server, the
token out of the process list, an array's dependencies written in bulk) and this round's finds."""

from __future__ import annotations

import asyncio
import math
import re
import socket
from pathlib import Path
from typing import Any

import uvicorn
import websockets
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agent.protocol import MAX_MESSAGE_BYTES
from scheduler.models import Workload, WorkloadDependency, WorkloadEvent
from scheduler.services import do_submit_workload

DEPENDENCY_TABLE = WorkloadDependency._meta.db_table


def _dependency_inserts(ctx: CaptureQueriesContext) -> int:
    return sum(1 for q in ctx.captured_queries if q["sql"].startswith("INSERT") and DEPENDENCY_TABLE in q["sql"])


def test_an_arrays_dependencies_are_written_in_bulk_not_per_member(researcher, submit_kwargs):
    """brk40 leftover: a 1000-member array with 64 ``after`` dependencies cost one INSERT of its
    dependencies per member (with the workload's and its event's: ~3,000 statements). The rows of
    every member are one bulk_create: as many statements as the database's batch needs for all of
    them (PostgreSQL: one), and the array's statements grow by no more than that with its
    dependencies."""
    members, deps = 40, 64
    done = [do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name=f"d{i}")) for i in range(deps)]
    after = [f"{w.pk}:any" for w in done]
    with CaptureQueriesContext(connection) as without:
        do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="plain", array=f"0-{members - 1}"))
    with CaptureQueriesContext(connection) as with_deps:
        first = do_submit_workload(
            researcher, **submit_kwargs(gpu_count=1, name="arr", array=f"0-{members - 1}", after=after)
        )
    rows = list(WorkloadDependency.objects.filter(workload__group=first.group))
    assert len(rows) == members * deps
    assert {(r.after_id, r.condition) for r in rows} == {(w.pk, "any") for w in done}
    assert Workload.objects.filter(group=first.group).count() == members
    fields = [f for f in WorkloadDependency._meta.concrete_fields if not f.primary_key]
    per_statement = connection.ops.bulk_batch_size(fields, rows) or len(rows)
    statements = math.ceil(members * deps / per_statement)
    assert _dependency_inserts(with_deps) <= statements, _dependency_inserts(with_deps)
    # the after list's checks: a fixed number of reads, whatever the number of members
    assert len(with_deps.captured_queries) <= len(without.captured_queries) + statements + 4
    # and the members' submitted events: one bulk_create too (as many statements as its batches)
    event_table = WorkloadEvent._meta.db_table
    events = [q for q in without.captured_queries if q["sql"].startswith("INSERT") and event_table in q["sql"]]
    event_fields = [f for f in WorkloadEvent._meta.concrete_fields if not f.primary_key]
    per_event_statement = connection.ops.bulk_batch_size(event_fields, list(range(members))) or members
    assert len(events) <= math.ceil(members / per_event_statement), len(events)
    assert WorkloadEvent.objects.filter(workload__group=first.group, kind="submitted").count() == members


def _web_commands() -> list[str]:
    """The web process's command line in the Procfile, the image's entry point and the systemd unit."""
    repo = Path(__file__).resolve().parents[2]
    procfile = next(line for line in (repo / "Procfile").read_text().splitlines() if line.startswith("web: "))
    entry = (repo / "deploy" / "image" / "entrypoint.sh").read_text().split("\nweb)\n", 1)[1].split(";;", 1)[0]
    unit = next(
        line
        for line in (repo / "deploy" / "systemd" / "fairway-web.service").read_text().splitlines()
        if line.startswith("ExecStart=")
    )
    return [procfile, entry, unit]


def test_every_web_command_takes_agent_frames_no_larger_than_the_protocol():
    """brk40 leftover: uvicorn took websocket messages up to its default 16 MiB, and only then did
    the app refuse one over the protocol's 256 KiB. Every way to start a web process sets
    ``--ws-max-size`` to ``MAX_MESSAGE_BYTES``, as ``manage.py serve`` does."""
    from scheduler.management.commands.serve import WS_MAX_SIZE_BYTES, server_config

    assert WS_MAX_SIZE_BYTES == MAX_MESSAGE_BYTES
    assert server_config("config.asgi:application", "127.0.0.1", 8000).ws_max_size == MAX_MESSAGE_BYTES
    for command in _web_commands():
        sizes = re.findall(r"--ws-max-size[ =](\d+)", command)
        assert sizes == [str(MAX_MESSAGE_BYTES)], command


def test_the_web_server_refuses_an_oversized_agent_frame_at_the_websocket_layer():
    """Given ``manage.py serve``'s uvicorn settings (a recording app in place of Fairway's), when a
    client sends a frame of exactly ``MAX_MESSAGE_BYTES`` and then one a byte larger, then the first
    reaches the app and the second never does: the server closes the connection with 1009
    (message too big) instead of buffering it for the app to refuse."""
    from scheduler.management.commands.serve import server_config

    received: list[int] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "websocket"
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            received.append(len(message.get("text") or message.get("bytes") or b""))

    async def scenario() -> int | None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        config = server_config(app, "127.0.0.1", port, "warning")
        config.http, config.loop = "h11", "asyncio"  # the websocket layer is the same; no uvloop in the test loop
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve())
        try:
            while not server.started:  # noqa: ASYNC110 -- uvicorn's Server has a flag, no event
                await asyncio.sleep(0.01)
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws/agent/", max_size=None) as ws:
                await ws.send("x" * MAX_MESSAGE_BYTES)
                for _ in range(200):
                    if received:
                        break
                    await asyncio.sleep(0.01)
                await ws.send("y" * (MAX_MESSAGE_BYTES + 1))
                try:
                    await asyncio.wait_for(ws.recv(), 10)
                except websockets.ConnectionClosed as closed:
                    return closed.rcvd.code if closed.rcvd else None
            return None
        finally:
            server.should_exit = True
            await asyncio.wait_for(serving, 10)

    code = asyncio.run(scenario())
    assert code == 1009, code
    assert received == [MAX_MESSAGE_BYTES]


def test_readyz_gives_its_details_only_to_the_scrape_token_when_one_is_set(cluster, client, monkeypatch, settings):
    """brk41: /readyz answered anyone each check's detail: a failing database's or Redis's
    exception text (their host, port and user: ``connection to server at "db.internal" … for user
    "fairway"``) and the names of late clusters, which ``FAIRWAY_METRICS_TOKEN`` keeps from
    anonymous scrapes of /metrics. With the token set, a request without it gets each check's
    pass or fail alone; with it, the details as before; without a token set, as before."""
    from scheduler import health, prom

    prom.record_tick(cluster.pk, 0.01)

    def broken() -> tuple[bool, str]:
        raise ConnectionError('connection to server at "db.internal" (10.0.0.5), port 5432 failed: user "fairway"')

    monkeypatch.setitem(health.CHECKS, "database", broken)
    settings.FAIRWAY_METRICS_TOKEN = "s3cret-scrape"
    anonymous = client.get("/readyz")
    assert anonymous.status_code == 503
    assert anonymous.json()["checks"]["database"] == {"ok": False}
    assert "db.internal" not in anonymous.content.decode() and "detail" not in anonymous.content.decode()
    bearer = client.get("/readyz", HTTP_AUTHORIZATION="Bearer s3cret-scrape")
    assert bearer.status_code == 503 and "db.internal" in bearer.json()["checks"]["database"]["detail"]
    settings.FAIRWAY_METRICS_TOKEN = ""
    assert "db.internal" in client.get("/readyz").json()["checks"]["database"]["detail"]
