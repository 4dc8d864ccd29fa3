"""A database file readable only by its owner (stdlib only: scripts/demo.py imports it too).

Workloads may run on the machine that holds the SQLite database (a one-machine install, the
demo): a file created 0644 in a 0755 directory let any workload read every session key (an
admin's web login) and every workload's secret env values. SQLite gives its journal and WAL
files the database file's mode, so the database file alone is made 0600.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file (sqlite.org/fileformat.html, 1.3)."""


def sqlite_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be an SQLite database (a relative clause), None when it can: a missing file
    in an existing directory, an empty file, or one starting with :data:`SQLITE_HEADER`. brk51: a
    ``DATABASE_URL`` naming a directory or another file had :func:`owner_only` take its access away
    from others (``sqlite:////tmp`` made /tmp 0700 as root)."""
    p = Path(path)
    if p.is_dir():
        return "which is a directory"
    if p.exists():
        if not p.is_file():
            return "which is not a regular file"
        try:
            with p.open("rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError:
            return None  # left to SQLite to report
        return None if head in (b"", SQLITE_HEADER) else "which is not an SQLite database"
    if not p.parent.is_dir():
        return f"whose directory {str(p.parent)!r} does not exist"
    return None


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
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077:
                p.chmod(st.st_mode & 0o700)
        except OSError:
            pass
        return
    except OSError:
        return
    os.close(fd)
