"""Break session 46b: a simulator budget file's names follow the one rule of a budget's name
(budgets.rules.budget_name_problem): the file took a name holding NUL, a zero-width space (two
budgets that print alike, ``x`` and ``x\u200b``) or 150 characters, which no budget of the
service can have, and the report showed them."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.sim.budgets import BudgetFileError, load_plan


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("x\\0", "invisible or control character \\(U\\+0000\\)"),
        ("x\\u200b", "invisible or control character \\(U\\+200B\\)"),
        ("x" * 101, "1-100 characters"),
        ("a/b", "without '/'"),
        ("", "1-100 characters"),
    ],
)
def test_a_budget_name_no_budget_can_have_is_refused_naming_its_line(tmp_path: Path, name: str, said: str) -> None:
    # Given a budget file with a leaf whose name breaks the rule of a budget's name
    path = tmp_path / "budgets.yaml"
    path.write_text(f'org:\n  children:\n    "{name}": {{vcs: [a]}}\n    ok: {{vcs: [b]}}\n')
    # When the simulator reads it, Then it is refused naming the file, the line and the rule
    with pytest.raises(BudgetFileError, match=rf"budgets.yaml, line 3: .*{said}"):
        load_plan(str(path), {"a": 2, "b": 3})


def test_a_name_of_the_rule_is_taken(tmp_path: Path) -> None:
    path = tmp_path / "budgets.yaml"
    path.write_text('org:\n  children:\n    "Vision team (2026)": {vcs: [a]}\n    "x" : {vcs: [b]}\n')
    plan = load_plan(str(path), {"a": 2, "b": 3})
    assert plan.leaf_of_vc == {"a": "org/Vision team (2026)", "b": "org/x"}
