"""flood51: ``FAIRWAY_OIDC_SCOPES`` without ``openid`` is refused at start, naming the variable.

Taken before: the provider answered an OAuth 2.0 authorization without an ID token (OpenID Connect
is asked for by the ``openid`` scope), and every SSO login failed at the callback."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.breaker.test_break26 import load_settings
from tests.breaker.test_brk51_settings import _sso_env


@pytest.mark.parametrize("scopes", ["email profile", "  ", "openid-connect email", "OpenID email", "openid,email"])
def test_sso_scopes_without_openid_are_refused_by_name(monkeypatch: pytest.MonkeyPatch, scopes: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_OIDC_SCOPES=.* must include openid"):
        load_settings(monkeypatch, **_sso_env(FAIRWAY_OIDC_SCOPES=scopes))


@pytest.mark.parametrize("scopes", ["openid", "openid email profile", "email openid groups", " openid  email "])
def test_sso_scopes_with_openid_are_taken(monkeypatch: pytest.MonkeyPatch, scopes: str) -> None:
    assert load_settings(monkeypatch, **_sso_env(FAIRWAY_OIDC_SCOPES=scopes))["OIDC_RP_SCOPES"] == scopes
