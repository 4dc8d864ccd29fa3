"""``fairway share`` leaves the root's RawShares blank, as Slurm's ``sshare`` does (tryout28: it
printed "parent")."""

from __future__ import annotations

from tests.cli.inprocess import run_cli


def test_the_roots_raw_shares_are_blank_and_the_others_are_numbers(researcher, org_tree, cluster, monkeypatch):
    out = run_cli(monkeypatch, researcher, "share").splitlines()
    header = out[1]
    start = header.index("RawShares")  # right-aligned under its header (the shares are shorter)
    end = start + len("RawShares")
    rows = {ln[:start].split()[0]: ln[start:end].strip() for ln in out[2:] if ln.strip()}
    root = next(name for name in rows if name == org_tree["nlp"].parent.name)
    assert rows[root] == ""
    assert "parent" not in "\n".join(out)
    assert rows["nlp"] == str(org_tree["nlp"].shares)


def test_a_budget_on_hold_reads_so_in_share_as_in_budgets(researcher, org_tree, cluster, monkeypatch):
    """try38: ``fairway budgets`` and the budgets page marked ``nlp (hold)``; ``fairway share``,
    which marks ``(archived)``, showed nothing: a held program looked like any other."""
    from budgets.services import do_set_hold

    do_set_hold(org_tree["nlp"], True)
    share = run_cli(monkeypatch, researcher, "share")
    budgets = run_cli(monkeypatch, researcher, "budgets")
    assert " nlp (hold) " in share and " nlp (hold) " in budgets
