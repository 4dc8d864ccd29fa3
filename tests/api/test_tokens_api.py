"""Personal API tokens: created (shown once), listed, revoked; stored hashed; only one's own."""

from __future__ import annotations

from knox.models import AuthToken
from rest_framework.test import APIClient

URL = "/api/v1/tokens/"


def test_personal_token_is_shown_once_and_authenticates(researcher_client, researcher):
    created = researcher_client.post(URL, {"name": "laptop", "expiry_days": 30}, format="json")

    assert created.status_code == 201, created.json()
    body = created.json()
    token = body["token"]
    assert (body["name"], body["kind"], body["current"]) == ("laptop", "personal", False)
    assert body["id"] == token[:15]
    assert body["expiry"] is not None
    for digest, key in AuthToken.objects.values_list("digest", "token_key"):
        assert token not in (digest, key)

    listed = researcher_client.get(URL).json()
    assert {row["name"] for row in listed} == {"", "laptop"}
    assert all("token" not in row for row in listed)
    assert [row["current"] for row in listed if row["name"] == ""] == [True]

    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert other.get("/api/v1/me/").json()["username"] == "researcher"


def test_revoked_token_stops_working_at_once(researcher_client):
    token = researcher_client.post(URL, {"name": "ci"}, format="json").json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/me/").status_code == 200

    assert researcher_client.delete(f"{URL}{token[:15]}/").status_code == 204

    assert client.get("/api/v1/me/").status_code == 401


def test_nobody_revokes_or_sees_another_users_token(researcher_client, outsider_client):
    token = researcher_client.post(URL, {"name": "mine"}, format="json").json()["token"]
    before = AuthToken.objects.count()

    response = outsider_client.delete(f"{URL}{token[:15]}/")

    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
    assert AuthToken.objects.count() == before
    assert "mine" not in {row["name"] for row in outsider_client.get(URL).json()}


def test_token_needs_a_name_and_a_sane_expiry(researcher_client):
    before = AuthToken.objects.count()
    assert researcher_client.post(URL, {"name": ""}, format="json").json()["code"] == "blank"
    assert researcher_client.post(URL, {"name": "x", "expiry_days": 0}, format="json").status_code == 400
    assert researcher_client.post(URL, {"name": "x", "expiry_days": 99999}, format="json").status_code == 400
    assert AuthToken.objects.count() == before


def test_an_unknown_field_is_refused_not_a_token_that_never_expires(researcher_client):
    """tryout24: ``{"name": "ci", "expires_in": "30d"}`` (a typo for ``expiry_days``) made a token
    with no expiry, 201; the workloads and notifications APIs refuse unknown fields: so do tokens."""
    before = AuthToken.objects.count()
    response = researcher_client.post(URL, {"name": "ci", "expires_in": "30d"}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "unknown_field" and "expiry_days" in body["expires_in"][0]
    assert AuthToken.objects.count() == before
