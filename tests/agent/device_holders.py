"""Which processes hold a GPU's device node open, read from /proc as a test sees it: the pid63 and
iso48 isolation tests' check that a sweep left no holder (independent of ``agent.runtime.devices``)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path


def holders(rdev: int, uid: int) -> list[int]:
    """The processes of ``uid`` holding a descriptor of the character device ``rdev``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if int(Path(f"/proc/{entry}/status").read_text().split("\nUid:")[1].split()[0]) != uid:
                continue
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    st = os.stat(f"/proc/{entry}/fd/{fd}")
                    if stat.S_ISCHR(st.st_mode) and st.st_rdev == rdev:
                        found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found
