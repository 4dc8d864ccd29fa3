"""tryout48: README's ``manage.py simulate --policy all --days …`` over a stretch with no saturated
budget-week and no job of more than 8 GPUs printed ``attainment min/mean None/None  p90 wait >8
None h`` on every policy's line: Python's None where report.md, of the same run, writes "–"."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from django.core.management import call_command

from tests.sim.test_simulate import make_trace


def test_the_summary_line_says_a_missing_figure_as_the_report_does(tmp_path: Path) -> None:
    trace = make_trace(tmp_path / "t.csv", [(0, "aa", 1, 600), (60, "bb", 2, 300)])
    out = StringIO()

    call_command("simulate", "--trace", trace, "--hosts", "1", "--policy", "fairway", "--no-progress", stdout=out)

    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("fairway "))
    assert "None" not in line
    assert "attainment min/mean –/–  p90 wait >8 –  preemptions 0" in line
