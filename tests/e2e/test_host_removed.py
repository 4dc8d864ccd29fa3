"""sec41: a removed host's agent stops instead of reconnecting for ever.

Before, removing a host closed its agent's websocket with 4401 ("host token removed") and
refused every reconnect the same way: the agent, restarted by systemd whatever happened, retried
every ``backoff_max`` (30 s) and logged an error each time, for ever. The server now closes with
4410 and the reason "host removed from Fairway by an admin"; the real agent (a subprocess,
through uvicorn's websocket) logs one line and exits with ``EXIT_HOST_REMOVED``, which the
install script's unit names in ``RestartPreventExitStatus=``.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent.client import EXIT_HOST_REMOVED, HOST_REMOVED_FILE, HOST_REMOVED_LOG
from agent.protocol import CLOSE_HOST_REMOVED
from scheduler.models import Host

pytestmark = [pytest.mark.timeout(60)]


def test_a_removed_hosts_agent_logs_one_line_and_exits_with_its_own_status(stack: Any) -> None:
    from scheduler.services import do_remove_host

    assert CLOSE_HOST_REMOVED == 4410 and EXIT_HOST_REMOVED not in (0, 1, 2)
    agent = stack.agent
    assert agent is not None and agent.poll() is None
    do_remove_host(None, Host.objects.get(pk=stack.host.pk), "decommissioned")

    # the open connection is closed with 4410 and the agent stops: no reconnect, no retry
    stack.wait_until(lambda: agent.poll() is not None, 20, "the removed host's agent to exit")
    assert agent.returncode == EXIT_HOST_REMOVED, stack.agent_output()
    out = stack.agent_output()
    assert out.count(HOST_REMOVED_LOG) == 1, out
    assert "--uninstall" in HOST_REMOVED_LOG and "--host-name" in HOST_REMOVED_LOG
    assert "reconnecting in" not in out and "refused the host token" not in out, out
    # try56: the agent leaves a note in its state directory, so `--uninstall` no longer says the
    # host "is still registered on the server" (tests/ops/test_install_scripts.py)
    note = (stack.state_dir / HOST_REMOVED_FILE).read_text()
    assert note.startswith("removed from Fairway by an admin; told at "), note

    # started again (by hand, or a unit without RestartPreventExitStatus), it is refused at
    # connect with the same code and exits at once with the same status
    started = time.monotonic()
    again = stack.start_agent()
    assert again.wait(20) == EXIT_HOST_REMOVED, stack.agent_output()
    assert time.monotonic() - started < 20
    assert stack.agent_output().count(HOST_REMOVED_LOG) == 2
