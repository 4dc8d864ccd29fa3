"""tok46: a login token expires ``FAIRWAY_LOGIN_TOKEN_DAYS`` days after it was made (fixed, never
slid; 0 = never), an expired one is refused with a 401 that says to run ``fairway login`` again,
and the CLI prints those words (docs/deploy.md "API tokens")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import ApiTokenInfo
from accounts.services import create_api_token, login_token_expiry
from fairway_cli.cli import EXIT_AUTH, answer_error
from tests.conftest import PASSWORD


def _login() -> dict:
    response = APIClient().post("/api/v1/auth/login/", {"username": "researcher", "password": PASSWORD}, format="json")
    assert response.status_code == 200
    return response.json()


def test_a_login_token_expires_after_the_setting_and_the_listing_shows_it(researcher, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "LOGIN_TOKEN_DAYS": 30}
    before = timezone.now()
    answer = _login()
    row = AuthToken.objects.get(user=researcher)
    assert row.info.kind == ApiTokenInfo.Kind.LOGIN
    assert before + timedelta(days=30) <= row.expiry <= timezone.now() + timedelta(days=30)
    assert answer["expiry"] is not None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {answer['token']}")
    listed = client.get("/api/v1/tokens/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [(t["kind"], t["expiry"]) for t in rows] == [("login", answer["expiry"])]


def test_zero_days_means_a_login_token_never_expires(researcher, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "LOGIN_TOKEN_DAYS": 0}
    assert login_token_expiry() is None
    assert _login()["expiry"] is None
    assert AuthToken.objects.get(user=researcher).expiry is None


def test_an_expired_token_is_refused_with_words_that_say_to_log_in_again(researcher):
    row, token = create_api_token(researcher, expiry=timedelta(days=1))
    AuthToken.objects.filter(pk=row.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    response = client.get("/api/v1/me/")
    assert response.status_code == 401
    body = response.json()
    assert body["code"] == "token_expired"
    assert "fairway login" in body["detail"]
    assert not AuthToken.objects.filter(pk=row.pk).exists()  # removed: no unbounded growth
    # The CLI prints the server's words for it (not "not logged in, or the token was revoked").
    error = answer_error("http://x", 401, body)
    assert error.exit_code == EXIT_AUTH
    assert body["detail"] in str(error)


def test_the_cli_keeps_its_own_words_for_any_other_401():
    error = answer_error("http://x", 401, {"detail": "Invalid token.", "code": "authentication_failed"})
    assert "run `fairway login`" in str(error)
    assert "Invalid token" not in str(error)


def test_the_clock_prune_deletes_every_expired_token(researcher, admin_user):
    from scheduler import tasks

    old, _ = create_api_token(researcher, expiry=timedelta(days=1))
    other, _ = create_api_token(admin_user, expiry=timedelta(days=1))
    kept, _ = create_api_token(researcher, expiry=timedelta(days=1))
    forever, _ = create_api_token(researcher)
    AuthToken.objects.filter(pk__in=[old.pk, other.pk]).update(expiry=timezone.now() - timedelta(minutes=1))
    tasks.prune_expired_tokens.fn()
    assert set(AuthToken.objects.values_list("pk", flat=True)) == {kept.pk, forever.pk}


@pytest.mark.django_db
def test_the_migration_gives_existing_login_tokens_an_expiry(researcher, settings):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("accounts.migrations.0007_login_token_expiry")
    settings.FAIRWAY = {**settings.FAIRWAY, "LOGIN_TOKEN_DAYS": 30}
    login, _ = create_api_token(researcher)
    personal, _ = create_api_token(researcher, kind=ApiTokenInfo.Kind.PERSONAL)
    before = timezone.now()
    migration.give_login_tokens_an_expiry(apps, None)
    login.refresh_from_db()
    personal.refresh_from_db()
    assert login.expiry >= before + timedelta(days=30)
    assert personal.expiry is None  # a personal token keeps what its owner chose
