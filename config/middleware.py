"""Input guards that run before any view, session or CSRF check reads the request.

* A NUL character in the path: 404 (no name of anything can hold one; PostgreSQL cannot even
  compare text holding NUL, so a lookup would fail with a 500).
* A NUL character in a query parameter: 400 ``null_characters_not_allowed``.
* A body larger than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (by its ``Content-Length``): 413
  ``too_large``, before anything reads it.

Under ``/api/`` the answers use the API's one error format (``config.api``); elsewhere the
plain pages (404 page, 400/413 text). Surrogates cannot arrive through a URL or a form: Django
decodes both as UTF-8 with replacement (JSON bodies are ``config.parsers``' business).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


class InputGuardMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        answer = self.refuse(request)
        return answer if answer is not None else self.get_response(request)

    def refuse(self, request: HttpRequest) -> HttpResponse | None:
        api = _is_api(request)
        if "\x00" in request.path_info:
            if api:
                return JsonResponse({"detail": "Not found.", "code": "not_found"}, status=404)
            raise Http404("No such page.")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if limit is not None and length > limit and "multipart/form-data" not in request.META.get("CONTENT_TYPE", ""):
            message = f"The request body is larger than {limit} bytes."
            if api:
                return JsonResponse({"detail": message, "code": "too_large"}, status=413)
            return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")
        for key, values in request.GET.lists():
            if "\x00" in key or any("\x00" in v for v in values):
                name = key.replace("\x00", "")[:40] or "non_field_errors"
                message = "Null characters are not allowed."
                if api:
                    return JsonResponse({name: [message], "code": "null_characters_not_allowed"}, status=400)
                return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return None
