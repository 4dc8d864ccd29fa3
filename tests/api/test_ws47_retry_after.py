"""ws47: a websocket refusal says when to try again, as the HTTP answer's ``Retry-After`` does.

The API answers a throttled ``POST workloads/{id}/exec/`` 429 + ``Retry-After`` (DRF's wait, rounded
up) and a request that lost the database 503 + ``Retry-After: 2``; ``/ws/exec/`` and
``/ws/port-forward/`` refused the same ways closed 4429 / 4503 saying nothing of when. Their close
reason now carries the same seconds (``{"retry_after": N}``, ``config.errors.retry_after_s``: the
one computation both read); a refusal whose HTTP answer has no ``Retry-After`` (``exec_busy``,
``not_running``) closes without a reason, as before.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connections

from accounts.services import create_api_token
from config.middleware import DATABASE_RETRY_AFTER_S
from config.throttling import ExecRateThrottle
from scheduler import execs
from tests.api.test_exec_session import _run
from tests.test_ws63_services_down import STREAMS, _closed, _first_frame, _raise_lost, running  # noqa: F401 -- fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def _retry_after(closed: dict[str, Any]) -> int | None:
    reason = closed.get("reason") or ""
    return json.loads(reason)["retry_after"] if reason else None


@pytest.mark.parametrize("path", STREAMS)
def test_a_throttled_stream_closes_with_the_http_answers_retry_after(
    path,
    running,  # noqa: F811
    researcher,
    researcher_client,
    monkeypatch,
) -> None:
    w, _attempt = running
    monkeypatch.setattr(ExecRateThrottle, "allow_request", lambda self, request, view: False)
    monkeypatch.setattr(ExecRateThrottle, "wait", lambda self: 29.2)
    http = researcher_client.post(f"/api/v1/workloads/{w.pk}/exec/", {"command": ["id"]}, format="json")
    assert (http.status_code, http["Retry-After"]) == (429, "30"), http.content
    first = {**_first_frame(path, w.pk), **({"check": True} if path == "/ws/port-forward/" else {})}  # pf63: counted
    frame, closed = _run(_closed(path, create_api_token(researcher)[1], first))
    assert (frame["code"], closed["code"]) == ("throttled", 4429), (frame, closed)
    assert _retry_after(closed) == int(http["Retry-After"]), closed
    assert frame["message"] == http.json()["detail"]  # DRF's words, as the API's (was restated: "in 29 seconds")


@pytest.mark.parametrize("path", STREAMS)
def test_a_stream_that_lost_the_database_closes_with_the_http_answers_retry_after(
    path, researcher, monkeypatch
) -> None:
    token = create_api_token(researcher)[1]
    with monkeypatch.context() as patched:
        patched.setattr(type(connections["default"]), "get_new_connection", _raise_lost)
        frame, closed = _run(_closed(path, token, None))
    assert (frame["code"], closed["code"]) == ("database_unavailable", 4503), (frame, closed)
    assert _retry_after(closed) == DATABASE_RETRY_AFTER_S  # the 503's Retry-After (tests/test_db_unavailable.py)


def test_a_refusal_without_a_retry_after_closes_without_a_reason(running, researcher, monkeypatch) -> None:  # noqa: F811
    w, _attempt = running
    monkeypatch.setattr(execs, "tty_target", _raise_not_running)
    frame, closed = _run(_closed("/ws/exec/", create_api_token(researcher)[1], _first_frame("/ws/exec/", w.pk)))
    assert (frame["code"], closed["code"], closed.get("reason") or "") == ("not_running", 4409, "")


def _raise_not_running(*_args: Any, **_kwargs: Any) -> Any:
    from config.errors import ServiceError

    raise ServiceError("not_running", None, "Workload 1 is pending.", status=409)
