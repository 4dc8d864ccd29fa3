"""brk51: a trace CSV (``simulate --trace``, ``import_history philly --trace``) and a sacct export
(``import_history sacct``) were read without bound: ``/dev/zero``, one endless line, or a large
file named by mistake read until memory ran out. A trace's line is held to ``MAX_LINE_CHARS`` and
a sacct export to ``MAX_SACCT_CHARS``, each refused past it naming the file, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler import trace
from scheduler.management.commands import import_history
from scheduler.trace import TraceError, read_trace


def test_a_trace_line_past_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "MAX_LINE_CHARS", 100)
    path = tmp_path / "trace.csv"
    path.write_text("job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n1,0,a" + "a" * 200 + ",1,60,\n")
    with pytest.raises(TraceError, match=r"line 2: .*longer than 100 characters"):
        read_trace(path)
    with pytest.raises(TraceError, match=r"line 1: .*longer than 100 characters"):
        read_trace("/dev/zero")


def test_a_trace_of_short_lines_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "MAX_LINE_CHARS", 100)
    path = tmp_path / "trace.csv"
    path.write_text("job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n1,0,a,1,60,\n2,5,b,2,60,30\n")
    assert [j.job_id for j in read_trace(path)] == [1, 2]


def test_a_sacct_export_past_the_bound_is_refused(cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(import_history, "MAX_SACCT_CHARS", 100)
    path = tmp_path / "sacct.txt"
    path.write_text("JobID|User|Account|AllocTRES|Start|End|State\n" + "1|u|a|gres/gpu=1|Unknown|Unknown|PENDING\n" * 5)
    with pytest.raises(CommandError, match=r"longer than 100 characters.*nothing written"):
        call_command("import_history", "sacct", str(path), "--cluster", "default")
    with pytest.raises(CommandError, match=r"longer than 100 characters.*nothing written"):
        call_command("import_history", "sacct", "/dev/zero", "--cluster", "default")
