"""Single sign-on through OpenID Connect (accounts/oidc.py) against the test provider: accounts
found by ``sub`` then by verified email, the group rule applied at every login (added and removed),
tokens checked (issuer, audience), personal API tokens of SSO users, and configuration errors."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from accounts.models import Membership, OidcIdentity, User
from accounts.oidc_rules import parse_group_rules
from accounts.services import do_add_membership, do_create_personal_token
from budgets.models import Budget
from tests.sso.conftest import add_person, sso_login
from tests.sso.provider import Provider

REPO = Path(__file__).resolve().parents[2]


def roles(user: User) -> dict[str, str]:
    return {m.budget.path: m.role for m in Membership.objects.filter(user=user).select_related("budget")}


def test_first_login_creates_the_account_with_the_rights_of_its_groups(sso: Provider, org_tree: dict[str, Budget]):
    add_person(sso, "nora", groups=["lab-nlp", "lab-nlp-leads", "lab-ops", "unrelated"])
    client = Client()
    done = sso_login(client, sso, "nora", next_url="/budgets/")
    assert done.status_code == 302 and done["Location"] == "/budgets/"
    assert client.get("/budgets/").status_code == 200
    nora = User.objects.get(username="nora")
    assert (nora.email, nora.first_name, nora.is_staff, nora.is_superuser) == (
        "nora@lab.example.org",
        "Nora",
        True,
        False,
    )
    assert not nora.has_usable_password()
    assert roles(nora) == {"nlp": "member", "nlp/olmo": "manager"}
    identity = OidcIdentity.objects.get(user=nora)
    assert (identity.issuer, identity.subject) == (sso.issuer, "sub-nora-0001")


def test_every_login_synchronises_memberships_and_staff_added_and_removed(sso: Provider, org_tree: dict[str, Budget]):
    add_person(sso, "nora", groups=["lab-nlp", "lab-root"])
    sso_login(Client(), sso, "nora")
    nora = User.objects.get(username="nora")
    do_add_membership(nora, org_tree["vision"])  # no rule names vision: the admin's, kept
    assert (nora.is_staff, nora.is_superuser) == (True, True)

    sso.users["nora"]["claims"]["groups"] = ["lab-nlp-leads"]  # left lab-nlp and lab-root
    sso_login(Client(), sso, "nora")
    nora.refresh_from_db()
    assert roles(nora) == {"nlp/olmo": "manager", "vision": "member"}
    assert (nora.is_staff, nora.is_superuser) == (False, False)
    assert User.objects.filter(username__startswith="nora").count() == 1  # found again by sub


def test_an_existing_local_account_is_linked_by_verified_email_and_keeps_password_and_tokens(
    sso: Provider, org_tree: dict[str, Budget]
):
    local = User.objects.create_user("rita", email="Rita@Lab.example.org", password="rita-local-password")
    _, token = do_create_personal_token(local, "laptop")
    add_person(sso, "rita.k", groups=["lab-nlp"], email="rita@lab.example.org")
    client = Client()
    assert sso_login(client, sso, "rita.k")["Location"] == "/"
    assert client.session["_auth_user_id"] == str(local.pk)
    assert OidcIdentity.objects.get(subject="sub-rita.k-0001").user == local
    assert roles(local) == {"nlp": "member"}
    # The same person's personal token and password keep working.
    api = Client(HTTP_AUTHORIZATION=f"Token {token}")
    assert api.get("/api/v1/budgets/").status_code == 200
    assert Client().login(username="rita", password="rita-local-password")


def test_an_unverified_email_links_nothing_and_a_taken_user_name_gets_a_suffix(sso: Provider, org_tree):
    local = User.objects.create_user("sam", email="sam@lab.example.org", password="x-local-password")
    add_person(sso, "sam", groups=[], verified=False)
    client = Client()
    assert sso_login(client, sso, "sam")["Location"] == "/"
    created = User.objects.get(pk=int(client.session["_auth_user_id"]))
    assert created != local and created.username == "sam-2"


def test_accounts_are_not_created_when_that_is_off(sso: Provider, settings: Any, org_tree):
    settings.FAIRWAY_OIDC_CREATE_USERS = False
    add_person(sso, "ghost", groups=["lab-nlp"])
    assert sso_login(Client(), sso, "ghost")["Location"] == "/login/?sso=failed"
    assert not User.objects.filter(username="ghost").exists()
    page = Client().get("/login/?sso=failed").content.decode()
    assert "Single sign-on did not log you in" in page


def test_a_token_of_another_issuer_or_a_disabled_account_logs_nobody_in(sso: Provider, settings: Any, org_tree):
    add_person(sso, "nora", groups=["lab-nlp"])
    sso_login(Client(), sso, "nora")
    User.objects.filter(username="nora").update(is_active=False)
    assert sso_login(Client(), sso, "nora")["Location"] == "/login/?sso=failed"
    User.objects.filter(username="nora").update(is_active=True)
    settings.FAIRWAY_OIDC_ISSUER = "https://idp.elsewhere.example"
    client = Client()
    assert sso_login(client, sso, "nora")["Location"] == "/login/?sso=failed"
    assert "_auth_user_id" not in client.session


def test_sso_is_off_without_a_client_id(db: None):
    assert Client().get("/oidc/authenticate/").status_code == 404
    assert 'id="sso-login"' not in Client().get("/login/").content.decode()


def test_the_login_page_offers_sso_next_to_the_password_form(sso: Provider):
    page = Client().get("/login/?next=/budgets/").content.decode()
    assert 'id="id_password"' in page and "Log in with Lab IdP" in page
    assert "/oidc/authenticate/?next=/budgets/" in page


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[]", "JSON object"),
        ("{nope", "is not JSON"),
        ('{"g": "staff"}', "list of strings"),
        ('{"g": ["admin"]}', "is not staff, superuser"),
        ('{"g": ["member:"]}', "member:<budget path>"),
    ],
)
def test_malformed_group_rules_are_refused_with_the_variable_name(raw: str, message: str):
    with pytest.raises(ValueError, match="FAIRWAY_OIDC_GROUP_RULES") as err:
        parse_group_rules(raw)
    assert message in str(err.value)


def test_group_rules_grant_the_strongest_role():
    rules = parse_group_rules('{"a": ["member:/nlp/"], "b": ["manager:nlp"], "c": ["superuser"]}')
    assert rules.rights(["a", "b"]) == ({"nlp": "manager"}, False, False)
    assert rules.rights(["a", "c"]) == ({"nlp": "member"}, True, True)
    assert rules.budgets == {"nlp"} and rules.manages_staff and rules.manages_superuser


def test_a_partial_oidc_configuration_stops_the_process_naming_what_is_missing(tmp_path: Path):
    env = {
        **os.environ,
        "FAIRWAY_VAR_DIR": str(tmp_path),
        "FAIRWAY_OIDC_CLIENT_ID": "x",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    env.pop("FAIRWAY_OIDC_ISSUER", None)
    run = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert run.returncode != 0
    assert "FAIRWAY_OIDC_CLIENT_ID is set: also set FAIRWAY_OIDC_AUTHORIZATION_ENDPOINT" in run.stderr
    assert "FAIRWAY_OIDC_ISSUER" in run.stderr


@pytest.mark.parametrize("said", ["false", "False", "FALSE"])
def test_an_email_the_provider_says_is_unverified_as_text_links_no_account(sso: Provider, org_tree, said: str):
    """break28: linking by email skips a provider that says ``email_verified: false``; one that says it as
    text (``"false"``: AWS Cognito's userinfo, others) was taken as verified, since only the JSON
    ``false`` was checked: anyone who could register that address at the provider without
    proving it got the local account (an admin's too)."""
    local = User.objects.create_user("sam", email="sam@lab.example.org", password="x-local-password")
    add_person(sso, "sam", groups=[], verified=said)
    client = Client()
    assert sso_login(client, sso, "sam")["Location"] == "/"
    assert User.objects.get(pk=int(client.session["_auth_user_id"])) != local


@pytest.mark.parametrize(
    ("said", "copied"),
    [(True, True), ("true", True), ("True", True), (False, False), ("false", False), ("FALSE", False), ("no", False)],
)
def test_only_a_verified_email_is_copied_onto_the_account(sso: Provider, org_tree, said, copied):
    """tryout28: the provider's email was copied onto the local account whether verified or not."""
    add_person(sso, "kim", groups=[], email="kim@lab.example.org", verified=said)
    client = Client()
    assert sso_login(client, sso, "kim")["Location"] == "/"
    user = User.objects.get(pk=int(client.session["_auth_user_id"]))
    assert user.email == ("kim@lab.example.org" if copied else "")  # a new account
    # A later login with another address: copied only when verified; else the account keeps its own.
    User.objects.filter(pk=user.pk).update(email="kim@old.example.org")
    sso.users["kim"]["claims"]["email"] = "kim@new.example.org"
    assert sso_login(Client(), sso, "kim")["Location"] == "/"
    user.refresh_from_db()
    assert user.email == ("kim@new.example.org" if copied else "kim@old.example.org")


def test_the_provider_vouches_for_an_email_when_it_says_so_or_for_a_trusted_domain(settings):
    """sso46: an email without ``email_verified`` was taken as vouched for (copied, and linked by)."""
    from accounts.oidc import verified_email

    settings.FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS = []
    assert verified_email({"email": " a@b.org ", "email_verified": " TRUE "}) == "a@b.org"
    assert verified_email({"email": " a@b.org "}) == ""  # not said: not vouched
    assert verified_email({"email": "a@b.org", "email_verified": None}) == ""
    assert verified_email({"email_verified": True}) == "" and verified_email({"email": 3}) == ""
    settings.FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS = ["b.org"]
    assert verified_email({"email": "a@B.org"}) == "a@B.org"  # the provider hands these out
    assert verified_email({"email": "a@b.org", "email_verified": None}) == "a@b.org"
    assert verified_email({"email": "a@b.org", "email_verified": "false"}) == ""  # said not: never
    assert verified_email({"email": "a@b.org", "email_verified": "no"}) == ""
    assert verified_email({"email": "a@x.b.org"}) == verified_email({"email": "a@b.org@c.org"}) == ""


def _without_email_verified(idp: Provider, name: str) -> None:
    del idp.users[name]["claims"]["email_verified"]


def test_an_email_the_provider_does_not_vouch_for_links_no_account(sso: Provider, org_tree):
    """sso46: a first login linked the local account of the same email unless the provider said
    ``email_verified: false``: one that sends no such claim (or a permissive one where people set
    their own address) handed anyone who put ``admin@…`` there the local account, an admin's too."""
    local = User.objects.create_user("alice", email="alice@lab.example.org", password="alice-local-password")
    add_person(sso, "mallory", groups=[], email="alice@lab.example.org")
    _without_email_verified(sso, "mallory")
    client = Client()
    assert sso_login(client, sso, "mallory")["Location"] == "/"
    created = User.objects.get(pk=int(client.session["_auth_user_id"]))
    assert created != local and created.email == ""  # a new account, the unvouched address not copied
    assert not OidcIdentity.objects.filter(user=local).exists()


@pytest.mark.parametrize("said", [True, "true", " TRUE "])
def test_an_email_the_provider_says_is_verified_links_the_account(sso: Provider, org_tree, said):
    local = User.objects.create_user("rita", email="rita@lab.example.org", password="rita-local-password")
    add_person(sso, "rita.k", groups=[], email="rita@lab.example.org", verified=said)
    client = Client()
    assert sso_login(client, sso, "rita.k")["Location"] == "/"
    assert client.session["_auth_user_id"] == str(local.pk)


@pytest.mark.parametrize(("email", "linked"), [("rita@LAB.example.org", True), ("rita@lab.example.org.evil", False)])
def test_without_the_claim_an_email_of_a_trusted_domain_links_the_account(
    sso: Provider, settings: Any, org_tree, email: str, linked: bool
):
    settings.FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS = ["lab.example.org"]
    local = User.objects.create_user("rita", email=email, password="rita-local-password")
    add_person(sso, "rita.k", groups=[], email=email)
    _without_email_verified(sso, "rita.k")
    client = Client()
    assert sso_login(client, sso, "rita.k")["Location"] == "/"
    assert (client.session["_auth_user_id"] == str(local.pk)) is linked
    # The provider saying no outweighs the domain.
    sso.users["rita.k"]["claims"].update(sub="sub-rita.k-0002", email_verified="false")
    other = Client()
    assert sso_login(other, sso, "rita.k")["Location"] == "/"
    assert other.session["_auth_user_id"] != str(local.pk)


@pytest.mark.parametrize("flag", ["is_staff", "is_superuser"])
def test_a_staff_account_is_not_linked_by_email_unless_the_operator_allows_it(
    sso: Provider, settings: Any, org_tree, flag: str
):
    """sso46: even a vouched-for email is one an IdP admin (or its self-service) can set: an email
    link to an account with the admin site's rights is refused unless
    ``FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL`` is on (the account logs in by password meanwhile)."""
    admin = User.objects.create_user("root", email="ops@lab.example.org", password="root-local-password")
    User.objects.filter(pk=admin.pk).update(**{flag: True})
    add_person(sso, "ops", groups=[], email="ops@lab.example.org")
    client = Client()
    assert sso_login(client, sso, "ops")["Location"] == "/login/?sso=failed"
    assert "_auth_user_id" not in client.session
    assert not OidcIdentity.objects.exists() and User.objects.count() == 1
    assert Client().login(username="root", password="root-local-password")
    settings.FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL = True
    assert sso_login(client, sso, "ops")["Location"] == "/"
    assert client.session["_auth_user_id"] == str(admin.pk)


@pytest.mark.parametrize("said", [False, "false"])
def test_an_unverified_email_does_not_name_a_new_account(sso: Provider, org_tree, said):
    """brk35: without ``preferred_username`` a new account was named after the email's local part
    whether the provider vouched for the email or not: anyone who could put ``alice@…`` on an
    account at the provider unproven got the Fairway account ``alice``, and on GPU hosts that map
    user names through NSS (docs/isolation.md) their workloads ran as the host's ``alice``. Only a
    verified email names an account, and only with ``FAIRWAY_OIDC_USERNAME_CLAIM=email`` in a listed
    domain (sec63); else ``sub``."""
    add_person(sso, "mallory", groups=[], email="alice@lab.example.org", verified=said)
    del sso.users["mallory"]["claims"]["preferred_username"]
    client = Client()
    assert sso_login(client, sso, "mallory")["Location"] == "/"
    user = User.objects.get(pk=int(client.session["_auth_user_id"]))
    assert user.username == "sub-mallory-0001"
    assert not User.objects.filter(username="alice").exists()


def test_a_verified_email_names_a_new_account_only_with_the_email_claim(sso: Provider, org_tree, settings):
    # sec63: a verified email of any domain named the account when no preferred_username came;
    # only FAIRWAY_OIDC_USERNAME_CLAIM=email does now, for the listed domains (test_sec63_username_claim)
    add_person(sso, "kim", groups=[], email="kim.l@lab.example.org")
    del sso.users["kim"]["claims"]["preferred_username"]
    client = Client()
    assert sso_login(client, sso, "kim")["Location"] == "/"
    assert User.objects.get(pk=int(client.session["_auth_user_id"])).username == "sub-kim-0001"
    settings.FAIRWAY_OIDC_USERNAME_CLAIM, settings.FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS = "email", ["lab.example.org"]
    settings.FAIRWAY_OIDC_LINK_BY_EMAIL = False
    add_person(sso, "kim2", groups=[], email="kim.m@lab.example.org")
    other = Client()
    sso_login(other, sso, "kim2")
    assert User.objects.get(pk=int(other.session["_auth_user_id"])).username == "kim.m"


def test_the_settings_of_email_trust_and_their_defaults(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "sqlite:///:memory:")
    loaded = runpy.run_path(str(REPO / "config" / "settings.py"))
    assert (loaded["FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS"], loaded["FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL"]) == ([], False)
    monkeypatch.setenv("FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS", " Lab.Example.org,,cs.example.edu ")
    monkeypatch.setenv("FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL", "true")
    loaded = runpy.run_path(str(REPO / "config" / "settings.py"))
    assert loaded["FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS"] == ["lab.example.org", "cs.example.edu"]
    assert loaded["FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL"] is True
