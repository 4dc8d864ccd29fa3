"""tok46: ``fairway whoami`` with a login token past its expiry prints the server's words (run
``fairway login`` again) and exits 4, through the CLI's real error path (``answer_error``)."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

from django.utils import timezone
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.auth import TOKEN_EXPIRED_TEXT
from accounts.services import create_api_token
from fairway_cli import cli as fairway_cli


def _whoami_with(monkeypatch: Any, token: str) -> tuple[int, str]:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {token}")

    def call(self: Any, method: str, path: str, **_: Any) -> Any:
        response = api.get(f"/api/v1/{path.lstrip('/')}")
        if response.status_code >= 400:
            raise fairway_cli.answer_error("http://in-process", response.status_code, response.json())
        return response.json()

    monkeypatch.setattr(fairway_cli.Api, "call", call)
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", token)
    out, err = io.StringIO(), io.StringIO()
    return fairway_cli.main(["whoami"], out=out, err=err), err.getvalue()


def test_an_expired_login_token_says_to_log_in_again(monkeypatch, researcher):
    row, token = create_api_token(researcher, expiry=timedelta(days=30))
    AuthToken.objects.filter(pk=row.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    code, err = _whoami_with(monkeypatch, token)
    assert code == fairway_cli.EXIT_AUTH
    assert TOKEN_EXPIRED_TEXT in err
    # Presented again it is gone: an unknown token, in the CLI's own words.
    code, err = _whoami_with(monkeypatch, token)
    assert code == fairway_cli.EXIT_AUTH
    assert fairway_cli.NOT_LOGGED_IN_TEXT in err
