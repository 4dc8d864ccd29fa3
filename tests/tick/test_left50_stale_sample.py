"""left50: a GPU's last stored sample (``GPU.last_sample``) was read as current whatever its age:
a host whose agent stopped sending samples hours ago still showed (the hosts API, ``fairway hosts
NAME``, the clusters page) and counted (the pyramid's stand-in, hence the metrics) its last
utilization. A sample older than ``FAIRWAY_HOST_LOST_AFTER_S`` now reads as not measured, as a GPU
never sampled, through one rule (``scheduler.gpu_report.current_sample``; docs/standing.md,
"A stale GPU sample"), its age still said."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduler import lifecycle
from scheduler.gpu_report import current_sample, stamped
from scheduler.models import GPU, Attempt, Host
from scheduler.pyramid import compute_hour, hour_of
from web.views import _util_text


def _sample(host: Host, age: timedelta) -> None:
    at = timezone.now().replace(microsecond=0) - age
    sample = lifecycle.GpuSample(0, "healthy", (), {"utilization_pct": 91.0, "temperature_c": 60.0})
    lifecycle.record_heartbeat(host, [sample], now=at)


@pytest.mark.parametrize(("age", "util"), [(timedelta(seconds=40), 91.0), (timedelta(hours=3), None)])
def test_the_hosts_api_reads_a_stale_sample_as_not_measured_and_says_its_age(hosts, researcher, settings, age, util):
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_LOST_AFTER_S": 300}
    _sample(hosts["h100-1"], age)
    api = Client()
    api.force_login(researcher)
    row = next(g for g in api.get("/api/v1/hosts/h100-1/").json()["gpus"] if g["index"] == 0)
    assert (row["utilization_pct"], row["temperature_c"]) == ((91.0, 60.0) if util else (None, None))
    assert row["sampled_at"] is not None  # the age is still said: "sampled 3h ago"
    tooltip = _util_text(GPU.objects.get(host=hosts["h100-1"], index=0).last_sample)
    assert tooltip.startswith("91.0% util, sampled " if util else "util not measured, sampled 3h"), tooltip


def test_the_rule_one_threshold_and_samples_without_an_instant(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_LOST_AFTER_S": 300}
    now = timezone.now()
    fresh, old = (
        stamped({"utilization_pct": 5}, now - timedelta(seconds=300)),
        stamped({}, now - timedelta(seconds=301)),
    )
    assert current_sample(fresh, now) == fresh
    assert current_sample(old, now) == {}
    assert current_sample({"utilization_pct": 5}, now) == {"utilization_pct": 5}  # stored before util49: no age
    assert current_sample(None, now) == {}


def test_the_pyramid_counts_a_sample_stale_at_the_hours_end_as_not_measured(tw, settings):
    """A host that still heartbeats (its heartbeat is in the hour) but whose GPU's last sample was
    taken at H+1 min: it no longer stands for the hour it stopped in."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_LOST_AFTER_S": 300}
    hour = hour_of(tw.now) - timedelta(hours=2)
    host = tw.host("h1", gpus=2)
    Host.objects.filter(pk=host.pk).update(
        created_at=hour - timedelta(days=1), last_heartbeat=hour + timedelta(minutes=59)
    )
    g = list(host.gpus.order_by("index"))
    GPU.objects.filter(pk=g[0].pk).update(last_sample=stamped({"utilization_pct": 50}, hour + timedelta(minutes=1)))
    GPU.objects.filter(pk=g[1].pk).update(last_sample=stamped({"utilization_pct": 50}, hour + timedelta(minutes=58)))
    for gpu in g:
        attempt = tw.attempt(tw.workload(), [gpu])
        Attempt.objects.filter(pk=attempt.pk).update(placed_at=hour - timedelta(hours=3))
    t = compute_hour(tw.cluster, hour, tw.now)
    assert t["measured"] == pytest.approx(3600)  # gpu1's only: gpu0's sample was 59 min old at H+1h
    assert t["utilized"] == pytest.approx(1800)
