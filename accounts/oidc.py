"""OpenID Connect single sign-on (mozilla-django-oidc), next to local accounts.

On only when ``FAIRWAY_OIDC_CLIENT_ID`` is set (config/settings.py). The library runs the
authorization code flow (state, nonce, PKCE, the ID token's signature against the provider's
JWKS); this backend adds what Fairway decides (docs/deploy.md, "Single sign-on"):

- the ID token's ``iss`` must be ``FAIRWAY_OIDC_ISSUER`` and its ``aud`` must name our client;
  the userinfo answer must be about the same ``sub``;
- who the person is: the account linked to (issuer, ``sub``) (``OidcIdentity``); else, the first
  time, the one local account with the same email if the provider vouches for it
  (:func:`verified_email`; ``FAIRWAY_OIDC_LINK_BY_EMAIL``, default on) and it is not staff
  (``FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL``, default off: refused) nor linked to another subject of the
  provider already (refused) — that account keeps its password
  and tokens; else a new account with an unusable password (``FAIRWAY_OIDC_CREATE_USERS``, default
  on), named after ``FAIRWAY_OIDC_USERNAME_CLAIM`` (default ``sub``: :func:`new_username`);
- the account's email follows the provider's only when it vouches for it (:func:`verified_email`);
- what the person may do: the groups claim through ``FAIRWAY_OIDC_GROUP_RULES``, synchronised at
  every login, added and removed (``sync_rights``).
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.db import connection, transaction
from django.http import Http404, HttpRequest, HttpResponseBase
from django.urls import URLPattern, path
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from accounts.models import Membership, OidcIdentity, User
from accounts.oidc_rules import ROLES, GroupRules
from accounts.services import do_add_membership
from budgets.services import load_tree, resolve_budget

log = logging.getLogger("fairway.oidc")

_USERNAME_BAD = re.compile(r"[^\w.@+-]")


def claimed_groups(claims: dict[str, Any]) -> list[str]:
    """The groups claim (``FAIRWAY_OIDC_GROUPS_CLAIM``) as a list of names; a string is one group."""
    value = claims.get(settings.FAIRWAY_OIDC_GROUPS_CLAIM, [])
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [g for g in value if isinstance(g, str)]
    return []


def sync_rights(user: User, groups: list[str], rules: GroupRules) -> dict[str, Any]:
    """Make ``user``'s rights what ``rules`` grant ``groups``, for what the rules mention only.

    A membership of a budget that some rule names is added, changed or removed to match the
    groups; memberships of other budgets are the admin's and stay. ``is_staff`` follows the groups
    when some rule grants ``staff`` or ``superuser``, ``is_superuser`` when some rule grants
    ``superuser``. A budget path no budget has is logged and skipped. Returns what changed.
    """
    roles, staff, superuser = rules.rights(groups)
    tree = load_tree()
    changes: dict[str, Any] = {"added": [], "removed": [], "unknown_budgets": []}
    # By budget, not by spelling: "nlp", "org/nlp" and its id name one budget, and synchronising
    # each spelling alone left whichever sorted last (a lead ended a member, or with nothing).
    managed: dict[int, Any] = {}
    wanted: dict[int, str] = {}
    for budget_path in sorted(rules.budgets):
        budget = resolve_budget(budget_path, tree)
        if budget is None or budget.archived:
            changes["unknown_budgets"].append(budget_path)
            continue
        managed[budget.pk] = budget
        role = roles.get(budget_path)
        if role is not None and ROLES.index(role) >= ROLES.index(wanted.get(budget.pk, ROLES[0])):
            wanted[budget.pk] = role
    for pk, budget in sorted(managed.items(), key=lambda item: item[1].path):
        if pk in wanted:
            do_add_membership(user, budget, wanted[pk])
            changes["added"].append(f"{wanted[pk]}:{budget.path}")
        elif Membership.objects.filter(user=user, budget_id=pk).delete()[0]:
            changes["removed"].append(budget.path)
    if changes["unknown_budgets"]:
        log.warning("FAIRWAY_OIDC_GROUP_RULES names unknown budgets: %s", ", ".join(changes["unknown_budgets"]))
    fields = []
    if rules.manages_staff and user.is_staff != staff:
        user.is_staff = staff
        fields.append("is_staff")
    if rules.manages_superuser and user.is_superuser != superuser:
        user.is_superuser = superuser
        fields.append("is_superuser")
    if fields:
        user.save(update_fields=fields)
    changes["flags"] = fields
    return changes


FIRST_LOGIN_LOCK_CLASS = 0x4657534F
"""First key of the advisory lock that one first login at a time holds ("FWSO")."""


def _one_first_login_at_a_time() -> None:
    """Inside the login's transaction: wait for any other first login (account creation or link by
    email) to commit, so its identity is seen and a user name it took is skipped. PostgreSQL only:
    SQLite has one writer at a time."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, 0)", [FIRST_LOGIN_LOCK_CLASS])


def new_username(claims: dict[str, Any]) -> str:
    """What a new account is named after (sec63): the claim ``FAIRWAY_OIDC_USERNAME_CLAIM``, by
    default ``sub``, the provider's own identifier of the person, which nobody chooses there.

    GPU hosts map user names to Unix users (docs/isolation.md, way 2): named after
    ``preferred_username``, which many providers let people choose, anyone could take ``bob``
    (a Unix user without a Fairway account yet) and run workloads as the host's ``bob``. With
    ``email``: the local part of an email the provider vouches for (:func:`verified_email`)
    whose domain is one of ``FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS``, the lab's own, where the lab
    hands out the addresses. Any other claim is taken as the provider sends it: the operator's
    word that people cannot choose it. A claim that does not qualify: ``sub``."""
    claim = settings.FAIRWAY_OIDC_USERNAME_CLAIM
    if claim == "email":
        email = verified_email(claims)
        if email.count("@") == 1:
            local, domain = email.split("@")
            if local and domain.lower() in settings.FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS:
                return local
    elif claim != "sub" and isinstance(claims.get(claim), str) and claims[claim].strip():
        return str(claims[claim]).strip()
    if claim != "sub":
        log.info("OIDC claim %s does not name the new account of subject %s: named after sub", claim, claims["sub"])
    return str(claims["sub"])


def _unique_username(claims: dict[str, Any]) -> str:
    """A new account's name: :func:`new_username`, ``-2``, ``-3``, … when taken (never an existing
    account: a first login that names ``alice`` when ``alice`` exists gets ``alice-2``)."""
    base = _USERNAME_BAD.sub("-", new_username(claims))[:140] or "user"
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def verified_email(claims: dict[str, Any]) -> str:
    """The claims' email when the provider vouches for it, else "": the one statement of it, read
    by linking by email, by the email copied onto an account and by :func:`new_username`.

    Vouched: ``email_verified`` true, or ``"true"`` as text (AWS Cognito's userinfo and others
    send the claim as a string: break28); or, when the provider says nothing (no claim, or
    ``null``), an address whose domain is exactly one of ``FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS``,
    the operator's word that the provider hands out those addresses and people cannot set them
    (Entra ID sends no such claim by default). Anything else, ``false``, ``"no"`` or no
    claim for another domain, is not (sso46: a missing claim was taken as vouched for, and a first
    login linked the local account, an admin's too, of whoever could put its address at the
    provider; tryout28: an unverified email was copied, and notifications went to an address
    nobody proved)."""
    email = claims.get("email")
    if not isinstance(email, str) or not email.strip():
        return ""
    email = email.strip()
    if len(email) > User._meta.get_field("email").max_length:  # no account holds it (a 500 on PostgreSQL: brk47)
        return ""
    value = claims.get("email_verified")
    if value is True or (isinstance(value, str) and value.strip().lower() == "true"):
        return email
    trusted = settings.FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS
    domain = email.split("@")[1].lower() if email.count("@") == 1 else None
    return email if value is None and domain in trusted else ""


class FairwayOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with Fairway's matching of accounts and its group rule."""

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        if "nonce" not in kwargs:
            # Not the callback's call (it gives the nonce and the PKCE verifier kept in the session
            # under the state): a password login's (the API's, the page's, the admin's), whose URL
            # may carry ?code=&state=. auth47: the library redeemed that code without the state,
            # nonce or verifier of the browser it was issued to (a 500 when the provider refused it).
            return None
        try:
            return super().authenticate(request, **kwargs)
        except SuspiciousOperation as exc:  # a bad token: nobody is logged in, the page says so
            log.warning("OIDC login refused: %s", exc)
            return None

    def get_user(self, user_id: Any) -> User | None:
        """The session's user, as Django's ``ModelBackend`` reads it: none once deactivated
        (``user_can_authenticate``; auth47: the library's ``get_user`` returned an inactive
        account, so a session begun through SSO outlived the deactivation on every page)."""
        user = super().get_user(user_id)
        return user if user is not None and ModelBackend().user_can_authenticate(user) else None

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        issuer = settings.FAIRWAY_OIDC_ISSUER
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation(f"OIDC token issuer {payload.get('iss')!r} is not {issuer!r}")
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if "aud" in payload and self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("OIDC token is not for this client (aud)")
        return payload

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        """A ``sub`` an identity row holds (OpenID Connect Core: at most 255 characters): a longer
        one failed the first login's insert on PostgreSQL, a 500 at the callback (brk47)."""
        sub = claims.get("sub")
        return bool(sub) and len(str(sub)) <= OidcIdentity._meta.get_field("subject").max_length

    def get_or_create_user(self, access_token: str, id_token: str, payload: dict[str, Any]) -> User | None:
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if not self.verify_claims(userinfo) or userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("OIDC userinfo is not about the ID token's subject")
        claims = {**payload, **userinfo}  # groups may come in either
        issuer = settings.FAIRWAY_OIDC_ISSUER or str(payload.get("iss", ""))
        with transaction.atomic():
            user = self._match(issuer, claims)
            if user is None or not user.is_active:
                return None
            self._update_profile(user, claims)
            changes = sync_rights(user, claimed_groups(claims), settings.FAIRWAY_OIDC_GROUP_RULES)
            OidcIdentity.objects.filter(user=user, issuer=issuer, subject=claims["sub"]).update(
                last_login_at=timezone.now()
            )
        log.info("OIDC login of %s (sub %s): %s", user.username, claims["sub"], changes)
        return user

    def _match(self, issuer: str, claims: dict[str, Any]) -> User | None:
        identity = OidcIdentity.objects.select_related("user").filter(issuer=issuer, subject=claims["sub"]).first()
        if identity is not None:
            return identity.user
        # A first login: one at a time, the subject looked up again under the lock (brk38: two at
        # once of one person both created an account and the second's insert failed, a 500).
        _one_first_login_at_a_time()
        identity = OidcIdentity.objects.select_related("user").filter(issuer=issuer, subject=claims["sub"]).first()
        if identity is not None:
            return identity.user
        email = verified_email(claims)
        if email and settings.FAIRWAY_OIDC_LINK_BY_EMAIL:
            same = list(User.objects.filter(email__iexact=email)[:2])
            if len(same) > 1:
                log.warning("OIDC login refused: several local accounts have the email %s", email)
                return None
            if same and (same[0].is_staff or same[0].is_superuser) and not settings.FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL:
                log.warning(
                    "OIDC login refused: subject %s has the email of the staff account %s, which is linked"
                    " by email only with FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL on",
                    claims["sub"],
                    same[0].username,
                )
                return None
            if same and OidcIdentity.objects.filter(user=same[0], issuer=issuer).exists():
                # auth47: moved to SSO already, by its own subject; another the provider put the
                # address on (its word, as for staff) got the person's account, work and secrets
                log.warning(
                    "OIDC login refused: subject %s has the email of %s, which is linked to another subject"
                    " of this provider (deleting that identity in the Users admin lets this one link)",
                    claims["sub"],
                    same[0].username,
                )
                return None
            if same:
                OidcIdentity.objects.create(user=same[0], issuer=issuer, subject=claims["sub"])
                log.info("OIDC subject %s linked to the local account %s by email", claims["sub"], same[0].username)
                return same[0]
        if not settings.FAIRWAY_OIDC_CREATE_USERS:
            log.info(
                "OIDC login refused: no account for subject %s and FAIRWAY_OIDC_CREATE_USERS is off", claims["sub"]
            )
            return None
        user = User.objects.create_user(_unique_username(claims), email=verified_email(claims))  # unusable password
        OidcIdentity.objects.create(user=user, issuer=issuer, subject=claims["sub"])
        return user

    @staticmethod
    def _update_profile(user: User, claims: dict[str, Any]) -> None:
        wanted = {
            "email": verified_email(claims),  # an unverified one keeps the account's own
            "first_name": claims.get("given_name"),
            "last_name": claims.get("family_name"),
        }
        # names cut to their columns; an email is whole or none (verified_email): cut, another address
        cut = {f: v[: User._meta.get_field(f).max_length] for f, v in wanted.items() if isinstance(v, str) and v}
        fields = [f for f, v in cut.items() if getattr(user, f) != v]
        for f in fields:
            setattr(user, f, cut[f])
        if fields:
            user.save(update_fields=fields)


def _when_enabled(view: Any) -> Any:
    def sso_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if not settings.OIDC_ENABLED:
            raise Http404("single sign-on is not configured")
        return view(request, *args, **kwargs)

    return sso_view


# The library's two views (its logout view is not used: logging out ends the Fairway session only).
sso_urls: list[URLPattern] = [
    path("authenticate/", _when_enabled(OIDCAuthenticationRequestView.as_view()), name="oidc_authentication_init"),
    path("callback/", _when_enabled(OIDCAuthenticationCallbackView.as_view()), name="oidc_authentication_callback"),
]
