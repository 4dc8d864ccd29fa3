"""A budget's active temporary share shows the same words on the API (``budgets/tree/``,
``budgets/``) and ``fairway budgets`` (the budgets page: tests/web/test_browser_share_boost.py):
``share 3 until … (then 1)``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from budgets.services import apply_due_boosts, do_schedule_boost
from fairway_cli.words import boost_text
from tests.cli.inprocess import run_cli


def boost_olmo(admin, org_tree):  # noqa: ANN001, ANN201 -- the fixtures' objects
    until = (timezone.now() + timedelta(days=14)).replace(microsecond=0)
    do_schedule_boost(admin, org_tree["nlp/olmo"], 3, until, note="ACL deadline")
    apply_due_boosts()
    return until


def test_the_words_of_a_boost():
    now = datetime(2026, 12, 6, 12, tzinfo=UTC)
    until = datetime(2026, 12, 20, tzinfo=UTC)
    assert boost_text(3, until, 1, now) == "share 3 until Dec 20 00:00:00 UTC (then 1)"


def test_the_api_and_the_cli_show_the_boost(admin, researcher, researcher_client, org_tree, cluster, monkeypatch):
    until = boost_olmo(admin, org_tree)
    words = boost_text(3, until, 1)
    tree = {b["path"]: b for b in researcher_client.get("/api/v1/budgets/tree/").json()[0]["budgets"]}
    olmo = tree["nlp/olmo"]
    assert (olmo["shares"], olmo["boost_then_shares"], olmo["boost_text"]) == (3, 1, words)
    assert datetime.fromisoformat(olmo["boost_until"].replace("Z", "+00:00")) == until
    assert (tree["nlp/tulu"]["boost_text"], tree["nlp/tulu"]["boost_until"]) == ("", None)

    listed = {b["path"]: b for b in researcher_client.get("/api/v1/budgets/").json()}
    assert (listed["nlp/olmo"]["boost_text"], listed["nlp/olmo"]["boost_then_shares"]) == (words, 1)
    assert listed["nlp/tulu"]["boost_text"] == "" and listed["nlp/tulu"]["boost_until"] is None

    out = run_cli(monkeypatch, researcher, "budgets")
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("olmo")]
    assert words in line
    (tulu,) = [ln for ln in out.splitlines() if ln.strip().startswith("tulu")]
    assert "until" not in tulu


def test_fairway_share_names_the_boost_under_its_table(admin, researcher, org_tree, cluster, monkeypatch):
    """try61: `fairway share` printed olmo's RawShares 3 while the admin and `fairway budgets` said it
    goes back to 1: the sshare-like table keeps its columns and names each temporary share below it."""
    until = boost_olmo(admin, org_tree)
    out = run_cli(monkeypatch, researcher, "share")
    (row,) = [ln for ln in out.splitlines() if ln.strip().startswith("olmo")]
    assert row.split()[1] == "3"
    assert f"  temporary: nlp/olmo {boost_text(3, until, 1)}\n" in out
    assert out.count("temporary:") == 1
