"""tryout46: an admin drained the host of a researcher's running workload ("kernel upgrade"). The
clusters page and ``fairway hosts`` said the host drains and when its last protection ends, but
the workload's own page, ``fairway show`` and the API said nothing: "running", protected until
10:34, as if it would run on. Each open attempt now names its draining hosts and when the tick
stops it there and requeues the workload (``scheduler.lifecycle.draining_hosts``, DESIGN.md §6:
as soon as it is unprotected; drain now and unprotected work at the next tick)."""

from __future__ import annotations

from django.test import Client

from fairway_cli.numbers import instant_text
from scheduler import lifecycle
from scheduler.models import Workload
from scheduler.services import do_set_host_state, do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def _running(researcher, submit_kwargs, **overrides):
    w = do_submit_workload(researcher, **submit_kwargs(**{"gpu_count": 4, "min_runtime_s": 1800, **overrides}))
    run_tick(w.cluster_id)
    attempt = Workload.objects.get(pk=w.pk).attempts.get()
    assert lifecycle.attempt_started(attempt.host, attempt.pk)
    attempt.refresh_from_db()
    return w, attempt, attempt.gpu_links.first().gpu.host


def test_a_drain_of_its_host_is_said_on_the_workloads_page_api_and_show(
    monkeypatch, researcher, researcher_client, admin, submit_kwargs
):
    w, attempt, host = _running(researcher, submit_kwargs)
    detail = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert detail["attempts"][0]["draining_hosts"] == []  # an active host: nothing said

    do_set_host_state(admin, host, "draining", "kernel upgrade")
    detail = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    stamp = attempt.protected_until.isoformat().replace("+00:00", "Z")
    assert detail["attempts"][0]["draining_hosts"] == [
        {"host": host.name, "drain_now": False, "drains_at": None, "stops_at": stamp}
    ]

    words = (
        f"host {host.name} is draining: this attempt is stopped when its protection ends, at "
        f"{instant_text(attempt.protected_until)}, and the workload goes back to the queue"
    )
    page = Client()
    page.force_login(researcher)
    assert words in page.get(f"/workloads/{w.pk}/").content.decode()
    assert f"attempt 1: {words}" in run_cli(monkeypatch, researcher, "show", str(w.pk))


def test_drain_now_and_unallocated_work_are_stopped_at_the_next_tick(
    researcher, researcher_client, admin, submit_kwargs
):
    w, _attempt, host = _running(researcher, submit_kwargs, min_runtime_s=0)
    do_set_host_state(admin, host, "draining", "retire")
    [draining] = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["draining_hosts"]
    assert draining["stops_at"] is None

    w, _attempt, host = _running(researcher, submit_kwargs, gpu_count=4)
    do_set_host_state(admin, host, "draining", "fire", drain_now=True)
    page = Client()
    page.force_login(researcher)
    text = page.get(f"/workloads/{w.pk}/").content.decode()
    assert f"host {host.name} drains now: this attempt is stopped at the next tick" in text
    run_tick(w.cluster_id)  # the stop issued: the table says "stopping (drained)", nothing more
    assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["draining_hosts"] == []


def test_the_page_shows_the_drain_under_the_running_attempt_in_a_browser(new_page, researcher, admin, submit_kwargs):
    """The same line on the page in a real browser (tests/browser.py), under the attempt's
    "running" cell as an offline host's is. Skipped without Chromium or Playwright."""
    from tests.browser import log_in

    w, _attempt, host = _running(researcher, submit_kwargs)
    do_set_host_state(admin, host, "draining", "kernel upgrade")
    page = new_page()
    log_in(page, researcher.username)
    page.goto(f"/workloads/{w.pk}/")
    line = page.locator(".draining-host")
    assert line.count() == 1
    assert line.inner_text().startswith(
        f"host {host.name} is draining: this attempt is stopped when its protection ends"
    )
    assert "running" in page.locator("td", has=line).inner_text()
