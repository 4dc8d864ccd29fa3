"""A budget's active temporary share shows the same words on the API (``budgets/tree/``,
``budgets/``) and ``fairway budgets`` (the budgets page: tests/web/test_browser_share_boost.py):
``share 3 until … (then 1)``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone

from budgets.services import apply_due_boosts, do_schedule_boost
from fairway_cli.words import boost_cell, boost_text
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
    assert boost_cell(3, until, 1) in line  # the sentence below the table (pages46)
    assert f"  temporary: nlp/olmo {words}\n" in out
    (tulu,) = [ln for ln in out.splitlines() if ln.strip().startswith("tulu")]
    assert "until" not in tulu and "→" not in tulu


def test_the_cell_of_a_boost():
    """pages46 (tryout46): ``fairway budgets``' SHARES cell held the sentence, ~50 characters
    ("share 3 until 18:00:00 UTC (then 1)"); it is short, the instant as the sentence's to the
    minute (``fairway_cli.numbers.instant_text``), the sentence below the table."""
    now = datetime(2026, 12, 6, 12, tzinfo=UTC)
    assert boost_cell(3, datetime(2026, 12, 6, 18, tzinfo=UTC), 1, now) == "3 → 1 @18:00"
    assert boost_cell(3, "2026-12-20T00:00:00Z", 1, now) == "3 → 1 @Dec 20 00:00"
    assert boost_cell(3, datetime(2027, 1, 3, 9, 30, tzinfo=UTC), None, now) == "3 @Jan 3 2027 09:30"


def test_fairway_budgets_keeps_its_shares_column_narrow(admin, researcher, org_tree, cluster, monkeypatch):
    def shares_end(out: str) -> int:  # where the right-aligned SHARES column ends
        header = next(ln for ln in out.splitlines() if ln.startswith("BUDGET"))
        return header.index("SHARES") + len("SHARES")

    before = shares_end(run_cli(monkeypatch, researcher, "budgets"))
    until = boost_olmo(admin, org_tree)
    out = run_cli(monkeypatch, researcher, "budgets")
    assert shares_end(out) - before == len(boost_cell(3, until, 1)) - len("SHARES") < 15  # the sentence: 36
    (row,) = [ln for ln in out.splitlines() if ln.strip().startswith("olmo")]
    assert "share 3 until" not in row and out.count("temporary:") == 1
