"""Without matplotlib (a server: plotting is the `sim` extra) the simulator's report has no plots."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from scheduler.sim import report as sim_report

ROOT = Path(__file__).resolve().parents[2]


def test_report_without_matplotlib_writes_no_plots(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(sim_report, "plotting_available", lambda: False)

    def no_plots(*_args, **_kwargs):
        raise AssertionError("write_plots called without matplotlib")

    monkeypatch.setattr(sim_report, "write_plots", no_plots)
    monkeypatch.setattr(sim_report, "markdown", lambda report, pngs: f"plots: {pngs}\n")
    with caplog.at_level(logging.WARNING):
        written = sim_report.write_report({"policies": []}, tmp_path / "out")
    assert [p.name for p in written] == ["report.json", "report.md"]
    assert (tmp_path / "out" / "report.md").read_text() == "plots: []\n"
    assert "matplotlib is not installed" in caplog.text


def test_the_server_does_not_import_matplotlib():
    code = (
        "import sys, django; django.setup(); import config.urls, config.asgi, scheduler.sim.report, scheduler.tasks;"
        " print('matplotlib' in sys.modules)"
    )
    done = subprocess.run(  # noqa: S603 -- this interpreter, fixed code
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False"
