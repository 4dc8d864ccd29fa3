"""left50: an exec past its timeout answered 504 ``exec_timeout`` on a loaded box, not 124: the
kill of its tree (:func:`agent.runtime.isolation.stop_then_kill_tree`) stops the wrapper first, so
the children it kills stay zombies (their reaper is stopped), and the SIGKILL loop took those for
living ones: 100 scans of /proc and 10 ms sleeps (3.5 s on a quiet 2-core box with 144 processes,
past 6 s under load: the server's wait is the timeout + 5 s)."""

from __future__ import annotations

import subprocess
import sys
import time

from agent.runtime.isolation import descendants, stop_then_kill_tree


def test_stop_then_kill_tree_does_not_wait_on_the_zombies_of_its_stopped_root() -> None:
    # Given a parent (a wrapper) whose shell runs a long child, as an exec's command does
    script = "import subprocess; subprocess.run(['sh', '-c', 'echo started; sleep 60'])"
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)  # noqa: S603 -- fixed
    assert parent.stdout is not None
    assert parent.stdout.readline() == b"started\n"
    deadline = time.monotonic() + 10
    while len(descendants(parent.pid)) < 2 and time.monotonic() < deadline:  # its sleep forked
        time.sleep(0.01)
    assert len(descendants(parent.pid)) == 2
    # When its tree is stopped, then killed
    began = time.monotonic()
    stop_then_kill_tree(parent.pid)
    took = time.monotonic() - began
    parent.wait(5)
    # Then it is gone at once: the killed children are zombies of a stopped parent, not a reason to
    # scan /proc again (it was 100 rounds of a scan and 10 ms: 3.5 s on a quiet box)
    assert parent.returncode == -9
    assert took < 0.5, f"the kill took {took:.2f} s"
