"""slow50: how often a workload's page asks again for its state and its live log is
``FAIRWAY_PAGE_REFRESH_S`` (3 s by default; the e2e stack's browser watches with 1 s), and the page
says the same number beside the log."""

from __future__ import annotations

from types import SimpleNamespace

from django.template.loader import render_to_string
from django.test import Client

from scheduler.services import do_submit_workload


def _live_log_line(w: object) -> str:
    context = {"w": w, "attempt": SimpleNamespace(number=1), "parts": [], "allowed": True, "live": True}
    return render_to_string("web/_logs.html", context)


def test_a_workloads_page_polls_as_often_as_the_setting_says_and_says_so(db, settings, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="watched", gpu_count=1))
    client = Client()
    client.force_login(researcher)

    page = client.get(f"/workloads/{w.pk}/").content.decode()
    assert page.count('hx-trigger="every 3s"') == 1 and 'hx-trigger="load, every 3s"' in page
    assert "live, refreshed every 3 s" in _live_log_line(w)

    settings.FAIRWAY = {**settings.FAIRWAY, "PAGE_REFRESH_S": 1.5}
    page = client.get(f"/workloads/{w.pk}/").content.decode()
    assert page.count('hx-trigger="every 1.5s"') == 1 and 'hx-trigger="load, every 1.5s"' in page
    assert "every 3s" not in page
    assert "live, refreshed every 1.5 s" in _live_log_line(w)
