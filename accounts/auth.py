"""API token authentication: knox's, without its per-request sweep of the user's other tokens.

``knox.auth.TokenAuthentication`` loads every token of the user on every request to delete the
expired ones (one query per request, growing with the user's token count). Here a request checks
only the token it presents: an expired token is deleted when presented and refused (401, code
``token_expired``, :data:`TOKEN_EXPIRED_TEXT`), as in knox; the user's other expired tokens are
refused the same way whenever they are used, and are swept by ``sweep_expired_tokens`` where
tokens are listed (API and web page) and hourly by the clock, so what knox's sweep was for still
holds while a request costs one query.

**Kept per process** (issue 15): that query, the token row with its user, was ~1 ms of CPU of a
7–12 ms request. A web process keeps the rows it read by ``token_key`` under a version
(:data:`TOKENS`, a :class:`config.memo.VersionedMemo`, read with the request's other memos'
versions in one cache round trip), and every write of a token or a user forgets the version
(``accounts.apps``: ``AuthToken``'s and ``User``'s save and delete signals; a user's deletion
cascades through the tokens' signals). Knox's checks run on every request as before, on copies of
the kept rows: the expiry against the request's instant (an expired token is deleted and refused),
the digest, ``is_active``. So a logout, a revoked or swept token, a deactivated or deleted user are
refused at the next request of every process. Only tokens that were found are kept (a guess costs a
query each time, as before), and a version's rows go with it. Bulk writes of users (``update``,
``bulk_update``, ``bulk_create``, ``delete``) forget the version too (``accounts.models.UserQuerySet``,
a ``config.memo.ForgettingQuerySet``), and so do bulk writes of tokens through
``AuthToken.objects`` or ``user.auth_token_set`` (``accounts.models.TokenQuerySet``, given to
knox's manager at ``ready()``: knox's model is third-party, and a manager of our own on it would
need a swapped token model). A token's bulk ``delete()`` also sends its rows' signals (a
``post_delete`` receiver turns Django's fast delete off). Left: raw SQL on tokens and writes
through ``AuthToken._base_manager``, which nothing in Fairway does: after such a write call
:func:`forget_tokens`.
:func:`token_rows` is the plain query and the oracle (``tests/api/test_web_tier.py``).
"""

from __future__ import annotations

import binascii
import copy
from hmac import compare_digest
from typing import Any

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from knox.models import AuthToken
from knox.settings import CONSTANTS, knox_settings
from knox.signals import token_expired
from rest_framework import exceptions

from config.memo import VersionedMemo

TOKENS = VersionedMemo("fairway:api-token-version", per_request=True)
TOKEN_EXPIRED = "token_expired"  # noqa: S105 -- an error code, not a secret
TOKEN_EXPIRED_TEXT = "This token has expired: run `fairway login` again (or make a new token on the tokens page)."  # noqa: S105
"""The 401 of a token presented past its expiry (then deleted); the CLI prints it as it comes."""
MAX_KEPT_TOKENS = 10_000
"""More token keys than this in one version: start again (a bound, not a working size)."""


def token_rows(token_key: str) -> list[AuthToken]:
    """The tokens whose ``token_key`` is ``token_key``, each with its user: knox's query."""
    return list(AuthToken.objects.filter(token_key=token_key).select_related("user"))


def kept_token_rows(token_key: str, request: Any = None) -> list[AuthToken]:
    """:func:`token_rows`, kept by this process under :data:`TOKENS`' version when any was found
    (``request``: the version read with the request's other memos', ``config.memo.request_tokens``).
    Shared by the process's requests: read them, never change them (copy first)."""
    kept: dict[str, list[AuthToken]] = TOKENS.get("rows", dict, TOKENS.token(request))  # one dict per version
    rows = kept.get(token_key)
    if rows is None:
        rows = token_rows(token_key)
        if rows:
            if len(kept) >= MAX_KEPT_TOKENS:
                kept.clear()
            kept[token_key] = rows
    return rows


def forget_tokens() -> None:
    """A token or a user changed: every process reads the token rows again."""
    TOKENS.forget()


class FairwayTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <token>``: one indexed query (token row joined with its user), none
    while the process keeps the rows (:func:`kept_token_rows`)."""

    def authenticate(self, request: Any) -> tuple[Any, AuthToken] | None:
        self._request = request  # authenticate_credentials reads the memos' versions from it
        try:
            return super().authenticate(request)
        finally:
            self._request = None

    def authenticate_credentials(self, token: bytes) -> tuple[Any, AuthToken]:
        """knox's ``authenticate_credentials`` over the kept rows: the same loop and the same
        checks (``_cleanup_token``, the digest, ``renew_token``, ``validate_user``), each on a copy
        of a kept row with a copy of its user (the request may change or delete them)."""
        msg = _("Invalid token.")
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:  # a header byte that is no UTF-8 (0xE9): knox's 500 (brk50)
            raise exceptions.AuthenticationFailed(msg) from None
        expired = False
        for kept in kept_token_rows(text[: CONSTANTS.TOKEN_KEY_LENGTH], getattr(self, "_request", None)):
            auth_token = copy.copy(kept)
            auth_token.user = copy.copy(kept.user)
            try:
                digest = hash_token(text)
            except (TypeError, binascii.Error):
                raise exceptions.AuthenticationFailed(msg) from None
            matches = compare_digest(digest, auth_token.digest)
            if self._cleanup_token(auth_token):
                expired = expired or matches
                continue
            if matches:
                if knox_settings.AUTO_REFRESH and auth_token.expiry:
                    self.renew_token(auth_token)
                return self.validate_user(auth_token)
        if expired:  # this token, not a guess: say so, in words the CLI prints (tok46)
            raise exceptions.AuthenticationFailed(TOKEN_EXPIRED_TEXT, code=TOKEN_EXPIRED)
        raise exceptions.AuthenticationFailed(msg)

    def _cleanup_token(self, auth_token: AuthToken) -> bool:
        if auth_token.expiry is not None and auth_token.expiry < timezone.now():
            username = auth_token.user.get_username()
            auth_token.delete()
            token_expired.send(sender=self.__class__, username=username, source="auth_token")
            return True
        return False


def sweep_expired_tokens(user: object = None) -> int:
    """Delete ``user``'s expired API tokens (None: everybody's, the clock's hourly prune:
    ``scheduler.tasks.prune_expired_tokens``); returns how many (knox's per-request sweep, done
    where the tokens are listed and by the clock, so that a token never presented again goes too)."""
    tokens = AuthToken.objects.filter(expiry__lt=timezone.now())
    deleted, _ = (tokens if user is None else tokens.filter(user=user)).delete()
    return deleted


def _register_schema_extension() -> None:
    """The OpenAPI schema describes this class as drf-spectacular's knox extension does knox's
    (the same ``knoxApiToken`` security scheme: same header, same prefix)."""
    from drf_spectacular.contrib.knox_auth_token import KnoxTokenScheme

    class FairwayTokenScheme(KnoxTokenScheme):
        target_class = "accounts.auth.FairwayTokenAuthentication"


_register_schema_extension()
