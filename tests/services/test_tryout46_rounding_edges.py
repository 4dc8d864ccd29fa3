"""tryout46: ``fairway ls``' CHARGED column read "10.0 GPU-min" for 9.96 GPU-minutes and "12 GPU-min"
beside it: a figure just under a step (10 GPU-min, 100 GPU-h, 10 and 100 GPU-hours) rounded up to
it in the format of the step below. A figure is formatted by the step it reads as once rounded."""

from __future__ import annotations

import pytest

from fairway_cli.numbers import gpu_hours_text, gpu_time_text


@pytest.mark.parametrize(
    ("gpu_seconds", "text"),
    [
        (597.6, "10 GPU-min"),  # 9.96 GPU-min: was "10.0 GPU-min"
        (599.9, "10 GPU-min"),
        (594.0, "9.9 GPU-min"),
        (720.0, "12 GPU-min"),
        (359_990.0, "100 GPU-h"),  # 99.997 GPU-h: was "100.00 GPU-h"
        (359_000.0, "99.72 GPU-h"),
    ],
)
def test_gpu_time_just_under_a_step_reads_in_the_steps_format(gpu_seconds, text):
    assert gpu_time_text(gpu_seconds) == text


@pytest.mark.parametrize(
    ("hours", "text"),
    [
        (99.97, "100"),  # was "100.0"
        (99.94, "99.9"),
        (9.9996, "10.0"),  # was "10"
        (9.99, "9.99"),
        (12.5, "12.5"),
        (1234.4, "1,234"),
    ],
)
def test_gpu_hours_just_under_a_step_read_in_the_steps_format(hours, text):
    assert gpu_hours_text(hours) == text
