"""brk49: a login token expires ``FAIRWAY_LOGIN_TOKEN_DAYS`` days after its creation so that "a
stolen token stops within N days whatever the thief does" (docs/deploy.md, tok46), yet that token
could ``POST /api/v1/tokens/`` a personal token that never expires (or expires years later) and
keep the account for good. A token now makes only tokens that expire no later than itself; a
token that never expires, and the tokens page (a password's session), are unbounded as before.
The first two tests failed before the fix."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.services import create_api_token, do_create_personal_token


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_a_login_token_cannot_mint_a_token_outliving_it(researcher: Any) -> None:
    login, text = create_api_token(researcher, expiry=timedelta(days=30))
    client = _client(text)
    for body in ({"name": "forever"}, {"name": "forever", "expiry_days": None}, {"name": "long", "expiry_days": 3650}):
        response = client.post("/api/v1/tokens/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["code"] == "invalid_expiry", response.content
        assert "expires" in str(response.json()) and "at most 29 days" in str(response.json()), response.content
    assert AuthToken.objects.filter(user=researcher).count() == 1  # nothing made
    made = client.post("/api/v1/tokens/", {"name": "ci", "expiry_days": 29}, format="json")
    assert made.status_code == 201, made.content
    new = AuthToken.objects.filter(user=researcher).exclude(pk=login.pk).get()
    assert new.expiry is not None and new.expiry <= login.expiry


def test_a_short_personal_token_cannot_mint_a_longer_one(researcher: Any) -> None:
    _row, text = do_create_personal_token(researcher, "one day", 1)
    response = _client(text).post("/api/v1/tokens/", {"name": "longer", "expiry_days": 2}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_expiry", response.content
    assert AuthToken.objects.filter(user=researcher).count() == 1


def test_a_token_that_never_expires_and_the_tokens_page_are_unbounded(researcher: Any, client: Any) -> None:
    _row, text = do_create_personal_token(researcher, "forever", None)
    made = _client(text).post("/api/v1/tokens/", {"name": "also forever"}, format="json")
    assert made.status_code == 201 and made.json()["expiry"] is None, made.content
    client.force_login(researcher)
    response = client.post("/tokens/", {"name": "page", "expiry_days": ""})
    assert response.status_code in (200, 302), response.status_code
    assert AuthToken.objects.filter(user=researcher, expiry__isnull=True).count() == 3
    assert timezone.now()  # (the page's session is a password's: unbounded)
