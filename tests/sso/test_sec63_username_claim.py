"""sec63: a new SSO account was named after the provider's ``preferred_username``; GPU hosts map
user names to Unix users (docs/isolation.md, way 2), so where people choose that name at the
provider, anyone could take ``bob`` (a Unix user who had not logged in to Fairway yet) and run
workloads as the host's ``bob``. Now the name comes from ``FAIRWAY_OIDC_USERNAME_CLAIM``, by
default ``sub`` (the provider's own, stable identifier); ``email`` takes the local part of an email
the provider says is verified, in a domain of ``FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS`` only; any
other claim is the operator's word that the provider controls it. The account is found by
(issuer, ``sub``) at every login after the first, whatever the claims then say."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from accounts.models import User
from tests.sso.conftest import add_person, sso_login
from tests.sso.provider import Provider

SETTINGS = Path(__file__).resolve().parents[2] / "config" / "settings.py"


def logged_in_as(client: Client) -> User:
    return User.objects.get(pk=int(client.session["_auth_user_id"]))


@pytest.fixture
def default_claim(sso: Provider, settings) -> Provider:
    settings.FAIRWAY_OIDC_USERNAME_CLAIM = "sub"  # the default (the tests' provider: its own names)
    settings.FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS = []
    return sso


def test_a_chosen_preferred_username_does_not_name_the_account_by_default(default_claim, org_tree):
    add_person(default_claim, "mallory", groups=[])
    default_claim.users["mallory"]["claims"]["preferred_username"] = "bob"  # chosen at the provider
    client = Client()
    assert sso_login(client, default_claim, "mallory")["Location"] == "/"
    user = logged_in_as(client)
    assert user.username == "sub-mallory-0001"  # the provider's subject
    assert not User.objects.filter(username="bob").exists()


def test_the_account_is_found_by_sub_whatever_the_names_say_later(default_claim, settings, org_tree):
    add_person(default_claim, "carol", groups=[])
    first = Client()
    sso_login(first, default_claim, "carol")
    account = logged_in_as(first)
    default_claim.users["carol"]["claims"].update(preferred_username="root", email="root@lab.example.org")
    again = Client()
    sso_login(again, default_claim, "carol")
    assert logged_in_as(again).pk == account.pk and User.objects.get(pk=account.pk).username == account.username


@pytest.mark.parametrize(
    ("email", "verified", "named"),
    [
        ("dana@lab.example.org", True, "dana"),
        ("dana@LAB.example.org", "true", "dana"),
        ("dana@gmail.com", True, "sub-dana-0001"),  # a domain not listed: the subject
        ("dana@lab.example.org", False, "sub-dana-0001"),  # not verified
        ("dana@lab.example.org", None, "sub-dana-0001"),  # not said to be verified
        ("dana@evil.lab.example.org", True, "sub-dana-0001"),  # a subdomain is another domain
    ],
)
def test_the_email_claim_names_an_account_only_when_verified_in_a_listed_domain(
    default_claim, settings, org_tree, email, verified, named
):
    settings.FAIRWAY_OIDC_USERNAME_CLAIM = "email"
    settings.FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS = ["lab.example.org"]
    settings.FAIRWAY_OIDC_LINK_BY_EMAIL = False
    add_person(default_claim, "dana", groups=[], email=email, verified=True)
    claims = default_claim.users["dana"]["claims"]
    if verified is None:
        del claims["email_verified"]
    else:
        claims["email_verified"] = verified
    claims["preferred_username"] = "bob"
    client = Client()
    sso_login(client, default_claim, "dana")
    assert logged_in_as(client).username == named


def test_an_operator_may_name_accounts_after_a_claim_their_provider_controls(default_claim, settings, org_tree):
    settings.FAIRWAY_OIDC_USERNAME_CLAIM = "preferred_username"
    add_person(default_claim, "erin", groups=[])
    client = Client()
    sso_login(client, default_claim, "erin")
    assert logged_in_as(client).username == "erin"


def test_the_settings_default_and_the_email_claim_needs_domains(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "sqlite:///:memory:")
    loaded = runpy.run_path(str(SETTINGS))
    assert loaded["FAIRWAY_OIDC_USERNAME_CLAIM"] == "sub" and loaded["FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS"] == []
    monkeypatch.setenv("FAIRWAY_OIDC_USERNAME_CLAIM", "email")
    with pytest.raises(ImproperlyConfigured, match="FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS"):
        runpy.run_path(str(SETTINGS))
    monkeypatch.setenv("FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS", "Lab.Example.org, cs.example.edu")
    assert runpy.run_path(str(SETTINGS))["FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS"] == [
        "lab.example.org",
        "cs.example.edu",
    ]
