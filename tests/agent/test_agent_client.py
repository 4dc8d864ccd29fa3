"""The agent against a small real websocket server: hello, heartbeats, start/stop/logs, bad
messages, faults, disconnections and restarts."""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import replace
from pathlib import Path

from agent_testkit import HOST, FakeServer, make_agent, run_async, running, standin, start_msg

from agent import AGENT_VERSION
from agent.client import backoff_delays
from agent.gpu.fake import fake_gpu_uuid
from agent.protocol import AttemptEvent, Error, Heartbeat, Hello, Log, Logs, Message, Stop, encode


def is_heartbeat(msg: Message) -> bool:
    return isinstance(msg, Heartbeat)


def test_hello_carries_the_token_and_gpus_then_heartbeats_flow(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer(heartbeat_s=0.2) as server, running(make_agent(server.url, state_dir, heartbeat=30)):
            hello = await server.expect(lambda m: isinstance(m, Hello))
            assert isinstance(hello, Hello)
            assert (hello.id, hello.host, hello.agent_version, hello.attempts) == (1, HOST, AGENT_VERSION, [])
            assert [(g.index, g.uuid, g.model, g.memory_mb) for g in hello.gpus] == [
                (i, fake_gpu_uuid(HOST, i), "H100", 81559) for i in range(8)
            ]
            assert server.headers[0]["Authorization"] == "Bearer host-token"

            # the welcome's period (0.2 s) overrides the configured 30 s
            first = await server.expect(is_heartbeat, within=3)
            second = await server.expect(is_heartbeat, within=3)

            assert isinstance(first, Heartbeat) and isinstance(second, Heartbeat)
            assert [s.index for s in first.gpus] == list(range(8))
            assert {s.health for s in first.gpus} == {"healthy"}
            assert first.running == []
            assert hello.id < first.id < second.id

    run_async(scenario())


def test_start_runs_the_standin_to_an_exit_zero_report(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))

                await server.send(start_msg(5, standin(1), gpus=[2, 3]))

                await server.expect_event(5, "started")
                beat = await server.expect(is_heartbeat)
                assert isinstance(beat, Heartbeat) and beat.running == [5]
                exited = await server.expect_event(5, "exited", within=10)
                assert (exited.exit_code, exited.age_s) == (0, None)
                await asyncio.sleep(0.2)  # the server's ack
                record = agent.runtime.get(5)
                assert record is not None and record.reported
                log = agent.runtime.read_log(5, 4096)[0].decode()
                assert "CUDA_VISIBLE_DEVICES=2,3" in log

    run_async(scenario())


def test_stop_ends_a_long_attempt_with_its_exit_code(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            await server.send(start_msg(6, standin(60), gpus=[0]))
            await server.expect_event(6, "started")

            await server.send(Stop(attempt_id=6, reason="preempted", grace_s=5))

            exited = await server.expect_event(6, "exited", within=5)
            assert exited.exit_code == 143

            await server.send(Stop(attempt_id=6, reason="preempted", grace_s=5))  # again: nothing to do
            again = await server.expect_event(6, "exited")
            assert again.exit_code == 143 and again.age_s is not None

    run_async(scenario())


def test_malformed_server_messages_get_errors_and_the_connection_survives(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            bad_start = json.loads(encode(start_msg(7, standin(1), gpus=[0])))
            bad_start["grace_s"] = "soon"

            await server.send_raw("{not json")
            await server.send_raw(json.dumps(bad_start))
            await server.send_raw(encode(Hello(host="h9", agent_version="x", gpus=[], attempts=[], id=40)))
            await server.send(Logs(attempt_id=999, tail_bytes=100))

            errors = [await server.expect(lambda m: isinstance(m, Error)) for _ in range(4)]
            assert [(e.code, e.ref) for e in errors if isinstance(e, Error)] == [
                ("bad_json", None),
                ("invalid", bad_start["id"]),
                ("unexpected_type", 40),
                ("unknown_attempt", server._seq),
            ]
            assert isinstance(errors[1], Error) and "start.grace_s" in errors[1].message

            await server.send(start_msg(7, standin(0.2), gpus=[0]))
            await server.expect_event(7, "started")
            await server.expect_event(7, "exited")
            assert len(server.headers) == 1  # still the first connection

    run_async(scenario())


def test_start_on_gpus_of_another_host_fails_to_start(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            wrong_uuid = replace(start_msg(8, standin(1), gpus=[1]), gpu_uuids=[fake_gpu_uuid("h2", 1)])

            await server.send(wrong_uuid)
            await server.send(start_msg(9, standin(1), gpus=[8]))
            await server.send(start_msg(10, ["no-such-trainer"], gpus=[1]))

            for attempt_id in (8, 9, 10):
                failed = await server.expect_event(attempt_id, "failed_to_start")
                assert failed.message
            assert "no-such-trainer" in failed.message

    run_async(scenario())


def test_repeated_and_unknown_commands_are_idempotent(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            await server.send(start_msg(11, standin(0.5), gpus=[0]))
            await server.expect_event(11, "started")

            await server.send(start_msg(11, standin(0.5), gpus=[0]))
            again = await server.expect_event(11, "running")
            assert again.age_s is not None and again.age_s < 5  # dated: the server may never have had the start
            await server.send(Stop(attempt_id=12, reason="canceled", grace_s=5))
            stopped = await server.expect_event(12, "stopped")
            assert stopped.exit_code is None
            first_exit = await server.expect_event(11, "exited")
            await server.send(start_msg(11, standin(0.5), gpus=[0]))  # a stale start after the exit
            replay = await server.expect_event(11, "exited")

            assert first_exit.exit_code == replay.exit_code == 0
            assert replay.age_s is not None

    run_async(scenario())


def test_logs_returns_the_tail_of_the_attempt_log(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            await server.send(start_msg(13, standin(1.1), gpus=[4]))
            await server.expect_event(13, "started")
            await server.expect_event(13, "exited")

            await server.send(Logs(attempt_id=13, tail_bytes=1 << 20))
            whole = await server.expect(lambda m: isinstance(m, Log))
            await server.send(Logs(attempt_id=13, tail_bytes=20))
            tail = await server.expect(lambda m: isinstance(m, Log))

            assert isinstance(whole, Log) and isinstance(tail, Log)
            assert (whole.offset, whole.eof) == (0, True)
            assert "step 1 loss" in whole.data and whole.data.endswith("standin: done\n")
            assert tail.data == whole.data[-20:] and tail.offset == len(whole.data.encode()) - 20

    run_async(scenario())


def test_fault_injection_makes_gpu_3_unhealthy_in_the_next_heartbeat(state_dir: Path) -> None:
    from agent.__main__ import main

    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(is_heartbeat)

            assert main(["inject-fault", "--state-dir", str(state_dir), "--gpu", "3", "--xid", "79"]) == 0
            beat = await server.expect(is_heartbeat)

            assert isinstance(beat, Heartbeat)
            assert (beat.gpus[3].health, beat.gpus[3].xids) == ("unhealthy", [79])
            assert {g.health for g in beat.gpus if g.index != 3} == {"healthy"}

    run_async(scenario())


def test_exit_while_disconnected_is_reported_in_the_next_hello_with_its_age(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            await server.send(start_msg(14, standin(0.3), gpus=[0]))
            await server.expect_event(14, "started")
            await asyncio.sleep(0.2)  # the server's ack of the start

            server.refuse = True
            await server.drop()
            await asyncio.sleep(1.5)  # the attempt exits meanwhile; reconnects are refused
            server.refuse = False

            hello = await server.expect(lambda m: isinstance(m, Hello), within=5)
            assert isinstance(hello, Hello)
            (status,) = hello.attempts
            assert (status.attempt_id, status.state, status.exit_code) == (14, "exited", 0)
            assert status.age_s is not None and 0.3 < status.age_s < 5

    run_async(scenario())


def test_a_start_report_lost_with_the_connection_is_repeated_in_the_next_hello_with_its_age(state_dir: Path) -> None:
    # Given a started report that the server never gets (the connection dies with it)
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                server.lose_started = True
                await server.send(start_msg(16, standin(30), gpus=[1]))

                # When the agent reconnects
                hello = await server.expect(lambda m: isinstance(m, Hello), within=5)

                # Then its hello lists the attempt running with the seconds since its start
                assert isinstance(hello, Hello)
                (status,) = hello.attempts
                assert (status.attempt_id, status.state, status.exit_code) == (16, "running", None)
                assert status.age_s is not None and 0 < status.age_s < 5
                # and the welcome acknowledges that start: the next hello still dates it, but an
                # exit would now be listed as such
                await asyncio.sleep(0.3)
                record = agent.runtime.get(16)
                assert record is not None and record.start_reported

    run_async(scenario())


def test_an_exit_whose_start_was_never_acknowledged_follows_a_hello_that_dates_the_start(state_dir: Path) -> None:
    # Given a started report lost with its connection, and the attempt exiting while the server is away
    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                server.lose_started = True
                server.refuse = True
                await server.send(start_msg(17, standin(0.3), gpus=[2]))
                await asyncio.sleep(2.0)  # the attempt runs and exits; reconnects are refused
                record = agent.runtime.get(17)
                assert record is not None and record.state == "exited" and not record.start_reported

                # When the server takes the agent back
                server.refuse = False
                hello = await server.expect(lambda m: isinstance(m, Hello), within=5)

                # Then the hello lists it running with the age of its start (one entry cannot carry
                # two ages), and its exit follows at once with the age of the exit
                assert isinstance(hello, Hello)
                (status,) = hello.attempts
                assert (status.attempt_id, status.state) == (17, "running")
                assert status.age_s is not None and 1.5 < status.age_s < 5
                exited = await server.expect(lambda m: not isinstance(m, Heartbeat))
                assert isinstance(exited, AttemptEvent) and (exited.attempt_id, exited.state) == (17, "exited")
                assert exited.exit_code == 0 and exited.age_s is not None
                assert 0.25 < status.age_s - exited.age_s < 1.5  # the run, about the stand-in's 0.3 s
                await asyncio.sleep(0.3)  # the welcome and the ack
                assert record.start_reported and record.reported

    run_async(scenario())


def test_agent_shutdown_leaves_attempts_running_and_a_new_agent_readopts_them(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            first = make_agent(server.url, state_dir)
            async with running(first):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(start_msg(15, standin(60), gpus=[5]))
                await server.expect_event(15, "started")
            record = first.runtime.get(15)
            assert record is not None and record.pid is not None
            os.kill(record.pid, 0)  # survived the agent

            async with running(make_agent(server.url, state_dir)):
                hello = await server.expect(lambda m: isinstance(m, Hello))
                assert isinstance(hello, Hello) and [(a.attempt_id, a.state) for a in hello.attempts] == [
                    (15, "running")
                ]
                assert hello.attempts[0].age_s is not None  # the age of its start (the server may not have it)
                beat = await server.expect(is_heartbeat)
                assert isinstance(beat, Heartbeat) and beat.running == [15]

                await server.send(Stop(attempt_id=15, reason="canceled", grace_s=5))
                exited = await server.expect_event(15, "exited")
                assert exited.exit_code == 143

    run_async(scenario())


def test_agent_keeps_reconnecting_until_the_server_is_back(state_dir: Path) -> None:
    async def scenario() -> None:
        async with FakeServer() as server:
            server.refuse = True
            async with running(make_agent(server.url, state_dir)) as task:
                await asyncio.sleep(1.0)
                assert not task.done()
                server.refuse = False
                hello = await server.expect(lambda m: isinstance(m, Hello), within=5)
                assert isinstance(hello, Hello)

    run_async(scenario())


def test_reconnect_delays_grow_with_jitter_up_to_the_cap() -> None:
    delays = backoff_delays(initial_s=1.0, cap_s=8.0)

    first = [next(delays) for _ in range(8)]

    for delay, ceiling in zip(first, [1, 2, 4, 8, 8, 8, 8, 8], strict=True):
        assert ceiling / 2 <= delay <= ceiling


def test_a_server_that_stops_answering_pings_is_left_and_the_agent_reconnects(state_dir: Path, monkeypatch) -> None:
    """Given the agent's keepalive (the side that pings: docs/deploy.md §11; 20 s / 20 s, scaled
    here to 0.2 s / 0.2 s), when the server stops reading the connection (a dead server or link:
    no pong comes back), then the agent closes it and connects again: a second hello."""
    import agent.client

    monkeypatch.setattr(agent.client, "PING_INTERVAL_S", 0.2)
    monkeypatch.setattr(agent.client, "PING_TIMEOUT_S", 0.2)
    monkeypatch.setattr(agent.client, "CLOSE_TIMEOUT_S", 0.5)  # slow50: scaled too (5 s: its whole wait)

    async def scenario() -> None:
        async with FakeServer(heartbeat_s=30) as server, running(make_agent(server.url, state_dir, heartbeat=30)):
            await server.expect(lambda m: isinstance(m, Hello))
            assert server.ws is not None
            dead = server.ws
            dead.transport.pause_reading()  # nothing read from now on: the agent's pings unanswered
            loop = asyncio.get_running_loop()
            began = loop.time()
            hello = await server.expect(lambda m: isinstance(m, Hello), within=10)
            assert isinstance(hello, Hello) and server.ws is not dead
            assert loop.time() - began < 8  # the ping's 0.2 + 0.2 s, the close's 0.5 s bound, a reconnect
            dead.transport.abort()  # the server's side of the dead link, not waited for at its close

    run_async(scenario())


def test_a_live_server_keeps_the_agents_connection_across_many_pings(state_dir: Path, monkeypatch) -> None:
    """Given the same scaled keepalive, when the server answers (a live one), then the agent keeps
    its one connection over ten ping intervals."""
    import agent.client

    monkeypatch.setattr(agent.client, "PING_INTERVAL_S", 0.1)
    monkeypatch.setattr(agent.client, "PING_TIMEOUT_S", 0.1)

    async def scenario() -> None:
        async with FakeServer(heartbeat_s=30) as server, running(make_agent(server.url, state_dir, heartbeat=30)):
            await server.expect(lambda m: isinstance(m, Hello))
            first = server.ws
            await asyncio.sleep(1.0)
            assert server.ws is first and len(server.headers) == 1

    run_async(scenario())


def test_a_refused_host_token_says_where_the_new_one_goes(state_dir: Path, caplog) -> None:
    """try43: after "Rotate the host token" the agent logged "the server refused the host token:
    unknown host token (mistyped, or rotated or revoked since)" at every retry, and nothing about
    the way out, which the admin's message alone gave (put it in the config's ``token:``, restart)."""
    from agent.client import CLOSE_UNAUTHORIZED

    async def scenario() -> None:
        async with FakeServer() as server, running(make_agent(server.url, state_dir)):
            await server.expect(lambda m: isinstance(m, Hello))
            assert server.ws is not None
            await server.ws.close(CLOSE_UNAUTHORIZED, "unknown host token (mistyped, or rotated or revoked since)")
            for _ in range(100):
                if any("refused the host token" in r.getMessage() for r in caplog.records):
                    return
                await asyncio.sleep(0.05)

    with caplog.at_level("INFO", logger="agent.client"):
        run_async(scenario())
    (line,) = [r.getMessage() for r in caplog.records if "refused the host token" in r.getMessage()]
    assert "rotated or revoked since" in line, line
    assert "new host token" in line and "token:" in line and "restart the agent" in line, line
