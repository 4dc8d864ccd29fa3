"""left51: the metrics page ends with each cluster's occupancy right now ("8 of 20 GPUs occupied
(40%): 8 by allocated work (40%), 0 by unallocated work"); ``fairway metrics`` showed the pyramid
alone. It shows that sentence too, read from the page's source (``reports.occupancy``, the API's
``metrics/``) in the page's words (:func:`fairway_cli.words.occupancy_now_text`); ``--json`` stays the API's
pyramid (tests/api/test_same47_every_surface.py)."""

from __future__ import annotations

import html
import re

from django.test import Client

from fairway_cli.words import occupancy_now_text
from scheduler import lifecycle
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def _pages_sentence(user, cluster: str) -> str:
    page = Client()
    page.force_login(user)
    body = page.get("/metrics/").content.decode()
    found = re.search(rf"<h2>{cluster}</h2>\s*<p[^>]*>(.*?)</p>", body, re.S)
    assert found, body[-3000:]
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip().rstrip(".")


def test_fairway_metrics_says_the_pages_occupancy_right_now(researcher, cluster, submit_kwargs, monkeypatch):
    do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    for a in Attempt.objects.select_related("host"):
        lifecycle.attempt_started(a.host, a.pk)

    said = _pages_sentence(researcher, "default")
    assert said.startswith("8 of ") and "by allocated work" in said, said
    out = run_cli(monkeypatch, researcher, "metrics")
    [line] = [line for line in out.splitlines() if "right now" in line]
    assert line.split("right now", 1)[1].strip() == said, (line, said)

    api = Client()
    api.force_login(researcher)
    [now] = api.get("/api/v1/metrics/", {"cluster": "default"}).json()
    assert said == occupancy_now_text(now)  # the API's figures in the one function's words


def test_a_cluster_without_pyramid_hours_still_says_its_occupancy_now(researcher, cluster, monkeypatch):
    out = run_cli(monkeypatch, researcher, "metrics", "--since", "2020-01-01", "--until", "2020-01-02")
    assert "right now" in out and _pages_sentence(researcher, "default") in out
