"""brk47: a provider's ``sub`` that no identity row can hold (OpenID Connect Core: at most 255
ASCII characters) reached the database: on PostgreSQL the first login's insert failed (DataError),
a 500 at the callback. It is refused as a claim the login cannot use, and nothing is written. So
was a verified email longer than an account's (254): it is not the provider's to copy."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.models import OidcIdentity, User
from tests.sso.conftest import add_person, sso_login
from tests.sso.provider import Provider


@pytest.mark.parametrize("sub", ["s" * 256, "é" * 300])
def test_a_subject_longer_than_an_identity_holds_is_a_failed_login(sso: Provider, org_tree, sub: str) -> None:
    add_person(sso, "longsub", groups=[])
    sso.users["longsub"]["claims"]["sub"] = sub
    before = User.objects.count()
    client = Client()
    answer = sso_login(client, sso, "longsub")
    assert answer.status_code == 302 and answer["Location"] == "/login/?sso=failed", answer
    assert "_auth_user_id" not in client.session
    assert User.objects.count() == before and not OidcIdentity.objects.exists()


def test_a_subject_of_255_characters_still_logs_in(sso: Provider, org_tree) -> None:
    add_person(sso, "longsub", groups=[])
    sso.users["longsub"]["claims"]["sub"] = "s" * 255
    client = Client()
    assert sso_login(client, sso, "longsub")["Location"] == "/"
    assert OidcIdentity.objects.get().subject == "s" * 255


def test_a_verified_email_longer_than_an_account_holds_is_not_copied(sso: Provider, org_tree) -> None:
    """The first login's account was created with it (DataError on PostgreSQL: a 500), and a later
    login cut it to 150 characters: another address, where notifications went."""
    long_email = "a" * 250 + "@lab.example.org"
    add_person(sso, "longmail", groups=[], email=long_email)
    client = Client()
    assert sso_login(client, sso, "longmail")["Location"] == "/"
    assert User.objects.get(username="longmail").email == ""
    sso.users["longmail"]["claims"]["email"] = "b" * 140 + "@lab.example.org"  # 156: it was cut to 150
    assert sso_login(Client(), sso, "longmail")["Location"] == "/"
    assert User.objects.get(username="longmail").email == "b" * 140 + "@lab.example.org"
