"""Fixtures of the single sign-on tests: the test OpenID provider and Fairway configured for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlparse

import pytest
import requests

from accounts.oidc_rules import parse_group_rules
from tests.sso.provider import Provider

RULES = (
    '{"lab-nlp": ["member:nlp"], "lab-nlp-leads": ["manager:nlp/olmo"],'
    ' "lab-ops": ["staff"], "lab-root": ["superuser"]}'
)


@pytest.fixture(scope="session")
def idp() -> Iterator[Provider]:
    provider = Provider().start()
    yield provider
    provider.stop()


@pytest.fixture
def sso(idp: Provider, settings: Any) -> Provider:
    """Fairway's settings as config/settings.py makes them from the FAIRWAY_OIDC_* environment."""
    env = idp.settings()
    settings.OIDC_ENABLED = True
    settings.FAIRWAY_OIDC_ISSUER = env["FAIRWAY_OIDC_ISSUER"]
    settings.FAIRWAY_OIDC_PROVIDER_NAME = "Lab IdP"
    settings.FAIRWAY_OIDC_GROUP_RULES = parse_group_rules(RULES)
    # The test provider's user names are its admin's (no one chooses one): new accounts named after
    # them, as a lab whose provider works so would set it (the default is sub: test_sec63_username_claim)
    settings.FAIRWAY_OIDC_USERNAME_CLAIM = "preferred_username"
    settings.OIDC_RP_CLIENT_ID = env["FAIRWAY_OIDC_CLIENT_ID"]
    settings.OIDC_RP_CLIENT_SECRET = env["FAIRWAY_OIDC_CLIENT_SECRET"]
    settings.OIDC_OP_AUTHORIZATION_ENDPOINT = env["FAIRWAY_OIDC_AUTHORIZATION_ENDPOINT"]
    settings.OIDC_OP_TOKEN_ENDPOINT = env["FAIRWAY_OIDC_TOKEN_ENDPOINT"]
    settings.OIDC_OP_USER_ENDPOINT = env["FAIRWAY_OIDC_USERINFO_ENDPOINT"]
    settings.OIDC_OP_JWKS_ENDPOINT = env["FAIRWAY_OIDC_JWKS_ENDPOINT"]
    settings.OIDC_RP_SCOPES = "openid email profile"
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    settings.OIDC_USE_PKCE = True
    settings.OIDC_TIMEOUT = 10
    settings.LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
    settings.AUTHENTICATION_BACKENDS = ["accounts.oidc.FairwayOIDCBackend", "django.contrib.auth.backends.ModelBackend"]
    idp.users.clear()
    idp.pkce_optional = False
    return idp


def add_person(
    idp: Provider, name: str, *, groups: list[str], email: str | None = None, verified: bool | str = True
) -> None:
    idp.users[name] = {
        "password": f"{name}-idp-password",
        "claims": {
            "sub": f"sub-{name}-0001",
            "preferred_username": name,
            "email": email or f"{name}@lab.example.org",
            "email_verified": verified,
            "given_name": name.title(),
            "family_name": "Tester",
            "groups": groups,
        },
    }


def sso_login(client: Any, idp: Provider, name: str, next_url: str = "/") -> Any:
    """The authorization code flow as a browser runs it: Fairway → the IdP's form → back. Returns
    the answer of Fairway's callback (a redirect to ``next_url``, or to the failure page)."""
    start = client.get("/oidc/authenticate/", {"next": next_url})
    assert start.status_code == 302 and start["Location"].startswith(f"{idp.issuer}/authorize?"), start
    params = dict(parse_qsl(urlparse(start["Location"]).query))
    person = idp.users[name]
    answer = requests.post(
        f"{idp.issuer}/authorize",
        data={**params, "username": name, "password": person["password"]},
        allow_redirects=False,
        timeout=10,
    )
    assert answer.status_code == 302, answer.text
    back = urlparse(answer.headers["Location"])
    return client.get(back.path, dict(parse_qsl(back.query)))
