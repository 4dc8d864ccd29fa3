"""left36: faults of the CLI found by the tryout and review; each test names what it was."""

from __future__ import annotations

from scheduler.models import Workload
from tests.cli.inprocess import run_cli


def test_submit_without_budget_uses_the_one_budget_the_user_may_submit_to(researcher, hosts, monkeypatch):
    """``fairway submit`` without ``-b`` said "missing: budget" to a researcher who may submit to
    nlp/olmo alone; it submits there."""
    out = run_cli(monkeypatch, researcher, "submit", "-m", "A100", "-M", "1h", "--", "python", "train.py")
    workload = Workload.objects.get()
    assert workload.budget.path == "nlp/olmo"
    assert f"submitted #{workload.pk} python: 1 × A100 on default, budget nlp/olmo" in out


def test_submit_without_budget_lists_the_budgets_when_there_are_several(admin, org_tree, hosts, monkeypatch):
    """An admin may submit to every leaf: without ``-b`` the error names them, nothing is submitted."""
    err = run_cli(monkeypatch, admin, "submit", "-m", "A100", "-M", "1h", "--", "python", expect=2)
    assert "missing: budget (-b): you may submit to several, give one of: nlp/olmo, nlp/tulu, vision/sam" in err
    assert not Workload.objects.exists()
