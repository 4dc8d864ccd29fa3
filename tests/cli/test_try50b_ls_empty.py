"""try50b: ``fairway ls`` once a researcher's work had all ended printed a bare header: nothing said
that ``ls`` lists unfinished work unless ``--all`` (its help says it; the table did not), where
``fairway history`` says "no attempt ended since …" and the web list "No workloads match."."""

from __future__ import annotations

from fairway_cli.words import NO_UNFINISHED_WORKLOADS, NO_WORKLOADS_MATCH
from tests.cli.inprocess import run_cli


def test_an_empty_default_ls_says_finished_work_is_under_all(monkeypatch, researcher, cluster):
    out = run_cli(monkeypatch, researcher, "ls", "--mine")
    assert out.splitlines()[0].startswith("ID  NAME")
    assert out.splitlines()[1:] == [NO_UNFINISHED_WORKLOADS]
    assert "fairway ls --all" in NO_UNFINISHED_WORKLOADS


def test_an_empty_filtered_ls_says_nothing_matches(monkeypatch, researcher, cluster):
    out = run_cli(monkeypatch, researcher, "ls", "--all", "--mine")
    assert out.splitlines()[1:] == [NO_WORKLOADS_MATCH]
    out = run_cli(monkeypatch, researcher, "ls", "--state", "failed")
    assert out.splitlines()[1:] == [NO_WORKLOADS_MATCH]


def test_json_stays_an_empty_list(monkeypatch, researcher, cluster):
    assert run_cli(monkeypatch, researcher, "ls", "--json").strip() == "[]"
