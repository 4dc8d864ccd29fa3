"""API token authentication: knox's, without its per-request sweep of the user's other tokens.

``knox.auth.TokenAuthentication`` loads every token of the user on every request to delete the
expired ones (one query per request, growing with the user's token count). Here a request checks
only the token it presents: an expired token is deleted when presented and refused (401), as in
knox; the user's other expired tokens are refused the same way whenever they are used, and are
swept by ``sweep_expired_tokens`` where tokens are listed (API and web page), so what knox's sweep
was for still holds while a request costs one query.

That one query (the token row joined with its user) is compiled once per process and database
(:func:`tokens_with_user`): Django builds and compiles a ``select_related`` query anew for each
request (~0.45 ms of CPU of its ~0.5 ms, against ~0.05 ms for the round trip itself), and this
query is the same for every request but for the token's key. The SQL and the columns come from
the ORM's own compiler of ``AuthToken.objects.filter(token_key=…).select_related("user")``, the
rows are turned into models with the backend's and the fields' converters, as Django does; the
ORM queryset stays the oracle (``tests/api/test_web_tier.py``).
"""

from __future__ import annotations

import binascii
import threading
from hmac import compare_digest
from typing import Any

from django.db import connections, router
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from knox.models import AuthToken
from knox.settings import CONSTANTS, knox_settings
from knox.signals import token_expired
from rest_framework import exceptions

_plans: dict[str, tuple[str, list[Any], int]] = {}  # alias → (SQL, select expressions, token columns)
_plans_lock = threading.Lock()


def _plan(connection: Any) -> tuple[str, list[Any], int]:
    """The compiled SQL of the token-with-user query for ``connection``'s database, its select
    expressions (for the converters) and how many columns are the token's."""
    plan = _plans.get(connection.alias)
    if plan is None:
        marker = "token-key-parameter"
        queryset = AuthToken.objects.filter(token_key=marker).select_related("user")
        compiler = queryset.query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        if list(params) != [marker]:  # the key is the query's only parameter
            raise RuntimeError(f"unexpected parameters of the token query: {params!r}")
        token_columns = len(compiler.klass_info["select_fields"])
        [user_info] = compiler.klass_info["related_klass_infos"]
        if compiler.klass_info["select_fields"] != list(range(token_columns)) or user_info["select_fields"] != list(
            range(token_columns, len(compiler.select))
        ):
            raise RuntimeError("the token query's columns are not the token's then the user's")
        plan = (sql, [expression for expression, _sql, _alias in compiler.select], token_columns)
        with _plans_lock:
            _plans[connection.alias] = plan
    return plan


def tokens_with_user(key: str) -> list[AuthToken]:
    """``AuthToken.objects.filter(token_key=key).select_related("user")``, run from SQL compiled
    once per process (see the module docstring): the tokens with their users attached."""
    from accounts.models import User

    db = router.db_for_read(AuthToken)
    connection = connections[db]
    sql, expressions, token_columns = _plan(connection)
    with connection.cursor() as cursor:
        cursor.execute(sql, [key])
        rows = cursor.fetchall()
    converters = [
        (i, connection.ops.get_db_converters(expression) + expression.get_db_converters(connection), expression)
        for i, expression in enumerate(expressions)
    ]
    converters = [(i, convs, expression) for i, convs, expression in converters if convs]
    token_names = [f.attname for f in AuthToken._meta.concrete_fields]
    user_names = [f.attname for f in User._meta.concrete_fields]
    tokens = []
    for raw in rows:
        row = list(raw)
        for i, convs, expression in converters:
            for converter in convs:
                row[i] = converter(row[i], expression, connection)
        token = AuthToken.from_db(db, token_names, row[:token_columns])
        user = User.from_db(db, user_names, row[token_columns:])
        AuthToken._meta.get_field("user").set_cached_value(token, user)
        tokens.append(token)
    return tokens


class FairwayTokenAuthentication(TokenAuthentication):
    """``Authorization: Token <token>``: one indexed query (token row joined with its user)."""

    def authenticate_credentials(self, token: bytes) -> tuple[Any, AuthToken]:
        """knox's, over :func:`tokens_with_user` instead of the ORM queryset."""
        msg = _("Invalid token.")
        text = token.decode("utf-8")
        for auth_token in tokens_with_user(text[: CONSTANTS.TOKEN_KEY_LENGTH]):
            if self._cleanup_token(auth_token):
                continue
            try:
                digest = hash_token(text)
            except (TypeError, binascii.Error):
                raise exceptions.AuthenticationFailed(msg) from None
            if compare_digest(digest, auth_token.digest):
                if knox_settings.AUTO_REFRESH and auth_token.expiry:
                    self.renew_token(auth_token)
                return self.validate_user(auth_token)  # type: ignore[no-any-return]
        raise exceptions.AuthenticationFailed(msg)

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
