"""auth47: faults an attacker found as an ordinary researcher, through single sign-on. Each test
failed before its fix."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, urlparse

import pytest
import requests
from django.test import Client

from accounts.models import OidcIdentity, User
from budgets.models import Budget
from tests.sso.conftest import add_person, sso_login
from tests.sso.provider import Provider


def test_a_deactivated_sso_account_s_web_session_ends(sso: Provider, org_tree: dict[str, Budget]):
    """A session begun through single sign-on outlived the account's deactivation: the OIDC
    backend's ``get_user`` (mozilla-django-oidc's) returned an inactive user, so every page (the
    queue, a teammate's env and logs, submit, cancel) went on answering a person the admin had
    shut out, while a password login's session (Django's ``ModelBackend``) and the API's token
    and session ended at once. Now it ends too, as the password's does."""
    add_person(sso, "nora", groups=["lab-nlp"])
    client = Client()
    sso_login(client, sso, "nora")
    assert client.get("/workloads/").status_code == 200
    nora = User.objects.get(username="nora")
    nora.is_active = False
    nora.save(update_fields=["is_active"])
    answer = client.get("/workloads/")
    assert answer.status_code == 302 and answer["Location"].startswith("/login/"), answer
    assert client.get("/api/v1/me/").status_code in (401, 403)


def _code_of(client: Client, idp: Provider, name: str) -> dict[str, str]:
    """The callback's query (``code``, ``state``) the provider sends ``name``'s browser back with,
    taken before that browser's callback (a code read in a proxy's log or a browser's history)."""
    start = client.get("/oidc/authenticate/")
    params = dict(parse_qsl(urlparse(start["Location"]).query))
    person = idp.users[name]
    answer = requests.post(
        f"{idp.issuer}/authorize",
        data={**params, "username": name, "password": person["password"]},
        allow_redirects=False,
        timeout=10,
    )
    return dict(parse_qsl(urlparse(answer.headers["Location"]).query))


@pytest.mark.parametrize("where", ["/api/v1/auth/login/", "/login/", "/admin/login/"])
def test_a_password_login_redeems_no_authorization_code(sso: Provider, org_tree: dict[str, Budget], where: str):
    """The OIDC backend, first of the backends, redeemed the ``code`` and ``state`` of any
    request's query that asked ``authenticate()``: a password login (the API's, the page's, the
    admin's) at ``?code=…&state=…`` logged its sender in as the person of a code taken from
    someone else, without the callback's checks (the state kept in the browser's session, the
    nonce, the PKCE verifier: a provider that lets a confidential client leave PKCE out took it),
    and the API answered a token. Only the callback's own call (with its nonce and verifier)
    redeems a code now; a password login is judged by its user name and password alone. (Here the
    ID token's nonce, which the login could not give, refused the person; the code was spent, and
    her own callback failed.)"""
    sso.pkce_optional = True
    add_person(sso, "nora", groups=["lab-nlp"])
    sso_login(Client(), sso, "nora")  # her account exists
    taken = _code_of(Client(), sso, "nora")
    User.objects.create_user("mallory", password="mallory-password")
    body = {"username": "mallory", "password": "not-her-password"}
    attacker = Client()
    api = where.startswith("/api/")

    def post(query: str) -> Any:
        if api:
            return attacker.post(where + query, body, content_type="application/json")
        return attacker.post(where + query, body)

    answer = post(f"?code={taken['code']}&state={taken['state']}")
    if api:
        assert answer.status_code == 400 and answer.json()["code"] == "invalid_credentials", answer.content
    else:
        assert answer.status_code == 200, answer  # the form again, with its error
    assert "_auth_user_id" not in attacker.session
    assert taken["code"] in sso.codes  # not redeemed: still the provider's, for nora's own callback
    # a code the provider refuses made each of them a 500 (the token endpoint's 400 raised)
    assert post("?code=bogus&state=x").status_code == answer.status_code


def test_an_account_linked_to_a_subject_is_not_linked_to_another_by_email(sso: Provider, org_tree: dict[str, Budget]):
    """Linking by email moves a local account to SSO (docs/deploy.md, "Who is who"); an account
    already linked to a subject of the provider was linked again, by email, to any other subject
    the provider put its address on (its admins' or its self-service's word, which keeps staff
    accounts out of linking): that subject logged in as the person, their work, logs and env
    values. Refused now, as a staff account's link is; the person's own subject logs in as before."""
    add_person(sso, "nora", groups=["lab-nlp"])
    sso_login(Client(), sso, "nora")
    nora = User.objects.get(username="nora")
    add_person(sso, "intruder", groups=[], email="Nora@lab.example.org")
    client = Client()
    assert sso_login(client, sso, "intruder")["Location"] == "/login/?sso=failed"
    assert "_auth_user_id" not in client.session
    assert list(OidcIdentity.objects.filter(user=nora).values_list("subject", flat=True)) == ["sub-nora-0001"]
    assert not User.objects.filter(username__startswith="intruder").exists()
    again = Client()
    assert sso_login(again, sso, "nora")["Location"] == "/"
    assert again.session["_auth_user_id"] == str(nora.pk)
