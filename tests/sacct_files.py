"""A Slurm ``sacct -P`` export written and imported in tests (``import_history sacct``), as the
README's command makes it: the import48b/48c and brk48b tests share it."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

from django.core.management import call_command

HEADER = "JobID|User|Account|AllocTRES|Start|End|State\n"


def stamp(dt: datetime) -> str:
    """``dt`` as sacct writes a Start or End with ``TZ=UTC``."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def import_sacct(tmp_path: Path, *rows: str) -> str:
    """``rows`` under the header, imported into the cluster ``default``; the command's output."""
    f = tmp_path / "sacct.txt"
    f.write_text(HEADER + "".join(f"{r}\n" for r in rows), encoding="utf-8")
    out = StringIO()
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=out)
    return out.getvalue()
