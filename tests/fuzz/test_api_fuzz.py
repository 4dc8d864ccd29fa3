"""Schemathesis against the served OpenAPI schema: generated requests to every operation (a bounded
number of examples each, as an admin, who may call everything, and as a researcher) must never get a
server error, and every answer must match the schema (status codes, content type, body).

``POST /api/v1/auth/logout/`` is left out: it deletes the token the fuzzer authenticates with.

Schemathesis's ``ignored_auth`` check re-sends an answered (2xx) request without the token and
with a wrong one; its own runner does so once per operation ("enforcement is a property of the
operation"), its pytest call at every 2xx answer: here the check is handed the runner's set of
operations already confirmed (:func:`ignored_auth_once`).

``make test`` runs ``FAIRWAY_FUZZ_EXAMPLES`` (10) generated examples per operation and role, besides
schemathesis's coverage phase (its boundary and missing-value cases, not counted there); the
longer profile (the count before fast51 was 20)::

    FAIRWAY_FUZZ_EXAMPLES=100 .venv/bin/python -m pytest -q tests/fuzz/test_api_fuzz.py
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.cache import cache
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings

from accounts.services import create_api_token

pytestmark = pytest.mark.first  # a long file: make test hands it out first (tests/conftest.py)

MAX_EXAMPLES = int(os.environ.get("FAIRWAY_FUZZ_EXAMPLES", "10"))
AUTH_CONFIRMED: set[str] = set()
"""Operations whose answered requests were re-sent without the token and with a wrong one, and refused."""


def ignored_auth_once(ctx: Any, response: Any, case: Any) -> bool | None:
    """Schemathesis's ``ignored_auth``, given the set of operations it already confirmed, as its
    runner gives it (``auth_enforced_operations``): it probes an operation until it confirmed it."""
    ctx.auth_enforced_operations = AUTH_CONFIRMED
    return schemathesis.checks.ignored_auth(ctx, response, case)


def _load_schema() -> Any:
    """The schema as the server serves it, loaded through the WSGI app (no database needed)."""
    return schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application()).exclude(path="/api/v1/auth/logout/")


schema = _load_schema()  # at import: pytest parametrizes one test per operation


@pytest.fixture(autouse=True)
def _keep_the_test_connection() -> Iterator[None]:
    """The WSGI handler closes the database connection after each request (request_finished);
    the test's transaction lives on that connection, so, as Django's test client does, the
    handler must not close it."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture(params=["admin", "researcher"])
def token(request: pytest.FixtureRequest, cluster: Any, org_tree: Any) -> str:
    """An admin (may call everything) and a researcher (member of nlp/olmo: meets 403s)."""
    return create_api_token(request.getfixturevalue(request.param))[1]


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_api_answers_by_its_schema(case: Any, token: str) -> None:
    cache.clear()  # throttling is not what is tested here
    # The schema cannot say which budgets, clusters or passwords exist: a schema-valid body may
    # rightly be refused with 400. Server errors and answers that break the schema are what must
    # not happen.
    excluded = [schemathesis.checks.positive_data_acceptance, schemathesis.checks.negative_data_rejection]
    case.call_and_validate(
        headers={"Authorization": f"Token {token}"},
        excluded_checks=[*excluded, schemathesis.checks.ignored_auth],
        additional_checks=[ignored_auth_once],
    )


def test_auth_is_probed_until_confirmed_and_an_ignored_token_is_caught(
    monkeypatch: pytest.MonkeyPatch, admin: Any
) -> None:
    """:func:`ignored_auth_once`: the first answered request of an operation is re-sent without
    the token and with a wrong one, a later one is not; an operation that lets anyone in (the
    token authentication patched to accept anything) fails the check."""
    import sys

    from accounts.auth import FairwayTokenAuthentication

    this = sys.modules[__name__]
    monkeypatch.setattr(this, "AUTH_CONFIRMED", set())
    operation = schema["/api/v1/budgets/"]["GET"]
    headers = {"Authorization": f"Token {create_api_token(admin)[1]}"}
    checks: dict[str, Any] = {
        "excluded_checks": [schemathesis.checks.ignored_auth],
        "additional_checks": [ignored_auth_once],
    }
    seen: list[int] = []
    real = FairwayTokenAuthentication.authenticate

    def counted(self: Any, request: Any) -> Any:
        seen[-1] += 1
        return real(self, request)

    monkeypatch.setattr(FairwayTokenAuthentication, "authenticate", counted)
    for _ in range(2):
        seen.append(0)
        assert operation.Case().call_and_validate(headers=headers, **checks).status_code == 200
    assert seen[0] > 1 and seen[1] == 1, seen  # probes for the first answer only
    assert {operation.label} == this.AUTH_CONFIRMED

    monkeypatch.setattr(this, "AUTH_CONFIRMED", set())
    monkeypatch.setattr(FairwayTokenAuthentication, "authenticate", lambda self, request: (admin, None))
    with pytest.raises(BaseExceptionGroup, match="accepts requests without authentication"):
        operation.Case().call_and_validate(headers=headers, **checks)
