"""left47: the trace rules' ``fraction:`` took any script's digits (``float("٠.٥")`` is 0.5) and
``0_5``, which every other number reader refuses (settings, the CLI, the agent's config: brk35,
brk47). One rule: ``fairway_common.numbers.ascii_float``."""

from __future__ import annotations

import pytest

from fairway_common.numbers import ascii_float
from scheduler.trace import MinRuntimeRule, UnallocatedRule


@pytest.mark.parametrize("value", ["٠.٥", "۰.۵", "०.५", "0_5", "0.5_0", "１"])
def test_the_min_runtime_fraction_is_ascii_only(value):
    with pytest.raises(ValueError, match="is not a number"):
        MinRuntimeRule.parse(f"fraction:{value}")


@pytest.mark.parametrize("value", ["٠.١", "0_1", "１"])
def test_the_unallocated_fraction_is_ascii_only(value):
    with pytest.raises(ValueError, match="is not a number"):
        UnallocatedRule.parse(f"vc:unknown,fraction:{value}")


def test_ascii_fractions_still_read():
    assert MinRuntimeRule.parse("fraction:0.5,cap:2h").fraction == 0.5
    assert MinRuntimeRule.parse("fraction: 1e-1 ").fraction == pytest.approx(0.1)
    assert UnallocatedRule.parse("fraction:0.25").fraction == 0.25


@pytest.mark.parametrize("value", ["٥", "1_0", "１", "x", ""])
def test_the_one_reader_refuses_what_float_took(value):
    with pytest.raises(ValueError):
        ascii_float(value)
    assert ascii_float(" 2.5 ") == 2.5
