"""Accounts API: log in for a knox token, log out, who am I, personal API tokens."""

from __future__ import annotations

import copy
import hashlib

from django.contrib.auth import authenticate, logout
from drf_spectacular.utils import extend_schema, inline_serializer
from knox.models import AuthToken
from rest_framework import mixins, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import SimpleRateThrottle

from accounts.api.serializers import (
    LoginSerializer,
    MeSerializer,
    TokenCreatedSerializer,
    TokenCreateSerializer,
    TokenSerializer,
)
from accounts.auth import sweep_expired_tokens
from accounts.models import Membership, User
from accounts.services import (
    accessible_budget_ids,
    create_api_token,
    do_create_personal_token,
    do_logout_everywhere,
    do_revoke_token,
    login_token_expiry,
)
from budgets import tree_memo
from config.api import FairwayAPIView, FairwayViewSet, prefill
from config.errors import ServiceError
from config.throttling import SettingsRate


class SlotThrottle(SettingsRate, SimpleRateThrottle):
    """A sliding window counted in ``num_requests`` *slots* of the cache, ``<key>:0`` …
    ``<key>:N-1``, each held for ``duration`` seconds by the instant of an attempt it counts (a
    failure, or any attempt: the subclass says which; as DRF's log, an attempt counts for
    ``duration`` seconds).

    :meth:`take` holds a free slot with ``cache.add`` (atomic on Redis, ``SET NX``, and in local
    memory, under its lock: the two caches the settings configure), or refuses when none is free:
    the check and the record are one step, so a burst of attempts sent at once gets no more than
    the limit (sso46, thr47: DRF's read of the log and write of it with one more were two steps,
    and every attempt of a burst read the same log and passed). :meth:`give_back` frees the slot
    taken; :meth:`wait` is until the oldest slot's attempt leaves the window."""

    def _slots(self, request: Request) -> list[str]:
        """The slot keys; none when there is no key (nothing to count) or no rate."""
        key = self.get_cache_key(request, None) if self.rate is not None else None
        return [] if key is None else [f"{key}:{i}" for i in range(self.num_requests)]

    def _held(self, slots: list[str]) -> dict[str, float]:
        """The slots held now, with their instants (the oldest is what :meth:`wait` reads)."""
        self.now = self.timer()
        held = {k: t for k, t in self.cache.get_many(slots).items() if isinstance(t, float)}
        self._oldest = min(held.values(), default=self.now)
        return held

    def take(self, request: Request) -> bool:
        """Hold one of the free slots (one atomic ``cache.add`` each); False when none is free:
        refused (:meth:`wait` says for how long)."""
        self._slot = None
        slots = self._slots(request)
        if not slots:
            return True
        held = self._held(slots)
        for slot in slots:
            if slot not in held and self.cache.add(slot, self.now, self.duration):
                self._slot = slot
                return True
        self._held(slots)  # others took the free ones first: the oldest now
        return False

    def give_back(self) -> None:
        """Free the slot :meth:`take` held: the attempt is not to count."""
        if getattr(self, "_slot", None) is not None:
            self.cache.delete(self._slot)
            self._slot = None

    def wait(self) -> float | None:
        """Until the oldest slot's attempt leaves the window."""
        return max(1.0, self.duration - (self.now - self._oldest))


class LoginThrottle(SlotThrottle):
    """Login attempts per client address (``FAIRWAY_THROTTLE_LOGIN``, default 30/min), every
    attempt counted, a place taken in :class:`SlotThrottle`'s atomic step (thr47: DRF's
    ``AnonRateThrottle`` read and wrote the address's log in two steps, and a burst from one
    address all passed).

    The address is ``REMOTE_ADDR`` or, behind ``FAIRWAY_TRUSTED_PROXIES`` proxies, the address
    the outermost of them saw: a client varying ``X-Forwarded-For`` gets no new counter. A
    signed-in requester is not counted (as DRF's ``AnonRateThrottle``).
    """

    scope = "login"

    def get_cache_key(self, request: Request, view: object) -> str | None:
        if request.user and request.user.is_authenticated:
            return None
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def allow_request(self, request: Request, view: object) -> bool:
        return self.take(request)


class LoginFailureThrottle(SlotThrottle):
    """Failed logins per (user name, client address) (``FAIRWAY_THROTTLE_LOGIN_USER``, default
    10/min; sec63), as django-axes and Keycloak count them.

    Keyed by the name *and* the address (``get_ident``: ``FAIRWAY_TRUSTED_PROXIES``, as
    :class:`LoginThrottle`): counted per name alone, from any address, every attempt, ten tries
    from one address kept the person (``admin``) out from everywhere. Guessing one name's password
    from many addresses is slowed by each address's :class:`LoginThrottle` only: that is the
    trade (docs/deploy.md, "Login limits").

    :meth:`take` (:class:`SlotThrottle`), right before the password is checked, holds a slot or
    refuses (sso46: a peek before the check and a push after it let every attempt of a burst
    through). A wrong password keeps its slot (the failure); :meth:`succeeded` frees the pair's
    slots, and :meth:`give_back` the one taken when the password was not checked after all (an
    incomplete form). :meth:`allow_request` (DRF's throttle step, before the body is read) only
    peeks: it refuses early when no slot is free and adds nothing."""

    scope = "login_user"

    def get_cache_key(self, request: Request, view: object) -> str | None:
        try:
            username = request.data.get("username") if hasattr(request.data, "get") else None
        except Exception:  # noqa: BLE001 -- an unparsable body is the view's 400, not the throttle's
            return None
        if not isinstance(username, str) or not username.strip():
            return None
        pair = f"{self.get_ident(request)}\n{username.strip().casefold()}"
        digest = hashlib.sha256(pair.encode("utf-8", "replace")).hexdigest()
        return self.cache_format % {"scope": self.scope, "ident": digest}

    def allow_request(self, request: Request, view: object) -> bool:
        slots = self._slots(request)
        return not slots or len(self._held(slots)) < len(slots)

    def succeeded(self, request: Request) -> None:
        """The password was right: the pair's failures are forgotten."""
        if slots := self._slots(request):
            self.cache.delete_many(slots)


def _me(request: Request, user: User) -> dict:
    # The tree this process keeps (budgets.tree_memo; read only), under the version the request read
    # with the other memos' (config.memo.request_tokens): no query while no budget changed.
    tree = tree_memo.shared_tree(tree_memo.token(request))
    # The authenticated user as it is (its row was read by this request's authentication, or is
    # the kept token's, which every user write forgets: accounts.auth), not read again; a copy
    # (a lazy session user resolved) takes its memberships, read now, as the prefetch did.
    user.pk  # noqa: B018 -- resolves a lazy session user before the copy
    user = copy.copy(user)
    user.__dict__.pop("_prefetched_objects_cache", None)
    prefill(user, "memberships", list(Membership.objects.filter(user_id=user.pk).order_by("id")))
    context = {
        "request": request,
        "budget_tree": tree,
        "budget_paths": tree_memo.paths_of(tree),
        # From the memberships just read (prefetched), not a query of their budget ids again.
        "accessible_budget_ids": accessible_budget_ids(
            user, tree, {m.budget_id: m.role for m in user.memberships.all()}
        ),
    }
    return MeSerializer(user, context=context).data


_login_answer = inline_serializer(
    "LoginAnswer",
    {
        "token": serializers.CharField(),
        "expiry": serializers.DateTimeField(allow_null=True),
        "user": MeSerializer(),
    },
)


@extend_schema(request=LoginSerializer, responses={200: _login_answer}, auth=[])
class LoginView(FairwayAPIView):
    """``POST {"username", "password"}`` → 200 ``{"token": "...", "expiry": "...", "user": {...}}``
    (``expiry``: ``FAIRWAY_LOGIN_TOKEN_DAYS`` days on, null when that is 0).

    The token is shown once (only its digest is stored). Bad credentials: 400
    ``invalid_credentials``, counted for the (user name, address) pair (:class:`LoginFailureThrottle`:
    a place in its count is taken before the password is checked; none left: 429).
    """

    authentication_classes: list = []  # a login needs no prior authentication (and no CSRF)
    permission_classes = [AllowAny]
    throttle_classes = [LoginThrottle, LoginFailureThrottle]

    def post(self, request: Request) -> Response:
        serializer = LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        failures = LoginFailureThrottle()
        if not failures.take(request):  # a burst that passed the throttles' peek together
            self.throttled(request, failures.wait())
        user = authenticate(
            request._request,  # Django's backends take the HttpRequest
            username=serializer.validated_data["username"],
            password=serializer.validated_data["password"],
        )
        if user is None:  # the slot taken stays: the failure
            raise ServiceError("invalid_credentials", None, "Wrong username or password.")
        failures.succeeded(request)
        instance, token = create_api_token(user, expiry=login_token_expiry())
        return Response(
            {"token": token, "expiry": instance.expiry, "user": _me(request, user)},
            status=status.HTTP_200_OK,
        )


@extend_schema(
    request=inline_serializer("LogoutRequest", {"all": serializers.BooleanField(required=False)}),
    responses={204: None},
)
class LogoutView(FairwayAPIView):
    """``POST`` → 204. Deletes the knox token used (``{"all": true}``: every token of the user)
    and ends a session; 400 ``invalid`` for an ``all`` neither true nor false (nothing deleted)."""

    def post(self, request: Request) -> Response:
        data = request.data
        everything = data.get("all", False) if isinstance(data, dict) else False
        if not isinstance(everything, bool):
            # brk48: "true", 1 or a form's all=true deleted this token only, answered 204: the others
            # (a stolen laptop's) worked on while the person was told they were logged out
            raise ServiceError("invalid", "all", 'all is true (every token of yours) or false, as JSON: {"all": true}.')
        if everything:
            do_logout_everywhere(request.user)
        elif isinstance(request.auth, AuthToken):
            request.auth.delete()
        logout(request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(responses=MeSerializer)
class MeView(FairwayAPIView):
    """``GET`` → the requester: id, username, memberships (budget path, role), submit_budgets."""

    def get(self, request: Request) -> Response:
        return Response(_me(request, request.user))


class TokenViewSet(mixins.ListModelMixin, FairwayViewSet):
    """The requester's API tokens: list, create a personal one (shown once), revoke by id.

    Every user manages only their own tokens; another user's token id answers 404.
    """

    serializer_class = TokenSerializer
    lookup_field = "token_key"
    lookup_url_kwarg = "id"
    lookup_value_regex = "[^/]+"
    filter_backends: list = []
    pagination_class = None

    def get_queryset(self):  # noqa: ANN201 -- DRF's signature
        if self.action == "list":
            sweep_expired_tokens(self.request.user)
        return AuthToken.objects.filter(user=self.request.user).select_related("info").order_by("-created")

    @extend_schema(request=TokenCreateSerializer, responses={201: TokenCreatedSerializer})
    def create(self, request: Request) -> Response:
        """Create a personal API token: 201 with ``token`` (the only time it is shown). Asked with a
        token that expires, the new one expires no later (400 ``invalid_expiry`` otherwise)."""
        serializer = TokenCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        instance, token = do_create_personal_token(
            request.user,
            serializer.validated_data["name"],
            serializer.validated_data.get("expiry_days"),
            # a token makes tokens that expire no later than itself, while it exists (brk49); a
            # session is a password's
            via=request.auth if isinstance(request.auth, AuthToken) else None,
        )
        instance = AuthToken.objects.select_related("info").get(pk=instance.pk)
        data = TokenSerializer(instance, context=self.get_serializer_context()).data
        return Response({**data, "token": token}, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, id: str | None = None) -> Response:  # noqa: A002 -- the URL's name
        """Revoke one of the requester's tokens (it stops working at once): 204; 404 ``not_found``."""
        do_revoke_token(request.user, id or "")
        return Response(status=status.HTTP_204_NO_CONTENT)
