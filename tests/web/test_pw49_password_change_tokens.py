"""pw49: a password change (the admin's "Reset password" page for a user, the admin's own
"Change password" page, ``manage.py changepassword``) left the user's API tokens working. It ends
every LOGIN token (made by logging in with the password) and every other web session; PERSONAL
tokens (the tokens page's, made on purpose) keep working, and what the change ended is said
(``accounts.services.password_changed_words``; docs/deploy.md, "API tokens: a password change")."""

from __future__ import annotations

import html
from unittest import mock

from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from accounts.management.commands.changepassword import Command as ChangePassword
from accounts.services import create_api_token, password_changed_words
from tests.conftest import PASSWORD

NEW = "a-new-password-4711"


def _tokens(user) -> tuple[str, str, str]:
    """Two login tokens and a personal one."""
    return (
        create_api_token(user)[1],
        create_api_token(user)[1],
        create_api_token(user, name="ci", kind="personal")[1],
    )


def _works(token: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/v1/me/").status_code == 200


def _after(tokens: tuple[str, str, str]) -> list[bool]:
    return [_works(t) for t in tokens]


def test_the_admins_reset_password_page_ends_the_users_login_tokens(admin, researcher):
    tokens = _tokens(researcher)
    other_session = Client()
    other_session.force_login(researcher)
    client = Client()
    client.force_login(admin)
    response = client.post(
        f"/admin/accounts/user/{researcher.pk}/password/",
        {"password1": NEW, "password2": NEW, "usable_password": "true"},
        follow=True,
    )
    assert response.status_code == 200
    assert _after(tokens) == [False, False, True]
    page = html.unescape(response.content.decode())
    assert password_changed_words(2) in page
    assert "2 login tokens" in page and "personal API tokens" in page
    assert other_session.get("/").status_code == 302  # the researcher's web session ended too


def test_the_admins_own_change_password_page_ends_their_login_tokens(admin):
    tokens = _tokens(admin)
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/password_change/",
        {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW},
        follow=True,
    )
    assert response.status_code == 200
    assert response.redirect_chain[-1][0].endswith("/admin/password_change/done/")
    assert _after(tokens) == [False, False, True]
    assert password_changed_words(2) in html.unescape(response.content.decode())
    assert client.get("/admin/").status_code == 200  # the page's own session stays


def test_manage_changepassword_ends_the_users_login_tokens(researcher, capsys):
    tokens = _tokens(researcher)
    with mock.patch.object(ChangePassword, "_get_pass", return_value=NEW):
        call_command("changepassword", "researcher")
    out = capsys.readouterr().out
    assert _after(tokens) == [False, False, True]
    assert password_changed_words(2) in out
    researcher.refresh_from_db()
    assert researcher.check_password(NEW)


def test_a_save_that_changes_no_password_keeps_every_token(researcher):
    tokens = _tokens(researcher)
    researcher.first_name = "Ada"
    researcher.save()
    assert researcher.login_tokens_ended is None
    assert _after(tokens) == [True, True, True]


def test_the_words_count_one_token(researcher):
    assert "ended 1 login token " in password_changed_words(1)
