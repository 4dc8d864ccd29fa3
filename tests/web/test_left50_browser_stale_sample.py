"""left50: the clusters page's free GPU tile said the temperature of the GPU's last sample however
old (the template read ``last_sample`` itself): a host whose agent stopped sampling hours ago
showed "88 °C" as current. A stale sample reads as not measured (``gpu_report.current_sample``):
no temperature. In a real browser (tests/browser.py); skipped without Chromium or Playwright."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from scheduler.gpu_report import stamped
from scheduler.models import GPU
from tests.browser import log_in


def test_a_free_gpus_tile_says_no_temperature_from_a_stale_sample(new_page, admin, hosts, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_LOST_AFTER_S": 300}
    now = timezone.now()
    gpus = list(GPU.objects.filter(host=hosts["h100-1"]).order_by("index"))
    GPU.objects.filter(pk=gpus[0].pk).update(last_sample=stamped({"temperature_c": 61.0}, now))
    GPU.objects.filter(pk=gpus[1].pk).update(last_sample=stamped({"temperature_c": 88.0}, now - timedelta(hours=3)))
    page = new_page()
    log_in(page, "admin")
    page.goto("/clusters/")
    tiles = page.locator("tr#host-h100-1 span.gpu")
    assert tiles.nth(0).get_attribute("title") == "GPU 0 · healthy · 61.0 °C"
    assert tiles.nth(1).get_attribute("title") == "GPU 1 · healthy"
