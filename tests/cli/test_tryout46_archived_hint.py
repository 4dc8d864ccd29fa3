"""tryout46: after leadership archived nlp/bert, ``fairway history --budget bert`` (and ``fairway ls
--budget bert``, ``GET workloads/?budget=bert``, ``fairway statement bert``) answered "No budget
'bert'." alone, while ``--budget nlp/bert`` read its history: the "did you mean" hint named live
budgets only. The filters and statements read archived budgets, so their hint names them too;
a submission's (which an archived budget refuses) still names live ones only."""

from __future__ import annotations

from budgets.services import do_archive_budget
from fairway_cli.cli import EXIT_API
from tests.cli.inprocess import run_cli_streams

HINT = "No budget 'olmo'. Budgets are named by their path: did you mean nlp/olmo?"


def test_a_filter_on_an_archived_budgets_name_hints_its_path(monkeypatch, researcher, researcher_client, org_tree):
    do_archive_budget(org_tree["nlp/olmo"])
    for url in ("/api/v1/workloads/?budget=olmo", "/api/v1/workloads/history/?budget=olmo"):
        answer = researcher_client.get(url)
        assert answer.status_code == 400 and answer.json()["budget"] == [HINT], (url, answer.json())
    for argv in (("history", "--budget", "olmo"), ("ls", "--budget", "olmo"), ("statement", "olmo")):
        code, _out, err = run_cli_streams(monkeypatch, researcher, *argv)
        assert code == EXIT_API and HINT in err, (argv, err)


def test_a_submission_still_hints_live_budgets_only(researcher_client, org_tree, submission):
    do_archive_budget(org_tree["nlp/olmo"])
    answer = researcher_client.post("/api/v1/workloads/", submission(budget="olmo"), format="json")
    assert answer.status_code == 400 and answer.json()["budget"] == ["No budget 'olmo'."], answer.json()
