"""A database file readable only by its owner (stdlib only: scripts/demo.py imports it too).

Workloads may run on the machine that holds the SQLite database (a one-machine install, the
demo): a file created 0644 in a 0755 directory let any workload read every session key (an
admin's web login) and every workload's secret env values. SQLite gives its journal and WAL
files the database file's mode, so the database file alone is made 0600.
"""

from __future__ import annotations

import os
from pathlib import Path


def owner_only(path: str | os.PathLike[str]) -> None:
    """Create ``path`` empty with mode 0600 if it is missing (an empty file is an empty SQLite
    database), else take the group's and others' access away when this user owns it (a database
    created 0644 by an earlier version). Errors are left to SQLite to report when it opens it."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            st = p.stat()
            if st.st_uid == os.getuid() and st.st_mode & 0o077:
                p.chmod(st.st_mode & 0o700)
        except OSError:
            pass
        return
    except OSError:
        return
    os.close(fd)
