"""left38 tryout: ``fairway whoami`` listed an archived budget's membership like a live one,
where the budgets page marks it with its "archived" badge."""

from __future__ import annotations

from django.test import Client

from accounts.services import do_add_membership
from budgets.services import do_archive_budget
from tests.cli.inprocess import run_cli


def test_whoami_marks_an_archived_budgets_membership_as_the_budgets_page_does(
    monkeypatch, researcher, researcher_client, org_tree, cluster
):
    do_add_membership(researcher, org_tree["vision/sam"])
    do_archive_budget(org_tree["vision/sam"])
    me = researcher_client.get("/api/v1/me/").json()
    archived = {m["budget"]: m["archived"] for m in me["memberships"]}
    assert archived == {"nlp/olmo": False, "vision/sam": True}
    out = run_cli(monkeypatch, researcher, "whoami")
    assert "  member of vision/sam (archived)\n" in out
    assert "  member of nlp/olmo\n" in out
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/budgets/").content.decode()
    row = page[page.index('data-budget="vision/sam"') :]
    assert '<span class="badge">archived</span>' in row[: row.index("</tr>")]
