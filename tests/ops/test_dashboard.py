"""``deploy/grafana/fairway.json``: every query names metrics Fairway exports (from a live scrape), and
the dashboard shows the pyramid, each budget against its entitlement, the queue and the tick."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.ops.conftest import scrape_text

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "fairway.json"
METRIC = re.compile(r"\bfairway_[a-z0-9_]+")


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every templating query."""
    found = [(p["title"], t["expr"]) for p in panels(dashboard) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            found.append((f"${var['name']}", var["definition"]))
    return found


def exported_series_names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            names |= {family.name + "_total", family.name + "_created"}
        elif family.type == "histogram":
            names |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
        else:
            names.add(family.name)
    return names


def test_every_panel_query_names_an_exported_metric(live_world, client):
    dashboard = json.loads(DASHBOARD.read_text())
    exported = exported_series_names(scrape_text(client))
    found = queries(dashboard)
    assert len(found) > 10
    unknown = []
    for where, expr in found:
        names = METRIC.findall(expr)
        assert names, f"{where}: {expr!r} names no Fairway metric"
        unknown += [f"{where}: {name}" for name in names if name not in exported]
    assert unknown == []


def test_the_dashboard_shows_what_operators_asked_for():
    dashboard = json.loads(DASHBOARD.read_text())
    text = " ".join(expr for _where, expr in queries(dashboard))
    for metric in (
        "fairway_pyramid_availability_ratio",
        "fairway_pyramid_occupancy_ratio",
        "fairway_pyramid_utilization_ratio",
        "fairway_budget_usage_gpu_seconds",
        "fairway_budget_entitlement_gpu_seconds",
        "fairway_budget_usage_entitlement_ratio",
        "fairway_pending_workloads",
        "fairway_tick_duration_seconds_bucket",
        "fairway_wait_duration_seconds_bucket",
    ):
        assert metric in text, metric
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "fairway-overview"


RULES = DASHBOARD.parents[1] / "prometheus" / "fairway-alerts.yml"


def test_every_alert_rule_names_exported_metrics(live_world, client):
    import yaml

    exported = exported_series_names(scrape_text(client))
    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert len(rules) >= 5
    unknown = [f"{r['alert']}: {name}" for r in rules for name in METRIC.findall(r["expr"]) if name not in exported]
    assert unknown == []


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_check_rules():
    done = subprocess.run(  # noqa: S603 -- promtool from PATH, fixed arguments
        [shutil.which("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


SUM_BY = re.compile(r"sum by \(cluster\) \((fairway_[a-z_]+)(?:\{([^}]*)\})?\)")


def sum_by_cluster(text: str, selector: re.Match[str]) -> dict[str, float]:
    """PromQL's ``sum by (cluster) (name{label="v", label!="v"})`` over one scrape."""
    name, matchers = selector.group(1), selector.group(2) or ""
    wanted = [re.fullmatch(r'\s*(\w+)\s*(!?=)\s*"([^"]*)"\s*', m).groups() for m in matchers.split(",") if m.strip()]
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name != name:
                continue
            if all((sample.labels.get(k) == v) == (op == "=") for k, op, v in wanted):
                cluster = sample.labels["cluster"]
                out[cluster] = out.get(cluster, 0.0) + sample.value
    return out


def agents_alert(text: str) -> dict[str, float]:
    """FairwayAgentsDisconnected evaluated on one scrape: ``sum by (cluster) (A) - sum by (cluster)
    (B) > N`` (a vector difference keeps the clusters present on both sides, as PromQL's)."""
    import yaml

    rules = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    expr = next(r["expr"] for r in rules if r["alert"] == "FairwayAgentsDisconnected")
    left, right = SUM_BY.finditer(expr)
    threshold = float(re.search(r">\s*([0-9.]+)\s*$", expr).group(1))
    a, b = sum_by_cluster(text, left), sum_by_cluster(text, right)
    return {c: a[c] - b[c] for c in a.keys() & b.keys() if a[c] - b[c] > threshold}


def test_the_agents_alert_fires_for_a_host_whose_agent_went_silent(cluster, client):
    """ops30: the rule subtracted connected agents from the hosts *not offline*; a silent host goes
    offline after FAIRWAY_HOST_OFFLINE_AFTER_S (30 s), so the rule's `for: 10m` never elapsed and a
    dead agent never alerted (seen on a deploy: agent killed, hosts{state="offline"} 1, no alert)."""
    from django.utils import timezone

    from scheduler.models import Host

    cluster.hosts.update(last_heartbeat=timezone.now(), state=Host.State.ACTIVE)
    assert agents_alert(scrape_text(client)) == {}
    silent = cluster.hosts.order_by("name").first()
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Host.objects.filter(pk=silent.pk).update(state=Host.State.OFFLINE, last_heartbeat=an_hour_ago)
    assert agents_alert(scrape_text(client)) == {cluster.name: 1.0}
