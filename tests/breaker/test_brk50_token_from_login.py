"""brk50: a password change ends the user's login tokens (pw49) so that a stolen CLI token stops,
but the thief's login token could first make a personal token (``POST /api/v1/tokens/``, which
takes a login token: brk49 only bounds its expiry, and with ``FAIRWAY_LOGIN_TOKEN_DAYS=0`` not
even that), and personal tokens survive a password change: the thief kept the account. A token
made with a login token (or with a token made so) ends with the login tokens; a personal token made
on the tokens page (a session's) or by ``manage.py create_token`` still keeps working."""

from __future__ import annotations

from rest_framework.test import APIClient

from accounts.services import create_api_token, end_login_tokens

NEW = "a-new-password-4711"


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def _works(token: str) -> bool:
    return _client(token).get("/api/v1/me/").status_code == 200


def _made_with(token: str, name: str, days: int | None = 10) -> str:
    body = {"name": name} if days is None else {"name": name, "expiry_days": days}
    response = _client(token).post("/api/v1/tokens/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["token"]


def test_a_token_made_with_a_stolen_login_token_ends_with_a_password_change(researcher):
    _row, login = create_api_token(researcher)  # the CLI's `fairway login`, stolen
    thiefs = _made_with(login, "backup")
    grandchild = _made_with(thiefs, "backup of backup", days=5)
    _row, ci = create_api_token(researcher, name="ci", kind="personal")  # the tokens page's
    assert all(_works(t) for t in (login, thiefs, grandchild, ci))
    researcher.set_password(NEW)
    researcher.save()
    assert researcher.login_tokens_ended == 3
    assert [_works(t) for t in (login, thiefs, grandchild, ci)] == [False, False, False, True]


def test_without_a_login_expiry_too(researcher, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "LOGIN_TOKEN_DAYS": 0}
    _row, login = create_api_token(researcher, expiry=None)
    forever = _made_with(login, "forever", days=None)
    assert end_login_tokens(researcher) == 2
    assert not _works(forever)


def test_a_personal_token_made_with_a_personal_one_keeps_working(researcher):
    _row, ci = create_api_token(researcher, name="ci", kind="personal")
    child = _made_with(ci, "ci-child", days=None)
    assert end_login_tokens(researcher) == 0
    assert _works(ci) and _works(child)
