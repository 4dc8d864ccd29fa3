"""brk38: two first logins of one person through single sign-on at once (two tabs, a double
click on the provider's button) on PostgreSQL: real threads, each with its own connection."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from accounts.models import OidcIdentity, User
from accounts.oidc import FairwayOIDCBackend
from tests.pg_locks import BOUND_S, Held, Waiting, until, waits_on_a_lock
from tests.sso.provider import Provider

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the race needs PostgreSQL"),
]


def _login(sso: Provider, monkeypatch: pytest.MonkeyPatch, claims: dict[str, Any]) -> User | None:
    backend = FairwayOIDCBackend()
    monkeypatch.setattr(backend, "get_userinfo", lambda access, id_token, payload: dict(claims))
    return backend.get_or_create_user("access", "id", {"iss": sso.issuer, **claims})


@pytest.mark.parametrize("named", [True, False], ids=["preferred_username", "sub"])
def test_two_first_logins_at_once_make_one_account(sso, monkeypatch, org_tree, named) -> None:
    """Both callbacks found no identity for the subject and created an account: the second failed
    on the unique user name (the same ``preferred_username``) or on the unique (issuer, subject)
    of the identity, an IntegrityError: a 500 from the callback page instead of a login. The
    second now waits for the first and logs in to the account it made."""
    claims = {"sub": "sub-rita-0001", "email": "rita@lab.example.org", "email_verified": False, "groups": ["lab-nlp"]}
    if named:
        claims["preferred_username"] = "rita"

    first = Held(lambda: _login(sso, monkeypatch, claims))
    assert first.done.wait(BOUND_S), first.error
    try:
        second = Waiting(lambda: _login(sso, monkeypatch, claims))
        assert until(lambda: (second.pid is not None and waits_on_a_lock(second.pid)) or second.ended.is_set())
    finally:
        first.release()
    assert second.ended.wait(BOUND_S)

    assert first.error is None and second.error is None, (first.error, second.error)
    identity = OidcIdentity.objects.get(subject="sub-rita-0001")
    assert second.result == identity.user
    assert User.objects.filter(oidc_identities__isnull=False).count() == 1


def test_two_people_of_one_user_name_logging_in_first_at_once_get_two_accounts(sso, monkeypatch, org_tree) -> None:
    """Two people whose provider names both ``rita`` (two issuers' subjects, a renamed account):
    the second's "rita is free" was read before the first committed, and its insert failed."""
    one = {"sub": "sub-rita-0001", "preferred_username": "rita", "groups": []}
    two = {"sub": "sub-rita-0002", "preferred_username": "rita", "groups": []}

    first = Held(lambda: _login(sso, monkeypatch, one))
    assert first.done.wait(BOUND_S), first.error
    try:
        second = Waiting(lambda: _login(sso, monkeypatch, two))
        assert until(lambda: (second.pid is not None and waits_on_a_lock(second.pid)) or second.ended.is_set())
    finally:
        first.release()
    assert second.ended.wait(BOUND_S)

    assert first.error is None and second.error is None, (first.error, second.error)
    names = dict(OidcIdentity.objects.values_list("subject", "user__username"))
    assert names == {"sub-rita-0001": "rita", "sub-rita-0002": "rita-2"}
