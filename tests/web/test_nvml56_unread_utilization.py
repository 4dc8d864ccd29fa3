"""nvml56: a GPU whose utilization NVML cannot read (a MIG-mode GPU: ``null`` in its heartbeat)
reads "not measured" on the clusters page's tile, and ``-`` in the API and ``fairway hosts``,
never 0 %."""

from __future__ import annotations

import html
import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from fairway_cli.words import NOT_MEASURED
from scheduler import lifecycle
from scheduler.models import GPU, Attempt, AttemptGPU, Workload
from tests.browser import log_in
from tests.cli.inprocess import run_cli

UNREAD = {"utilization_pct": None, "memory_used_mb": None, "temperature_c": None, "power_w": None}


def _busy(host, researcher, org_tree) -> list[GPU]:  # noqa: ANN001
    """GPUs 0 and 1 of ``host`` held by two running workloads; GPU 0 reads no utilization."""
    gpus = list(GPU.objects.filter(host=host).order_by("index"))
    now = timezone.now()
    for n, gpu in enumerate(gpus[:2]):
        w = Workload.objects.create(
            name=f"w{n}",
            owner=researcher,
            budget=org_tree["nlp/olmo"],
            cluster=host.cluster,
            gpu_model=gpu.model,
            gpu_count=1,
            command=["sleep", "1"],
            min_runtime_s=60,
            submitted_at=now,
            seq=Workload.objects.count() + 1,
            state=Workload.State.RUNNING,
        )
        a = Attempt.objects.create(workload=w, number=1, host=host, allocated=True, placed_at=now, started_at=now)
        AttemptGPU.objects.create(attempt=a, gpu=gpu)
    samples = [UNREAD, {**UNREAD, "utilization_pct": 0.0, "temperature_c": 40.0}]
    lifecycle.record_heartbeat(
        host, [lifecycle.GpuSample(i, "healthy", (), s) for i, s in enumerate(samples)], now=now - timedelta(seconds=5)
    )
    return gpus


def test_an_unread_utilization_is_not_measured_on_every_surface(hosts, researcher, org_tree, monkeypatch):
    _busy(hosts["h100-1"], researcher, org_tree)
    api = Client()
    api.force_login(researcher)
    row = {g["index"]: g for g in api.get("/api/v1/hosts/h100-1/").json()["gpus"]}
    assert (row[0]["utilization_pct"], row[0]["memory_used_mb"], row[0]["temperature_c"]) == (None, None, None)
    assert row[1]["utilization_pct"] == 0.0  # a read 0 % stays 0 %

    page = html.unescape(api.get("/clusters/").content.decode())
    assert "GPU 0 · healthy · workload #" in page and f"util {NOT_MEASURED}" in page
    assert re.search(r"0\.0% util, sampled \d+s ago", page)  # with the sample's age (util49)

    shown = run_cli(monkeypatch, researcher, "hosts", "h100-1")
    line = next(x for x in shown.splitlines() if x.split()[:1] == ["0"])
    assert "%" not in line and " - " in line


def test_in_a_browser_the_tile_of_a_gpu_without_utilization_says_not_measured(new_page, hosts, researcher, org_tree):
    _busy(hosts["h100-1"], researcher, org_tree)
    page = new_page()
    log_in(page, researcher.username)
    page.goto("/clusters/")
    titles = page.eval_on_selector_all("a.gpu", "els => els.map(e => e.title)")
    assert any(t.startswith("GPU 0 · ") and f"· util {NOT_MEASURED}, sampled " in t for t in titles), titles
    assert any(t.startswith("GPU 1 · ") and re.search(r"· 0\.0% util, sampled \d+s ago$", t) for t in titles), titles
