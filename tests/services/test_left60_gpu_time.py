"""left60: an idle workload's page said "charged 12.01 GPU-h" beside "12.0 GPU-hours held idle" and
"GPU-time held 12.0 GPU-hours": GPU-time of an attempt (charged, held, held idle) in two formats.
All three read as ``fairway_cli.numbers.gpu_time_text`` writes charged GPU-time (docs/standing.md)."""

from __future__ import annotations

from fairway_cli.numbers import gpu_time_text
from fairway_cli.words import efficiency_lines, idle_held_text


def test_gpu_time_held_idle_reads_as_charged_gpu_time():
    idle = {"since": "2026-12-07T01:00:00Z", "seconds": 21630, "gpus": 2, "gpu_hours": 12.017, "threshold_pct": 1}
    assert idle_held_text(idle).endswith(f": {gpu_time_text(2 * 21630)} held idle")
    assert idle_held_text(idle).endswith(": 12.02 GPU-h held idle")
    small = {**idle, "seconds": 1200, "gpus": 1, "gpu_hours": 0.333}
    assert idle_held_text(small).endswith(": 20 GPU-min held idle")


def test_gpu_time_held_reads_as_charged_gpu_time():
    lines = dict(efficiency_lines({"gpu_hours": 12.0, "gpus": 2, "running": True, "utilization": None}))
    assert lines["GPU-time held"] == "12.00 GPU-h (2 GPUs, so far)"
