"""Where a management command's ``--out`` may write: checked before any work, creating nothing."""

from __future__ import annotations

import os
from pathlib import Path


def out_problem(path: str | os.PathLike[str], *, directory: bool) -> str | None:
    """Why ``--out path`` cannot be written (a directory to create or fill when ``directory``, else a
    file to create or replace), or None. Creates nothing: a refused command leaves no trace.

    ``simulate --out FILE`` ran the whole simulation, then ``mkdir`` raised (a traceback, the report
    lost); ``budget_statement --out DIR`` was an IsADirectoryError traceback (brk32)."""
    p = Path(path).absolute()
    if p.exists():
        if directory and not p.is_dir():
            return f"--out {str(path)!r} is a file, not a directory"
        if not directory and p.is_dir():
            return f"--out {str(path)!r} is a directory, not a file"
        writable = os.access(p, os.W_OK | (os.X_OK if directory else 0))
        return None if writable else f"--out {str(path)!r} is not writable"
    parent = p.parent
    while not parent.exists():
        if not directory:  # a file's directory must exist (it is not created)
            return f"--out {str(path)!r}: no directory {str(parent)!r}"
        parent = parent.parent
    if not parent.is_dir():
        return f"--out {str(path)!r}: {str(parent)!r} is a file, not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"--out {str(path)!r}: {str(parent)!r} is not writable"
    return None
