"""num42: an attempt on an offline host counts, as demand, up to the instant its usage counts to.

While a host is ``offline``, its running attempt's usage stops at the host's last heartbeat
(``accounting.silent_until``, DESIGN.md §4), but its workload's demand kept growing with the
clock, so the budget's attainment (DESIGN.md §8) fell (96 % → 23 % in the demo) for work stuck
on the silent host. Demand now reads the same statement (``accounting.silent_until_of``).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from budgets.services import load_tree
from scheduler.models import Attempt, Host, Workload
from scheduler.reports import budget_standings
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def _surfaces(monkeypatch, at, cluster, researcher, admin) -> dict[str, object]:
    """olmo's attainment at ``at`` on the budgets page, the API's budgets tree, ``fairway budgets``
    and the admin what-if's actual column, and its demand and usage in the standing."""
    monkeypatch.setattr(timezone, "now", lambda: at)
    olmo = next(b for b in budget_standings(cluster, load_tree(), at).budgets if b.path == "nlp/olmo")
    out: dict[str, object] = {
        "standing": olmo.attainment,
        "demand": olmo.demand_gpu_hours,
        "usage": olmo.usage_gpu_hours,
    }
    client = APIClient()
    client.force_login(researcher)
    tree = client.get("/api/v1/budgets/tree/", {"cluster": cluster.name}).json()[0]
    out["api"] = next(b for b in tree["budgets"] if b["path"] == "nlp/olmo")["attainment"]
    html = client.get("/budgets/").content.decode()
    row = re.search(r'<tr[^>]*data-budget="nlp/olmo">(.*?)</tr>', html, re.S)
    assert row is not None
    out["page"] = re.search(r'<td class="num attainment">([^<]*)</td>', row.group(1)).group(1)  # type: ignore[union-attr]
    line = next(ln for ln in run_cli(monkeypatch, researcher, "budgets").splitlines() if re.match(r"\s*olmo\s", ln))
    out["cli"] = [cell for cell in line.split() if cell.endswith("%")][-1]  # SHARE, then ATTAINMENT
    admin_client = APIClient()
    admin_client.force_login(admin)
    from budgets.admin import current_shares_yaml

    answer = admin_client.post(
        "/admin/budgets/budget/what-if/", {"shares": current_shares_yaml(), "window": "7d", "cluster": cluster.name}
    )
    result = answer.context["result"]
    assert result["actual_is_standing"]
    out["what_if"] = next(r["actual"] for r in result["budgets"] if r["budget"] == "nlp/olmo")["attainment"]
    return out


def test_attainment_of_work_on_an_offline_host_holds_still_on_every_surface(
    researcher, researcher_client, admin, submission, cluster, org_tree, monkeypatch
):
    # Given olmo's only workload: 4 H100s, submitted 300 s ago, started 200 s ago on h100-1,
    # whose agent has been silent for the last 140 s (offline, not yet lost)
    wid = researcher_client.post(
        "/api/v1/workloads/", submission(gpu_model="H100", min_runtime="1h"), format="json"
    ).json()["id"]
    run_tick(cluster.pk)
    now = timezone.now().replace(microsecond=0)
    Workload.objects.filter(pk=wid).update(state=Workload.State.RUNNING, submitted_at=now - timedelta(seconds=300))
    Attempt.objects.filter(workload_id=wid).update(started_at=now - timedelta(seconds=200))
    Host.objects.filter(name="h100-1").update(state=Host.State.OFFLINE, last_heartbeat=now - timedelta(seconds=140))

    # When the standing is read now and 4 minutes later (still offline, not yet lost)
    first = _surfaces(monkeypatch, now, cluster, researcher, admin)
    later = _surfaces(monkeypatch, now + timedelta(minutes=4), cluster, researcher, admin)

    # Then it asked for GPUs up to the last heartbeat, as its usage counts: 4 × (100 + 60) GPU-s
    # asked, 4 × 60 delivered, 37.5 % at both instants and on every surface
    assert first["usage"] == pytest.approx(4 * 60 / 3600, abs=1e-3)
    assert first["demand"] == pytest.approx(4 * 160 / 3600, abs=1e-3)
    assert first["standing"] == pytest.approx(0.375)
    assert first == later
    assert first["api"] == first["what_if"] == first["standing"]
    assert first["page"] == first["cli"] == "37.5%"

    # And once the host is back, the attempt runs now: demand and usage grow with the clock again
    Host.objects.filter(name="h100-1").update(state=Host.State.ACTIVE, last_heartbeat=now + timedelta(minutes=4))
    back = _surfaces(monkeypatch, now + timedelta(minutes=4), cluster, researcher, admin)
    assert back["demand"] == pytest.approx(4 * 540 / 3600, abs=1e-3)
    assert back["usage"] == pytest.approx(4 * 440 / 3600, abs=1e-3)
