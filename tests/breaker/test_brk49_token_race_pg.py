"""brk49 on PostgreSQL: "log out everywhere" (``POST auth/logout/ {"all": true}``) racing a token
made with a stolen token (``POST tokens/``). The create read its token valid and inserted the new
one while the logout's delete was not yet committed: the new token, unseen by that delete, outlived
the logout the person ran to lock the thief out. Both now take the user's row first; a create
whose token is gone meanwhile is refused (401) and makes nothing. Real threads, each with its own
connection; skipped on SQLite (one writer). Failed before the fix."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.services import create_api_token, do_logout_everywhere
from tests.pg_locks import BOUND_S, Held, Waiting, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
]


def test_a_token_made_while_logout_everywhere_commits_does_not_outlive_it(researcher: Any) -> None:
    _stolen, text = create_api_token(researcher, expiry=timedelta(days=30))

    def create() -> Any:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {text}")
        return client.post("/api/v1/tokens/", {"name": "kept", "expiry_days": 7}, format="json")

    logout = Held(lambda: do_logout_everywhere(researcher))
    assert logout.done.wait(BOUND_S), logout.error
    made = Waiting(create)
    until(lambda: waits_on_a_lock(made.pid) or made.ended.is_set())
    logout.release()
    assert made.ended.wait(BOUND_S) and made.error is None, made.error
    assert logout.error is None, logout.error
    assert made.result.status_code == 401, made.result.content
    assert not AuthToken.objects.filter(user=researcher).exists()
