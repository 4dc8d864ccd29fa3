"""``/metrics`` (Prometheus): the metric names and values on a small cluster, and the bearer token."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from scheduler import histograms
from scheduler.models import GPU, Attempt, Host, Workload
from scheduler.prom import record_tick
from scheduler.pyramid import hour_of, rollup_hour


def scrape(client: Client, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = client.get("/metrics", **headers)
    assert answer.status_code == 200, answer.content
    assert answer["Content-Type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(answer.content.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


@pytest.fixture
def world(tw):
    histograms.reset()
    h1 = tw.host("h1", gpus=4)
    tw.host("h2", gpus=2, state=Host.State.DRAINED)
    silent = tw.host("h3", gpus=1)
    Host.objects.filter(pk=silent.pk).update(last_heartbeat=tw.now - timedelta(minutes=10))
    g = list(h1.gpus.order_by("index"))
    GPU.objects.filter(pk=g[3].pk).update(health=GPU.Health.UNHEALTHY)
    tw.attempt(tw.workload(gpus=2), g[:2])
    tw.attempt(tw.workload(min_runtime=0), [g[2]])
    tw.workload(pending_reason="no_capacity")
    tw.workload(pending_reason="no_capacity")
    tw.workload()
    done = tw.attempt(tw.workload(state=Workload.State.PENDING), [g[3]])
    Attempt.objects.filter(pk=done.pk).update(ended_at=tw.now - timedelta(minutes=5), end_reason="preempted")
    done.gpu_links.update(open=False)
    old = tw.attempt(tw.workload(), [g[3]], started_ago=7200)
    Attempt.objects.filter(pk=old.pk).update(ended_at=tw.now - timedelta(hours=2), end_reason="drained")
    old.gpu_links.update(open=False)
    return tw


def test_metrics_names_and_values(world, client):
    record_tick(world.cluster.pk, 0.125)
    rollup_hour(world.cluster, hour_of(world.now) - timedelta(hours=1), world.now)
    m = scrape(client)
    c = ("cluster", "c1")
    assert m[("fairway_tick_last_duration_seconds", (c,))] == pytest.approx(0.125)
    assert m[("fairway_tick_duration_seconds_count", (c,))] == 1
    assert ("fairway_tick_last_run_timestamp_seconds", (c,)) in m
    assert m[("fairway_pending_workloads", (c, ("reason", "no_capacity")))] == 2
    assert m[("fairway_pending_workloads", (c, ("reason", "not_yet_considered")))] == 1
    gpus = {
        state: m[("fairway_gpus", (c, ("state", state)))]
        for state in ("allocated", "unallocated", "idle", "unavailable")
    }
    assert gpus == {"allocated": 2, "unallocated": 1, "idle": 1, "unavailable": 3}
    assert m[("fairway_unhealthy_gpus", (c,))] == 1
    assert m[("fairway_hosts", (c, ("state", "active")))] == 2
    assert m[("fairway_hosts", (c, ("state", "drained")))] == 1
    assert m[("fairway_connected_agents", (c,))] == 2
    assert m[("fairway_preemptions_total", (c, ("reason", "preempted")))] == 1
    assert m[("fairway_preemptions_total", (c, ("reason", "drained")))] == 1  # a counter: since ever
    pyramid = {
        metric: m[(f"fairway_pyramid_{metric}_ratio", (c,))] for metric in ("availability", "occupancy", "utilization")
    }
    assert 1 >= pyramid["availability"] >= pyramid["occupancy"] >= pyramid["utilization"] >= 0
    assert ("fairway_pyramid_hour_timestamp_seconds", (c,)) in m


def test_metrics_bearer_token(world, client, settings):
    settings.FAIRWAY_METRICS_TOKEN = "s3cret-scrape"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    m = scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape")
    assert ("fairway_connected_agents", (("cluster", "c1"),)) in m


def test_exporter_gpu_states_are_the_apis(world, client, api_client_for):
    """mend30 (brk30): with an unhealthy GPU on a drained host, /metrics said unhealthy 1 +
    unavailable 7 where the API and the web pages said unavailable 8. Both now read
    ``reports.occupancy``: the same states, the same numbers; the unhealthy free GPUs are a gauge
    of their own, counted within ``unavailable``."""
    from accounts.models import User

    drained = Host.objects.get(name="h2")
    GPU.objects.filter(host=drained, index=0).update(health=GPU.Health.UNHEALTHY)
    m = scrape(client)
    user = User.objects.create_user("viewer")
    [api] = api_client_for(user).get("/api/v1/metrics/").json()
    c = ("cluster", "c1")
    states = ("allocated", "unallocated", "idle", "unavailable")
    exported = {state: m[("fairway_gpus", (c, ("state", state)))] for state in states}
    assert exported == {state: api[state] for state in states}
    assert exported == {"allocated": 2, "unallocated": 1, "idle": 1, "unavailable": 3}
    assert ("fairway_gpus", (c, ("state", "unhealthy"))) not in m
    assert m[("fairway_unhealthy_gpus", (c,))] == api["unhealthy"] == 2
    assert sum(exported.values()) == api["gpus"] == 7


def test_anonymous_scrapes_without_a_token_cost_one_set_of_queries_per_interval(world, client, settings, monkeypatch):
    """sec41: without ``FAIRWAY_METRICS_TOKEN`` anyone may scrape, and every scrape ran the
    collector's queries: an anonymous flood cost database work per request. Without a token the
    exposition is kept ``FAIRWAY_METRICS_CACHE_S`` (5 s) per process, so N scrapes within it cost
    one set of queries; with a token every authorized scrape is fresh (Prometheus alone)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduler import health

    now = [5000.0]
    monkeypatch.setattr(health, "clock", lambda: now[0])
    health.forget_recent()
    assert settings.FAIRWAY_METRICS_CACHE_S == 5.0
    with CaptureQueriesContext(connection) as first:
        before = scrape(client)
    assert len(first) > 5
    with CaptureQueriesContext(connection) as flood:
        for _ in range(20):
            assert scrape(client) == before
        now[0] += 4.5
        assert scrape(client) == before
    assert len(flood) == 0, [q["sql"] for q in flood]
    now[0] += 1
    with CaptureQueriesContext(connection) as later:
        scrape(client)
        scrape(client)
    assert len(later) == len(first)

    settings.FAIRWAY_METRICS_TOKEN = "s3cret-scrape"
    with CaptureQueriesContext(connection) as refused:
        for _ in range(10):
            assert client.get("/metrics").status_code == 401
    assert len(refused) == 0
    with CaptureQueriesContext(connection) as scrapes:
        scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape")
        scrape(client, HTTP_AUTHORIZATION="Bearer s3cret-scrape")
    assert len(scrapes) == 2 * len(first)


def test_pending_held_workloads_tell_their_own_hold_from_their_budgets(tw, client):
    # brk47: `fairway_pending_workloads{reason="held"}` counted a workload's own hold (its owner's
    # or an admin's) with its budget's hold, and nothing told them apart.
    tw.workload(pending_reason="held", pending_detail={"hold": "user"}, hold="user")
    tw.workload(pending_reason="held", pending_detail={"hold": "admin"}, hold="admin")
    tw.workload(pending_reason="held", pending_detail={"hold": "admin"}, hold="admin")
    tw.workload(pending_reason="held")  # its budget's hold
    tw.workload(pending_reason="dependency", hold="user")  # held, but a dependency comes first

    m = scrape(client)

    c = ("cluster", "c1")
    assert m[("fairway_pending_workloads", (c, ("reason", "held")))] == 4
    assert m[("fairway_held_workloads", (c, ("hold", "user")))] == 1
    assert m[("fairway_held_workloads", (c, ("hold", "admin")))] == 2
    assert m[("fairway_pending_workloads", (c, ("reason", "dependency")))] == 1


def test_pending_kept_out_by_a_scheduled_drain_alone_is_reason_maintenance(tw, client):
    # left60: `reason="reserved_for_other"` counted the workloads a scheduled drain alone keeps out,
    # which every list calls "GPUs reserved for maintenance" (list59): a dashboard read a larger job.
    drain = {"host": "h1", "at": 1_796_716_800}
    tw.workload(pending_reason="reserved_for_other", pending_detail={"drain": drain})
    tw.workload(pending_reason="reserved_for_other", pending_detail={"drain": drain})
    tw.workload(pending_reason="reserved_for_other", pending_detail={"drain": drain, "reserved_for": 7})
    tw.workload(pending_reason="reserved_for_other", pending_detail={"reserved_for": 7})

    m = scrape(client)

    c = ("cluster", "c1")
    assert m[("fairway_pending_workloads", (c, ("reason", "maintenance")))] == 2
    assert m[("fairway_pending_workloads", (c, ("reason", "reserved_for_other")))] == 2
