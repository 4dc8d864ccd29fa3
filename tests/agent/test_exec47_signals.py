"""A ``fairway exec`` command started with the signal dispositions of the Python wrapper that
execs it: Python ignores ``SIGPIPE`` (and an agent started under ``nohup`` ignores ``SIGHUP``), and an
ignored signal stays ignored across ``exec``, so ``sh -c 'yes | head -1'`` in an exec printed
"Broken pipe" errors instead of ending quietly, and a hung-up session's command could not take the
hangup. The attempt's own command (``subprocess.Popen``, which restores them) ignored none. The
command of an exec ignores no signal, as the attempt's does."""

from __future__ import annotations

import signal
from pathlib import Path

from agent_testkit import FakeServer, make_agent, run_async, running, start_msg

from agent.protocol import AttemptEvent, ExecBytes, ExecData, ExecResult, Hello


def test_an_exec_command_ignores_no_signal(state_dir: Path) -> None:
    import base64

    async def scenario() -> None:
        async with FakeServer() as server:
            agent = make_agent(server.url, state_dir)
            async with running(agent):
                await server.expect(lambda m: isinstance(m, Hello))
                await server.send(start_msg(7, ["sh", "-c", "echo up; exec sleep 60"], gpus=[0]))
                await server.expect(lambda m: isinstance(m, AttemptEvent) and m.state == "started")
                for command in (["grep", "SigIgn", "/proc/self/status"], ["sh", "-c", "yes | head -n 1"]):
                    await server.send(ExecBytes(attempt_id=7, command=command, timeout_s=30, max_output=1 << 16))
                    out: dict[str, bytes] = {"stdout": b"", "stderr": b""}
                    while True:
                        msg = await server.expect(lambda m: isinstance(m, (ExecData, ExecResult)), within=15)
                        if isinstance(msg, ExecResult):
                            break
                        out[msg.stream] += base64.b64decode(msg.data)
                    assert msg.exit_code == 0, (msg, out)
                    if command[0] == "sh":
                        assert out == {"stdout": b"y\n", "stderr": b""}, out  # yes ended by SIGPIPE, quietly
                    else:  # the mask of ignored signals of the command itself (grep, exec'd as it is):
                        # none of 1-31; 32 and up are the C library's own, which Python cannot set
                        # (a test run's environment may have left one ignored: 0x80000000)
                        head, mask = out["stdout"].split()
                        assert head == b"SigIgn:" and int(mask, 16) & 0x7FFFFFFF == 0, out

    # the agent's own dispositions, as under nohup: the command must not inherit them
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        run_async(scenario(), timeout=50)
    finally:
        signal.signal(signal.SIGHUP, previous)
