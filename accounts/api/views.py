"""Accounts API: log in for a knox token, log out, who am I."""

from __future__ import annotations

from django.contrib.auth import authenticate, logout
from django.db.models import Prefetch
from knox.models import AuthToken
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle

from accounts.api.serializers import LoginSerializer, MeSerializer
from accounts.models import Membership, User
from accounts.services import accessible_budget_ids, create_api_token
from budgets.services import budget_paths, load_tree
from config.api import FairwayAPIView
from config.errors import ServiceError


class LoginThrottle(AnonRateThrottle):
    scope = "login"
    rate = "30/min"


def _me(request: Request, user: User) -> dict:
    tree = load_tree()
    user = User.objects.prefetch_related(Prefetch("memberships", queryset=Membership.objects.order_by("id"))).get(
        pk=user.pk
    )
    context = {
        "request": request,
        "budget_tree": tree,
        "budget_paths": budget_paths(tree),
        "accessible_budget_ids": accessible_budget_ids(user, tree),
    }
    return MeSerializer(user, context=context).data


class LoginView(FairwayAPIView):
    """``POST {"username", "password"}`` → 200 ``{"token": "...", "expiry": null, "user": {...}}``.

    The token is shown once (only its digest is stored). Bad credentials: 400
    ``invalid_credentials``.
    """

    authentication_classes: list = []  # a login needs no prior authentication (and no CSRF)
    permission_classes = [AllowAny]
    throttle_classes = [LoginThrottle]

    def post(self, request: Request) -> Response:
        serializer = LoginSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        user = authenticate(
            request._request,  # Django's backends take the HttpRequest
            username=serializer.validated_data["username"],
            password=serializer.validated_data["password"],
        )
        if user is None:
            raise ServiceError("invalid_credentials", None, "Wrong username or password.")
        instance, token = create_api_token(user)
        return Response(
            {"token": token, "expiry": instance.expiry, "user": _me(request, user)},
            status=status.HTTP_200_OK,
        )


class LogoutView(FairwayAPIView):
    """``POST`` → 204. Deletes the knox token used (``{"all": true}``: every token of the user)
    and ends a session."""

    def post(self, request: Request) -> Response:
        data = request.data
        if isinstance(data, dict) and data.get("all") is True:  # any other body: this token only
            AuthToken.objects.filter(user=request.user).delete()
        elif isinstance(request.auth, AuthToken):
            request.auth.delete()
        logout(request._request)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MeView(FairwayAPIView):
    """``GET`` → the requester: id, username, memberships (budget path, role), submit_budgets."""

    def get(self, request: Request) -> Response:
        return Response(_me(request, request.user))
