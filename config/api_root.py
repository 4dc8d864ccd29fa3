"""``GET /api/v1/``: the API's root, a listing of its endpoints' URLs (like DRF's router root view).

The listing is read from the URL configuration (every named route under ``/api/v1/`` that takes no
argument), so an endpoint added to any app's ``api/urls.py`` is listed without editing this file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from config.api import FairwayAPIView

PREFIX = "api/v1/"


def _names(patterns: list[Any]) -> Iterator[str]:
    """The route names of ``patterns`` and of everything they include, in order."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _names(entry.url_patterns)
        elif isinstance(entry, URLPattern) and entry.name:
            yield entry.name


def api_endpoints() -> dict[str, str]:
    """``{"workloads/history": "/api/v1/workloads/history/", ...}``: every named route under
    ``/api/v1/`` that takes no argument (the collections and their list actions), the root itself
    left out, keyed by its path below ``/api/v1/`` without the trailing slash, sorted."""
    [api] = [p for p in get_resolver().url_patterns if isinstance(p, URLResolver) and str(p.pattern) == PREFIX]
    root = reverse("api-root")
    found: dict[str, str] = {}
    for name in _names(api.url_patterns):
        try:
            url = reverse(name)
        except NoReverseMatch:
            continue  # a route with an argument (an item, an item's action)
        if url.startswith(root) and url != root:
            found[url[len(root) :].rstrip("/")] = url
    return dict(sorted(found.items()))


class ApiRootView(FairwayAPIView):
    """``GET`` → the URL of every endpoint of the API that takes no argument, with the schema and its
    docs; authenticated like the rest of the API."""

    @extend_schema(
        summary="The API's endpoints",
        responses=OpenApiResponse(
            {"type": "object", "additionalProperties": {"type": "string", "format": "uri"}},
            description="Endpoint path (below /api/v1/, no trailing slash) → absolute URL; `schema` and `docs` "
            "→ the OpenAPI schema and its browsable docs.",
            examples=[
                OpenApiExample(
                    "root",
                    value={
                        "me": "https://fairway.example/api/v1/me/",
                        "workloads": "https://fairway.example/api/v1/workloads/",
                    },
                )
            ],
        ),
    )
    def get(self, request: Request) -> Response:
        links = {key: request.build_absolute_uri(url) for key, url in api_endpoints().items()}
        links["schema"] = request.build_absolute_uri(reverse("api-schema"))
        links["docs"] = request.build_absolute_uri(reverse("api-docs"))
        return Response(links)
