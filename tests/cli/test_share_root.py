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
