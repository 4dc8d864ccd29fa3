"""brk44: a staff member's reading of a budget's statement comes from Django permissions, as their
reading of other people's logs and env values does (lim42): ``is_staff`` alone (an OIDC ``staff``
grant with no permission given) read every budget's statement, each user's GPU-hours, on the API,
the CLI and the budgets page's links."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from accounts.models import User
from tests.cli.inprocess import run_cli
from tests.conftest import PASSWORD


def _staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD, is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="budgets", codename=codename))
    return User.objects.get(pk=user.pk)  # no permission cache


@pytest.mark.django_db
def test_staff_without_permissions_read_no_statement(org_tree, api_client_for):
    bare = api_client_for(_staff("bare"))
    answer = bare.get(f"/api/v1/budgets/{org_tree['nlp'].pk}/statement.csv")
    assert answer.status_code == 403
    assert "view_budget" in answer.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("codename", ["view_budget", "change_budget"])
def test_staff_with_a_budget_permission_read_every_statement(org_tree, api_client_for, codename):
    reader = api_client_for(_staff("reader", codename))
    answer = reader.get(f"/api/v1/budgets/{org_tree['vision/sam'].pk}/statement.csv")
    assert answer.status_code == 200
    assert answer.content.startswith(b"budget,day,")


@pytest.mark.django_db
def test_the_budgets_page_links_only_the_statements_one_may_read(org_tree, client):
    _staff("bare")
    client.login(username="bare", password=PASSWORD)
    page = client.get("/budgets/")
    assert page.status_code == 200
    assert "statement.csv" not in page.content.decode()
    _staff("reader", "view_budget")
    client.login(username="reader", password=PASSWORD)
    page = client.get("/budgets/")
    assert f"/api/v1/budgets/{org_tree['vision/sam'].pk}/statement.csv" in page.content.decode()


@pytest.mark.django_db
def test_the_cli_says_why_bare_staff_read_no_statement(org_tree, monkeypatch):
    assert "view_budget" in run_cli(monkeypatch, _staff("bare"), "statement", "nlp", expect=1)
