"""API plumbing shared by every app: the one error format and the base view classes.

Error format (every 4xx answer of ``/api/v1/``)::

    400  {"<field>": ["message", ...], ..., "code": "<code of the first problem>"}
         (problems not tied to one field are listed under "non_field_errors")
    401/403/404/405/409/413/429  {"detail": "message", "code": "<code>"}

A 403 has one code, ``forbidden``, whoever refused: a service (``CancelError``), a view or a
permission class (DRF calls it ``permission_denied``; the API's docs and clients know ``forbidden``).

NUL characters in the path (404 ``not_found``) or a query parameter (400
``null_characters_not_allowed``) and bodies over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (413
``too_large``) are answered in this format by ``config.middleware`` before any view runs.

Scoping lives in ``FairwayViewSet``: it loads the budget tree once per request and
knows which budgets the user has access to (membership of a budget or an ancestor),
so serializers can decide field by field what to show without extra queries.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, HttpResponsePermanentRedirect
from django.urls import Resolver404, resolve
from django.utils.functional import SimpleLazyObject, cached_property
from rest_framework import exceptions, status, views, viewsets
from rest_framework.response import Response

from accounts.services import accessible_budget_ids
from budgets import tree_memo
from budgets.models import Budget
from config.errors import FORBIDDEN, ServiceError, retry_after_s


def _flatten(detail: Any, prefix: str, out: dict[str, list[str]]) -> None:
    """DRF error details (nested dicts/lists) → ``{"field": ["message"]}``; nested keys joined by dots."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = "non_field_errors" if key == "non_field_errors" and not prefix else key
            _flatten(value, f"{prefix}.{name}" if prefix else str(name), out)
    elif isinstance(detail, list):
        for item in detail:
            _flatten(item, prefix, out)
    else:
        out.setdefault(prefix or "non_field_errors", []).append(str(detail))


def _first_code(codes: Any) -> str:
    if isinstance(codes, dict):
        for value in codes.values():
            return _first_code(value)
    if isinstance(codes, list):
        for value in codes:
            return _first_code(value)
    return str(codes) if codes else "invalid"


def render_service_error(exc: ServiceError) -> Response:
    """A ServiceError as the API's error format (with ``Retry-After`` where it says when to try
    again: :func:`~config.errors.retry_after_s`, as a websocket's refusal says it, ws47)."""
    if exc.status == status.HTTP_400_BAD_REQUEST:
        data: dict[str, Any] = {}
        for problem in exc.problems:
            data.setdefault(problem.field or "non_field_errors", []).append(problem.message)
    else:
        data = {"detail": exc.message}
    data["code"] = exc.code
    seconds = retry_after_s(exc)
    return Response(data, status=exc.status, headers={"Retry-After": str(seconds)} if seconds else None)


HOW_TO_AUTHENTICATE = (
    "Send the header 'Authorization: Token <token>': POST /api/v1/auth/login/ with a username and"
    " password gives one, and so does the web UI's API tokens page (the CLI: fairway login)."
)
"""What a 401 ``not_authenticated`` adds to DRF's bare "credentials were not provided"."""


def _not_authenticated_detail(context: dict[str, Any]) -> str:
    """The 401's message: how to authenticate, and why a header that was sent did not count (a
    ``Bearer`` token, the usual guess, is ignored by the token scheme and read as no header)."""
    request = context.get("request")
    header = request.META.get("HTTP_AUTHORIZATION", "") if request is not None else ""
    scheme = header.split()[0] if header.split() else ""
    if scheme and scheme.lower() != "token":
        return f"Authorization scheme {scheme[:20]!r} is not accepted. {HOW_TO_AUTHENTICATE}"
    return f"Authentication credentials were not provided. {HOW_TO_AUTHENTICATE}"


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler giving every error the one format of this module's docstring."""
    if isinstance(exc, ServiceError):
        return render_service_error(exc)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None  # a bug: let Django answer 500 and log it
    response = views.exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields: dict[str, list[str]] = {}
        _flatten(exc.detail, "", fields)
        response.data = {**fields, "code": _first_code(exc.get_codes())}
    else:
        code = _first_code(exc.get_codes())
        if isinstance(exc, exceptions.PermissionDenied) and code == exceptions.PermissionDenied.default_code:
            code = FORBIDDEN  # one code for a 403 (this module's docstring)
        detail = _not_authenticated_detail(context) if isinstance(exc, exceptions.NotAuthenticated) else str(exc.detail)
        response.data = {"detail": detail, "code": code}
    if seconds := retry_after_s(exc):  # a 429's (DRF's Throttled): one reading of it, as a websocket's (ws47)
        response["Retry-After"] = str(seconds)
    return response


class FairwayAPIView(views.APIView):
    """Base of plain API views: the shared error format."""

    def get_exception_handler(self):  # noqa: ANN201 -- DRF's signature
        return exception_handler


def no_such(kind: str, key: Any) -> exceptions.NotFound:
    """404 ``not_found`` naming what was looked for: "No workload 999." (a key of other than digits
    quoted and cut to 100 characters)."""
    text = str(key)
    shown = text if text.isdigit() and len(text) <= 100 else repr(text[:100])
    return exceptions.NotFound(f"No {kind} {shown}.")


class FairwayViewSet(viewsets.GenericViewSet):
    """Base of every ViewSet: error format, and the requesting user's scope.

    ``budget_tree`` (id → Budget) and ``accessible_budget_ids`` (budgets the user may use and
    whose workloads' private fields they may see) are computed once per request and passed
    to serializers in the context, together with ``budget_paths``.

    Django's ``cached_property``, not ``functools``': on Python 3.11 the latter holds one lock per
    property *for every instance of the class* while it computes, so every request of a process
    queued on it behind one whose computation waited, and one that waited for a pooled database
    connection (the memberships' query) while the requests holding all the pool's connections
    queued on its lock stopped the process until the pool's timeout (10 s: the layout's
    10/20/30 s answers and timeouts; docs/benchmarks/api_load.md, eleventh pass). A view is one
    request's: nothing to lock.
    """

    def get_exception_handler(self):  # noqa: ANN201 -- DRF's signature
        return exception_handler

    def get_object(self) -> Any:
        """DRF's, whose 404 said only "Not found." (``fairway show 999``, ``cancel 999``): it names
        what was looked for, "No workload 999."."""
        try:
            return super().get_object()
        except Http404:
            kind = self.get_queryset().model._meta.verbose_name
            raise no_such(kind, self.kwargs.get(self.lookup_url_kwarg or self.lookup_field, "")) from None

    @cached_property
    def _tree_token(self) -> Any:
        """The version of the tree and memberships this request reads (``budgets.tree_memo``),
        read with the other memos' versions when its token was authenticated (``config.memo``)."""
        return tree_memo.token(self.request)

    @cached_property
    def budget_tree(self) -> dict[int, Budget]:
        """The tree this process keeps while no budget changed (``budgets.tree_memo``): read only."""
        return tree_memo.shared_tree(self._tree_token)

    @cached_property
    def memberships(self) -> dict[int, str]:
        """The user's memberships, budget id → role, shared by access checks, membership checks
        of a submission and ``can_cancel``: kept by the process under the tree's version (no
        query while no membership or budget changed; ``budgets.tree_memo``). Read only."""
        return tree_memo.shared_memberships(self.request.user, self._tree_token)

    @cached_property
    def accessible_budget_ids(self) -> set[int]:
        return accessible_budget_ids(self.request.user, self.budget_tree, self.memberships)

    def get_serializer_context(self) -> dict[str, Any]:
        context = super().get_serializer_context()
        if getattr(self, "swagger_fake_view", False):
            # drf-spectacular building the schema (``check --deploy``, ``manage.py spectacular``): no
            # request to serve, so no tree to read; with an unreachable database each read waited
            # FAIRWAY_DB_POOL_TIMEOUT_S, serializer after serializer, for minutes (deploy48)
            return context
        context.update(
            budget_tree=self.budget_tree,
            budget_paths=tree_memo.paths_of(self.budget_tree),
            # Lazy: a serializer that shows nothing private (the queue list) costs no query for it.
            accessible_budget_ids=SimpleLazyObject(lambda: self.accessible_budget_ids),
            memberships=SimpleLazyObject(lambda: self.memberships),
        )
        return context


class NotFoundView(FairwayAPIView):
    """Any path under ``/api/`` that names no endpoint: 404 in the API's error format (not HTML).

    A path that lacks only its trailing slash is redirected as Django's ``APPEND_SLASH`` would.
    """

    schema = None  # not an endpoint of the OpenAPI schema
    permission_classes: list = []
    authentication_classes: list = []
    throttle_classes: list = []

    def initial(self, request: Any, *args: Any, **kwargs: Any) -> None:
        path = request.path_info
        if not path.endswith("/") and request.method in {"GET", "HEAD"}:
            try:
                match = resolve(path + "/")
            except Resolver404:
                match = None
            if match is not None and match.url_name != "api-not-found":
                raise _Redirect(request.get_full_path(force_append_slash=True))
        raise exceptions.NotFound()

    def handle_exception(self, exc: Exception) -> Response:
        if isinstance(exc, _Redirect):
            return HttpResponsePermanentRedirect(exc.url)  # type: ignore[return-value] -- a plain redirect
        return super().handle_exception(exc)


class _Redirect(Exception):  # noqa: N818 -- control flow, not an error
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.url = url


def prefill(obj: Any, name: str, rows: list[Any]) -> None:
    """Put ``rows`` in ``obj``'s prefetch cache of the relation ``name`` (as ``prefetch_related``
    would after reading them): ``obj.<name>.all()`` then answers them without a query."""
    queryset = getattr(obj, name).all()
    queryset._result_cache = rows  # noqa: SLF001 -- Django's prefetch cache, as prefetch_one_level fills it
    queryset._prefetch_done = True  # noqa: SLF001
    obj.__dict__.setdefault("_prefetched_objects_cache", {})[name] = queryset
