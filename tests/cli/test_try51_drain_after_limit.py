"""try51: a workload with a wall-time limit of 1 minute, on a host whose drain was scheduled 7
minutes ahead. Its page said both "wall-time limit 1m per attempt; stopped (timeout) then, and it
ends failed" and "host gpu1 drains at 00:24:43 UTC: this attempt is stopped then, and the workload
goes back to the queue" (``fairway show`` and the API's ``draining_hosts`` the latter too), though
the limit ends the attempt, failed, six minutes before the drain reaches it. A drain that would
stop the attempt only after its wall-time limit is not said (``scheduler.lifecycle.draining_hosts``);
one that stops it before is, as before."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client

from fairway_cli.numbers import instant_text
from scheduler.services import do_schedule_drain
from tests.cli.inprocess import run_cli
from tests.cli.test_tryout46_draining_host import _running


def _said(monkeypatch, researcher, researcher_client, w) -> tuple[list, str, str]:  # noqa: ANN001
    api = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["draining_hosts"]
    page = Client()
    page.force_login(researcher)
    return api, page.get(f"/workloads/{w.pk}/").content.decode(), run_cli(monkeypatch, researcher, "show", str(w.pk))


def test_a_drain_after_the_wall_time_limit_is_not_said(
    monkeypatch, researcher, researcher_client, admin, submit_kwargs
):
    w, attempt, host = _running(researcher, submit_kwargs, min_runtime_s=60, max_runtime_s=60)
    limit_ends = attempt.started_at + timedelta(seconds=60)
    at = (limit_ends + timedelta(minutes=6)).replace(microsecond=0)
    do_schedule_drain(admin, host, at, "BIOS update")

    api, page, show = _said(monkeypatch, researcher, researcher_client, w)
    assert api == []
    assert f"drains at {instant_text(at)}" not in page
    assert "drains at" not in show
    assert "stopped (timeout) then, and it ends failed" in page  # what does happen, said once


def test_a_drain_before_the_wall_time_limit_is_said(monkeypatch, researcher, researcher_client, admin, submit_kwargs):
    w, attempt, host = _running(researcher, submit_kwargs, min_runtime_s=60, max_runtime_s=3600)
    at = (attempt.started_at + timedelta(minutes=10)).replace(microsecond=0)
    do_schedule_drain(admin, host, at, "BIOS update")

    api, page, show = _said(monkeypatch, researcher, researcher_client, w)
    assert [d["host"] for d in api] == [host.name]
    words = f"host {host.name} drains at {instant_text(at)}: this attempt is stopped then"
    assert words in page and f"attempt 1: {words}" in show
