"""Login, logout, me, tokens and the budget list."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command
from knox.models import AuthToken
from rest_framework.test import APIClient

from tests.conftest import PASSWORD


def test_login_returns_a_token_that_authenticates(researcher, org_tree):
    client = APIClient()
    response = client.post("/api/v1/auth/login/", {"username": "researcher", "password": PASSWORD}, format="json")
    assert response.status_code == 200
    token = response.json()["token"]
    assert response.json()["user"]["username"] == "researcher"

    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    me = client.get("/api/v1/me/").json()
    assert me["username"] == "researcher"
    assert me["memberships"] == [
        {"budget_id": org_tree["nlp/olmo"].pk, "budget": "nlp/olmo", "role": "member", "archived": False}
    ]
    assert me["submit_budgets"] == ["nlp/olmo"]


def test_tokens_are_stored_hashed(researcher):
    response = APIClient().post("/api/v1/auth/login/", {"username": "researcher", "password": PASSWORD}, format="json")
    token = response.json()["token"]
    for digest, key in AuthToken.objects.values_list("digest", "token_key"):
        assert token not in (digest, key)


def test_wrong_password_is_refused_without_token(researcher):
    response = APIClient().post("/api/v1/auth/login/", {"username": "researcher", "password": "nope"}, format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_credentials"
    assert AuthToken.objects.count() == 0


def test_logout_revokes_the_token(researcher_client, researcher):
    assert researcher_client.get("/api/v1/me/").status_code == 200
    assert researcher_client.post("/api/v1/auth/logout/").status_code == 204
    assert researcher_client.get("/api/v1/me/").status_code == 401


def test_session_login_also_authenticates(researcher):
    client = APIClient()
    client.login(username="researcher", password=PASSWORD)
    assert client.get("/api/v1/me/").json()["username"] == "researcher"


def test_create_token_command_prints_a_working_token(researcher):
    out = StringIO()
    call_command("create_token", "researcher", stdout=out)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {out.getvalue().strip()}")
    assert client.get("/api/v1/me/").json()["username"] == "researcher"


def test_member_of_root_may_submit_everywhere(admin_client_api, org_tree):
    me = admin_client_api.get("/api/v1/me/").json()
    assert me["submit_budgets"] == ["nlp/olmo", "nlp/tulu", "vision/sam"]


def test_budget_list_shows_shares_and_access(researcher_client, org_tree):
    rows = {row["path"]: row for row in researcher_client.get("/api/v1/budgets/").json()}
    assert list(rows) == ["nlp", "nlp/olmo", "nlp/tulu", "org", "vision", "vision/sam"]
    assert rows["nlp"]["normalized_share"] == 2 / 3
    assert (rows["nlp/olmo"]["can_submit"], rows["nlp/tulu"]["can_submit"]) == (True, False)
    assert rows["nlp"]["leaf"] is False
