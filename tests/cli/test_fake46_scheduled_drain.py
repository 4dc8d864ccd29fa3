"""fake46: an admin scheduled a drain of a researcher's running workload's host for later
(docs/deploy.md "Scheduled drains"). The workload's page, ``fairway show`` and the API said
nothing until the host drained (tryout46 told only a drain in progress). Each open attempt now
names the drain scheduled on its hosts and when it stops it there, by the drain's rule: at the
time a drain lets protections end (the attempt is stopped then if its protection has ended, else
when it ends) and a drain now stops everything (``scheduler.lifecycle.draining_hosts``, one
statement with the drain in progress: ``fairway_cli.words.draining_host_words``)."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler.services import do_schedule_drain
from tests.cli.inprocess import run_cli
from tests.cli.test_tryout46_draining_host import _running

QUEUE = ", and the workload goes back to the queue"


def _said(monkeypatch, researcher, researcher_client, w) -> tuple[list, str, str]:  # noqa: ANN001
    api = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["draining_hosts"]
    page = Client()
    page.force_login(researcher)
    return api, page.get(f"/workloads/{w.pk}/").content.decode(), run_cli(monkeypatch, researcher, "show", str(w.pk))


def _stamp(at) -> str:  # noqa: ANN001
    return at.isoformat().replace("+00:00", "Z")


def test_a_drain_scheduled_before_the_protection_ends_stops_it_at_its_end(
    monkeypatch, researcher, researcher_client, admin, submit_kwargs
):
    w, attempt, host = _running(researcher, submit_kwargs)  # protected 30 min
    at = (timezone.now() + timedelta(minutes=10)).replace(microsecond=0)
    do_schedule_drain(admin, host, at, "kernel upgrade")

    api, page, show = _said(monkeypatch, researcher, researcher_client, w)
    assert api == [
        {"host": host.name, "drain_now": False, "drains_at": _stamp(at), "stops_at": _stamp(attempt.protected_until)}
    ]
    words = (
        f"host {host.name} drains at {instant_text(at)}: this attempt is stopped when its protection ends, "
        f"at {instant_text(attempt.protected_until)}{QUEUE}"
    )
    assert words in page
    assert f"attempt 1: {words}" in show


def test_a_drain_scheduled_after_the_protection_or_a_drain_now_stops_it_then(
    monkeypatch, researcher, researcher_client, admin, submit_kwargs
):
    w, attempt, host = _running(researcher, submit_kwargs)
    later = (attempt.protected_until + timedelta(hours=1)).replace(microsecond=0)
    do_schedule_drain(admin, host, later, "PSU swap")
    api, page, show = _said(monkeypatch, researcher, researcher_client, w)
    assert api == [{"host": host.name, "drain_now": False, "drains_at": _stamp(later), "stops_at": _stamp(later)}]
    words = f"host {host.name} drains at {instant_text(later)}: this attempt is stopped then{QUEUE}"
    assert words in page and f"attempt 1: {words}" in show

    soon = (timezone.now() + timedelta(minutes=5)).replace(microsecond=0)  # protected past it: ignored
    do_schedule_drain(admin, host, soon, "fire", drain_now=True)
    api, page, show = _said(monkeypatch, researcher, researcher_client, w)
    assert api == [{"host": host.name, "drain_now": True, "drains_at": _stamp(soon), "stops_at": _stamp(soon)}]
    words = f"host {host.name} drains now at {instant_text(soon)}: this attempt is stopped then{QUEUE}"
    assert words in page and f"attempt 1: {words}" in show


def test_a_drain_in_progress_says_drains_at_null(researcher, researcher_client, admin, submit_kwargs):
    from scheduler.services import do_set_host_state

    w, _attempt, host = _running(researcher, submit_kwargs)
    assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["draining_hosts"] == []
    do_set_host_state(admin, host, "draining", "kernel upgrade")
    [draining] = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["draining_hosts"]
    assert draining["drains_at"] is None


def test_the_page_shows_the_scheduled_drain_in_a_browser(new_page, researcher, admin, submit_kwargs):
    """The same line under the attempt's "running" cell in a real browser (tests/browser.py).
    Skipped without Chromium or Playwright."""
    from tests.browser import log_in

    w, attempt, host = _running(researcher, submit_kwargs)
    at = (timezone.now() + timedelta(minutes=10)).replace(microsecond=0)
    do_schedule_drain(admin, host, at, "kernel upgrade")
    page = new_page()
    log_in(page, researcher.username)
    page.goto(f"/workloads/{w.pk}/")
    line = page.locator(".draining-host")
    assert line.count() == 1
    assert line.inner_text() == (
        f"host {host.name} drains at {instant_text(at)}: this attempt is stopped when its protection ends, "
        f"at {instant_text(attempt.protected_until)}{QUEUE}"
    )
    assert "running" in page.locator("td", has=line).inner_text()


def test_a_drain_now_scheduled_on_a_draining_host_stops_it_then(
    monkeypatch, researcher, researcher_client, admin, submit_kwargs
):
    """A host draining already, with a drain now scheduled before the attempt's protection ends:
    the drain now stops it then (a scheduled drain now stays when the host drains already), not at
    its protection's end as the drain in progress alone would."""
    from scheduler.services import do_set_host_state

    w, attempt, host = _running(researcher, submit_kwargs)
    do_set_host_state(admin, host, "draining", "kernel upgrade")
    soon = (timezone.now() + timedelta(minutes=5)).replace(microsecond=0)
    do_schedule_drain(admin, host, soon, "fire", drain_now=True)
    api, page, show = _said(monkeypatch, researcher, researcher_client, w)
    assert api == [{"host": host.name, "drain_now": True, "drains_at": _stamp(soon), "stops_at": _stamp(soon)}]
    words = f"host {host.name} drains now at {instant_text(soon)}: this attempt is stopped then{QUEUE}"
    assert words in page and f"attempt 1: {words}" in show

    later = attempt.protected_until + timedelta(hours=1)  # after its protection: the drain's rule
    do_schedule_drain(admin, host, later, "fire", drain_now=True)
    [draining] = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["draining_hosts"]
    assert draining == {
        "host": host.name,
        "drain_now": False,
        "drains_at": None,
        "stops_at": _stamp(attempt.protected_until),
    }
