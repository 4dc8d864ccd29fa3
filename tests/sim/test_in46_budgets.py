"""agentin46: a simulator budget file's shares by the scenario files' whole-number rule and bound."""

from __future__ import annotations

import pytest

from scheduler.scenarios import spec
from scheduler.sim.budgets import BudgetFileError, parse_plan

VCS = {"aa": 1}


def _plan(shares: str) -> int:
    plan = parse_plan(f"org:\n  children:\n    vc-aa:\n      shares: {shares}\n", VCS)
    return next(b.shares for b in plan.budgets if b.key == "org/vc-aa")


@pytest.mark.parametrize("shares", ["'١'", "99999999999999999999999", str(2**31), "'5'", "0x10", "010", "2.0", "0"])
def test_shares_that_are_not_a_whole_number_in_range_are_refused(shares: str) -> None:
    with pytest.raises(BudgetFileError, match=r"line 4: budget 'org/vc-aa': shares"):
        _plan(shares)


def test_unicode_digits_are_not_a_number() -> None:
    with pytest.raises(BudgetFileError, match="not an integer"):
        _plan("١")


def test_shares_read_as_a_scenario_files_shares() -> None:
    assert _plan(str(2**31 - 1)) == 2**31 - 1
    assert _plan("3") == 3
    assert _plan("1_000") == 1000  # YAML's decimal with separators, as a scenario file reads it (strict_yaml)


def test_the_scenario_spec_has_no_copy_of_the_budget_name_rule() -> None:
    assert not hasattr(spec, "MAX_BUDGET_NAME")
    with pytest.raises(spec.ScenarioError, match="A budget name"):
        spec._budget_path("org/" + "x" * 101, "f", "k")


@pytest.mark.parametrize("shares", ["١", "'7'", "99999999999999999999999"])
def test_a_what_if_shares_file_reads_shares_by_the_same_rule(shares: str) -> None:
    from scheduler.sim.whatif import parse_shares

    budgets = list(parse_plan("org:\n  children:\n    vc-aa: {}\n", VCS).budgets)
    with pytest.raises(BudgetFileError, match=r"line 2: budget 'vc-aa': shares"):
        parse_shares(f"shares:\n  vc-aa: {shares}\n", budgets)
    assert [b.shares for b in parse_shares("shares:\n  vc-aa: 1_000\n", budgets) if b.name == "vc-aa"] == [1000]
