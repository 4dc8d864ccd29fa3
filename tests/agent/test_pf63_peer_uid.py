"""pf63: the forwarded connection's peer-uid check (``agent.runtime.base.PEER_UID_CHECK``, brk62)
read the accepted end's row of ``/proc/net/tcp``: a server that accepts, writes and closes at once
leaves that end orphaned or in time-wait, whose row reads uid 0 (inode 0), so the owner's own
server was refused as "another user's (uid 0)". The check reads the listening socket's owner."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from agent.runtime.base import PEER_UID_CHECK

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="taking another uid needs root")

_SCENARIO = textwrap.dedent(
    """
    import os, socket, sys, threading, time
    SERVER_UID, CHECK_UID = int(sys.argv[1]), int(sys.argv[2])
    PEER_UID_CHECK
    os.setresgid(SERVER_UID, SERVER_UID, SERVER_UID)
    os.setresuid(SERVER_UID, SERVER_UID, 0)  # the saved uid (root's) lets the checker take its own
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    def serve():
        c, _ = server.accept()
        c.sendall(b"bye")
        c.close()  # at once: its end orphaned, then in time-wait
    threading.Thread(target=serve, daemon=True).start()
    os.setresuid(0, 0, 0)
    os.setresuid(CHECK_UID, CHECK_UID, CHECK_UID)
    conn = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.connect(("127.0.0.1", port))
    assert conn.recv(10) == b"bye"
    assert conn.recv(10) == b""
    time.sleep(0.3)  # our end has acknowledged the server's FIN: its end left the table's live rows
    print(repr(peer_uid_problem(conn, socket.AF_INET, "127.0.0.1", port)))
    """
).replace("PEER_UID_CHECK\n", PEER_UID_CHECK)


def _problem(server_uid: int, check_uid: int) -> str:
    done = subprocess.run(  # noqa: S603 -- this interpreter, the scenario above
        [sys.executable, "-I", "-c", _SCENARIO, str(server_uid), str(check_uid)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return str(eval(done.stdout.strip()))  # noqa: S307 -- repr of a str printed by the scenario


@needs_root
def test_a_server_that_accepts_writes_and_closes_at_once_is_the_owners() -> None:
    """Given the owner's server (uid 62050) that answers and closes at once, when the owner's
    connection to it is checked once the server's end has closed, then it is the owner's."""
    assert _problem(62050, 62050) == ""


@needs_root
def test_another_uids_server_that_closes_at_once_is_still_refused() -> None:
    """Given another uid's server (62051) that answers and closes at once, then it is refused,
    naming its uid (not uid 0, not "its owner unknown")."""
    assert _problem(62051, 62050) == "the server on it is another user's (uid 62051), not this workload's"
