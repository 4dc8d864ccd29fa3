"""API token authentication: knox's, without its per-request sweep of the user's other tokens.

``knox.auth.TokenAuthentication`` loads every token of the user on every request to delete the
expired ones (one query per request, growing with the user's token count). Here a request checks
only the token it presents: an expired token is deleted when presented and refused (401), as in
knox; the user's other expired tokens are refused the same way whenever they are used, and are
swept by ``sweep_expired_tokens`` where tokens are listed (API and web page), so what knox's sweep
was for still holds while a request costs one query.
"""

from __future__ import annotations

from django.utils import timezone
from knox.auth import TokenAuthentication
from knox.models import AuthToken
from knox.signals import token_expired


class FairwayTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <token>``: one indexed query (token row joined with its user)."""

    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            username = auth_token.user.get_username()
            auth_token.delete()
            token_expired.send(sender=self.__class__, username=username, source="auth_token")
            return True
        return False


def sweep_expired_tokens(user: object) -> int:
    """Delete ``user``'s expired API tokens; returns how many (knox's per-request sweep, done where
    the tokens are listed)."""
    deleted, _ = AuthToken.objects.filter(user=user, expiry__lt=timezone.now()).delete()
    return deleted


def _register_schema_extension() -> None:
    """The OpenAPI schema describes this class as drf-spectacular's knox extension does knox's
    (the same ``knoxApiToken`` security scheme: same header, same prefix)."""
    from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme

    class FairwayTokenScheme(KnoxTokenScheme):
        target_class = "accounts.auth.FairwayTokenAuthentication"


_register_schema_extension()
