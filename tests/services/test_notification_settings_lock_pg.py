"""Notification settings updates (``PUT /api/v1/notifications/``) are atomic under the settings
row lock (docs/locking.md, "Notification settings"). Real threads, each with its own connection;
skipped on SQLite (one writer, no row locks).

Before: a PUT checked "webhook kinds need a URL" against the settings it read unlocked, then
wrote under ``update_or_create``'s lock. A PUT of webhook kinds alone, checked against the saved
URL while another PUT removing kinds and URL was in flight, waited for it and then saved its kinds
beside the now empty URL: webhook kinds enabled without a URL, neither request applied whole.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections

from scheduler.models import NotificationSettings
from tests.pg_locks import BOUND_S, Held, until, waits_on_a_lock

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL"),
]

URL = "https://hooks.example/x"


def _state(user: Any) -> dict[str, Any]:
    pref = NotificationSettings.objects.get(user=user)
    return {"email_kinds": pref.email_kinds, "webhook_kinds": pref.webhook_kinds, "webhook_url": pref.webhook_url}


def test_a_put_in_flight_is_waited_for_before_the_webhook_rule_is_checked(researcher, api_client_for):
    NotificationSettings.objects.create(user=researcher, webhook_kinds=["started"], webhook_url=URL)
    first_client, second_client = api_client_for(researcher), api_client_for(researcher)
    off = {"webhook_kinds": [], "webhook_url": ""}
    answers: dict[str, Any] = {}

    def put(name: str, client: Any, body: dict[str, Any]) -> None:
        answers[name] = client.put("/api/v1/notifications/", body, format="json")

    # The first PUT (webhooks off) has written its row and holds its transaction open.
    first = Held(lambda: put("first", first_client, off))
    assert first.done.wait(BOUND_S), first.error
    assert answers["first"].status_code == 200, answers["first"].content[:300]
    second_pid: list[int] = []

    def second_job() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            second_pid.append(int(cursor.fetchone()[0]))
        try:
            put("second", second_client, {"webhook_kinds": ["failed"]})
        finally:
            connections.close_all()

    second = threading.Thread(target=second_job, daemon=True)
    second.start()
    try:
        assert until(lambda: bool(second_pid) and (waits_on_a_lock(second_pid[0]) or not second.is_alive()))
    finally:
        first.release()
    second.join(BOUND_S)
    assert first.error is None, first.error
    final = _state(researcher)
    assert not (final["webhook_kinds"] and not final["webhook_url"]), final
    # The second PUT, checked against the first one's outcome (no URL), is refused whole.
    assert answers["second"].status_code == 400, answers["second"].content[:300]
    assert answers["second"].json()["code"] == "webhook_url_required"
    assert final == {"email_kinds": [], **off}
