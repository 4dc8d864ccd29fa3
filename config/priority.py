"""A process's ``nice`` held against the other sessions of the machine, not only its own.

With the kernel's autogroups on (``/proc/sys/kernel/sched_autogroup_enabled``: the default of
Debian, Ubuntu, Fedora), the scheduler first shares the CPU equally between *sessions* and only
then, inside one, by ``nice``. Every line of the Procfile runs in a session of its own (honcho,
``bench/api_load.py``, systemd all start each process with ``setsid``), so the estimates'
``nice -n 10`` weighed nothing against the web processes: the forward simulations took half a
core for seconds at a time, as much as the four web processes together, whenever they ran
(docs/benchmarks/api_load.md, eleventh pass: submit p99 1,586 ms with the bursts, ~100 ms
between them). A process started niced that leads its own session gives that nice to the
session's autogroup too (``/proc/self/autogroup``): then it yields to the web processes as the
Procfile, the image and the units say.

Only the nice the process added to its parent's counts (``nice -n 10`` of the estimates' line:
10), not the nice it inherited. A layout started niced as a whole (``nice honcho start``, the
benches under ``nice -n 19``, a supervisor at a nice of its own) keeps its processes' sessions
equal: when the inherited nice counted, the worker and the clock (``manage.py`` commands that
lead their sessions) set their autogroups to 19 while uvicorn's web processes (which do not read
the settings as session leaders) stayed at 0, and on a busy machine the worker never got the CPU
to boot: no tick ran, nothing started (bench/agents_load.py --layout under ``nice -n 19`` at a
load of 16: the worker 0 CPU seconds in 54 s, its log empty; docs/deploy.md §4).

No-op for a process no nicer than its parent (the web, the worker, the clock), for one that
shares its session with others (an interactive shell's command: the shell's autogroup is not its
alone), and where the kernel has no autogroups or the file cannot be written. Under systemd with
the CPU controller on, each unit's cgroup weight (``CPUWeight=``) plays this part instead.
"""

from __future__ import annotations

import os

AUTOGROUP = "/proc/self/autogroup"


def hold_nice_against_other_sessions(path: str = AUTOGROUP) -> bool:
    """Give the nice this process added to its parent's (``nice -n 10``: 10) to its session's
    autogroup when it is positive, the process leads its session, and the autogroup is less
    nice; returns whether it did."""
    try:
        if os.getsid(0) != os.getpid():
            return False
        parent = os.getppid()  # 0: no parent in this PID namespace (a container's first process)
        added = os.nice(0) - (os.getpriority(os.PRIO_PROCESS, parent) if parent > 0 else 0)
        if added <= 0:
            return False
        with open(path) as f:
            current = int(f.read().split()[-1])  # "/autogroup-123 nice 0"
        if current >= added:
            return False
        with open(path, "w") as f:
            f.write(str(added))
    except (OSError, ValueError, IndexError):
        return False
    return True
