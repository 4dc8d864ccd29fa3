"""One standing (issue 13, point 1): every surface shows the same budget figures at one instant.

Given one state (usage history, running protected work, a pending workload, a finished one) and
the clock frozen, the API's ``budgets/tree/``, the budgets page, ``fairway budgets``, the admin
what-if's actual column, the pyramid's per-budget impact and the Prometheus budget series all
show the numbers of ``scheduler.reports.budget_standings`` (:func:`scheduler.policy.figures.budget_figures`).
"""

from __future__ import annotations

import io
import re
from datetime import timedelta
from fractions import Fraction

import pytest
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from budgets.models import UsageEntry
from budgets.services import load_tree
from fairway_cli.numbers import gpu_hours_text
from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.policy.figures import attainment, workload_demand
from scheduler.reports import budget_standings, ratio_texts
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


@pytest.fixture
def frozen_world(researcher, cluster, org_tree, submit_kwargs, monkeypatch, django_capture_on_commit_callbacks):
    """Two budgets with history, olmo running 16 GPUs with protection ahead and one pending; then
    the clock stops at ``at``."""
    now = timezone.now()
    UsageEntry.objects.create(
        budget=org_tree["nlp/tulu"],
        cluster=cluster,
        start=now - timedelta(hours=5),
        end=now - timedelta(hours=1),
        gpus=2,
    )
    UsageEntry.objects.create(
        budget=org_tree["vision/sam"],
        cluster=cluster,
        start=now - timedelta(hours=3),
        end=now - timedelta(hours=2),
        gpus=3,
    )
    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(3):
            do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
        run_tick(cluster.pk)
        for attempt in Attempt.objects.filter(workload__cluster=cluster).select_related("host"):
            lifecycle.attempt_started(attempt.host, attempt.pk)
    at = timezone.now() + timedelta(minutes=7)
    monkeypatch.setattr(timezone, "now", lambda: at)
    return cluster, at


def _prom(client) -> dict[tuple[str, str], float]:
    text = client.get("/metrics").content.decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("fairway_budget_") and "budget" in s.labels:
                out[(s.name, s.labels["budget"])] = s.value
    return out


def test_every_surface_shows_the_same_standing_at_one_instant(
    frozen_world, researcher, admin, client, researcher_client, monkeypatch
):
    cluster, at = frozen_world
    standing = budget_standings(cluster, load_tree(), at)
    rows = {b.path: b for b in standing.budgets}
    olmo, tulu, sam = rows["nlp/olmo"], rows["nlp/tulu"], rows["vision/sam"]
    # The state is not trivial: usage, commitment and three different ratios.
    assert olmo.usage_gpu_hours > 0 and olmo.committed_gpu_hours > 0 and tulu.usage_gpu_hours == 8.0
    assert len({olmo.ratio, tulu.ratio, sam.ratio}) == 3

    # API
    api = {b["path"]: b for b in researcher_client.get("/api/v1/budgets/tree/").json()[0]["budgets"]}
    for path, b in rows.items():
        for field in (
            "usage_gpu_hours",
            "committed_gpu_hours",
            "entitlement_gpu_hours",
            "ratio",
            "ratio_text",
            "rank",
            "demand_gpu_hours",
            "owed_gpu_hours",
            "attainment",
            "effective_usage",
        ):
            assert api[path][field] == getattr(b, field), (path, field)

    # Web page: each row shows the same ratio text and attainment
    page = APIClient()
    page.force_login(researcher)
    html = page.get("/budgets/").content.decode()
    for path, b in rows.items():
        row = re.search(rf'<tr[^>]*data-budget="{re.escape(path)}">(.*?)</tr>', html, re.S)
        assert row is not None, path
        cells = row.group(1)
        if b.ratio is not None:
            assert f'<td class="num ratio">{b.ratio_text}×</td>' in cells, path
        attain = "–" if b.attainment is None else f"{b.attainment * 100:.1f}%"
        assert f'<td class="num attainment">{attain}</td>' in cells, path
        assert "usage-plot" in cells
        # GPU-hours in the one wording (fairway_cli.numbers.gpu_hours_text), as the CLI prints them
        assert f'<td class="num usage">{gpu_hours_text(b.usage_gpu_hours)}</td>' in cells, path
        assert f'<td class="num">{gpu_hours_text(b.committed_gpu_hours)}</td>' in cells, path

    # CLI (its API calls answered in-process, at the same frozen instant)
    cli_out = run_cli(monkeypatch, researcher, "budgets")
    for b in (olmo, tulu, sam):
        line = next(ln for ln in cli_out.splitlines() if re.match(rf"\s*{b.name}\s", ln))
        assert f"{b.ratio_text}×" in line.split()
        assert (f"{b.attainment * 100:.1f}%" if b.attainment is not None else "-") in line.split()
        # tryout: the CLI printed GPU-hours with one decimal ("2.3"), the page with up to two ("2.33")
        for hours in (b.entitlement_gpu_hours, b.usage_gpu_hours, b.committed_gpu_hours, b.owed_gpu_hours):
            assert gpu_hours_text(hours) in line.split(), (b.path, hours)

    # fairway share: EffectvUsage is the standing's, Slurm's Fair Tree one (usage over the parent's);
    # tryout: it printed usage over the cluster's GPU-hours, computed by the CLI
    nlp, org = rows["nlp"], rows["org"]
    assert olmo.effective_usage == pytest.approx(olmo.usage_gpu_hours / nlp.usage_gpu_hours, rel=1e-3)
    assert 0 < tulu.effective_usage < 1 and olmo.effective_usage + tulu.effective_usage == pytest.approx(1)
    assert nlp.effective_usage + rows["vision"].effective_usage == pytest.approx(1) and org.effective_usage == 1.0
    share_out = run_cli(monkeypatch, researcher, "share")
    columns = share_out.splitlines()[1].split()
    for b in (org, nlp, olmo, tulu, sam):
        line = next(ln for ln in share_out.splitlines() if re.match(rf"\s*{b.name}\s", ln))
        cells = line.split()
        if b is org:  # the root's RawShares is blank, as sshare's
            cells.insert(columns.index("RawShares"), "")
        assert cells[columns.index("EffectvUsage")] == f"{b.effective_usage:.6f}", b.path

    # Admin what-if over the lookback window: the actual column is the standing
    admin_client = APIClient()
    admin_client.force_login(admin)
    from budgets.admin import current_shares_yaml

    answer = admin_client.post(
        "/admin/budgets/budget/what-if/", {"shares": current_shares_yaml(), "window": "7d", "cluster": cluster.name}
    )
    result = answer.context["result"]
    actual = {r["budget"]: r["actual"] for r in result["budgets"]}
    assert result["actual_is_standing"] and actual["nlp/olmo"] is not None
    for b in (olmo, tulu, sam):
        if actual.get(b.path) is not None:
            assert actual[b.path]["attainment"] == b.attainment
            assert actual[b.path]["delivered_gpu_h"] == b.usage_gpu_hours

    # Pyramid: per-budget impact
    pyramid = researcher_client.get("/api/v1/metrics/pyramid/").json()[0]
    impact = {b["path"]: b for b in pyramid["budgets"]}
    for b in (olmo, tulu, sam):
        assert impact[b.path]["attainment"] == b.attainment
        assert impact[b.path]["delivered_gpu_hours"] == b.usage_gpu_hours
        assert impact[b.path]["owed_gpu_hours"] == b.owed_gpu_hours

    # Prometheus: the same numbers in base units
    prom = _prom(client)
    for b in (olmo, tulu, sam):
        assert prom[("fairway_budget_usage_gpu_seconds", b.path)] == pytest.approx(b.usage_gpu_hours * 3600)
        assert prom[("fairway_budget_committed_gpu_seconds", b.path)] == pytest.approx(b.committed_gpu_hours * 3600)
        assert prom[("fairway_budget_usage_entitlement_ratio", b.path)] == pytest.approx(b.ratio, rel=1e-12)


def test_attainment_counts_each_workload_for_at_most_the_run_time_it_needed():
    # The finding: after a replay with nothing pending, the budgets page said 33 % and the what-if
    # 1.0. A workload that waited 2 h and ran 1 h asked for 1 h of GPU-time, not 3 h (DESIGN.md §8
    # as docs/simulation.md reads it); the budget got all it asked for.
    demand = workload_demand(gpus=4, present_s=3 * 3600, need_s=3600)
    assert demand == 4 * 3600
    assert attainment(4 * 3600, 10**9, demand) == 1
    # A workload still waiting asks for all its presence; over-service is capped at 1.
    assert workload_demand(gpus=2, present_s=600, need_s=None) == 1200
    assert attainment(600, 10**9, 1200) == Fraction(1, 2)
    assert attainment(500, 100, 10**6) == 1
    assert attainment(5, 0, 100) is None


def test_finished_waiting_workload_is_fully_attained_on_every_surface(researcher, cluster, submit_kwargs):
    # Given a workload that waited, ran and finished, nothing pending
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    now = timezone.now()
    Workload.objects.filter(pk=w.pk).update(submitted_at=now - timedelta(hours=3))
    run_tick(cluster.pk)
    attempt = Attempt.objects.get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=now - timedelta(hours=1))
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=now, started_at=now - timedelta(hours=1))
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.SUCCEEDED, finished_at=now)
    olmo = next(b for b in budget_standings(cluster, load_tree(), now).budgets if b.path == "nlp/olmo")
    assert olmo.demand_gpu_hours == pytest.approx(4.0, abs=0.01)
    assert olmo.attainment == 1.0  # not 33 %: it got all the GPU-time its work needed


def test_ratio_texts_never_print_two_different_ratios_the_same():
    assert ratio_texts([0.00012341, 0.00012344, None, 0]) == ["0.00012341", "0.00012344", "–", "0"]
    assert ratio_texts([0.0001234, 0.0001239]) == ["0.000123", "0.000124"]
    assert ratio_texts([1.5, 0.25]) == ["1.5", "0.25"]
    a, b = ratio_texts([1 / 3, 1 / 3 + 1e-9])
    assert a != b


def test_demand_counts_only_work_that_could_run(researcher, outsider, cluster, org_tree, submit_kwargs):
    """tryout: a budget's demand counted work waiting for its prerequisites (``after``) and work of a
    held budget, so a budget whose runnable work all ran read as starved. Demand is the time a
    workload could run (docs/standing.md, "Demand is work that could run"; ``asking_span``)."""
    from budgets.services import do_set_hold

    now = timezone.now()
    two_hours_ago = now - timedelta(hours=2)
    # Given, in olmo, a 4-GPU workload that waits (2 h) for one still running, 1 h ago started
    first = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    second = do_submit_workload(researcher, **submit_kwargs(gpu_count=4), after=[first.pk])
    Workload.objects.filter(pk__in=[first.pk, second.pk]).update(submitted_at=two_hours_ago)
    run_tick(cluster.pk)
    assert Workload.objects.get(pk=second.pk).pending_reason == "dependency"
    attempt = Attempt.objects.get(workload=first)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=now - timedelta(hours=1))
    # and in sam, on hold, a 2-GPU workload waiting for 2 h
    held = do_submit_workload(outsider, **submit_kwargs(gpu_count=2, budget=org_tree["vision/sam"]))
    do_set_hold(org_tree["vision/sam"], True)
    Workload.objects.filter(pk=held.pk).update(submitted_at=two_hours_ago)
    run_tick(cluster.pk)
    assert Workload.objects.get(pk=held.pk).pending_reason == "held"

    # When the standing is read
    standing = {b.path: b for b in budget_standings(cluster, load_tree(), now).budgets}

    # Then olmo's demand is the first workload's presence only (4 GPUs × 2 h), sam's nothing
    assert standing["nlp/olmo"].demand_gpu_hours == pytest.approx(8.0, abs=0.01)
    assert standing["vision/sam"].demand_gpu_hours == 0
    assert standing["vision/sam"].attainment is None  # nothing was owed

    # And once the prerequisite has finished, the second asks from that instant on
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=now - timedelta(minutes=30))
    Workload.objects.filter(pk=first.pk).update(state=Workload.State.SUCCEEDED, finished_at=now - timedelta(minutes=30))
    Workload.objects.filter(pk=second.pk).update(pending_reason="insufficient_gpus")
    olmo = next(b for b in budget_standings(cluster, load_tree(), now).budgets if b.path == "nlp/olmo")
    # first: present 1.5 h, ran 0.5 h → 4 × 0.5 h; second: 30 min asking, 4 GPUs → 2 GPU-h
    assert olmo.demand_gpu_hours == pytest.approx(2.0 + 2.0, abs=0.01)


def test_simulate_from_db_shows_the_admin_what_ifs_actual_column(
    researcher, cluster, org_tree, submit_kwargs, tmp_path, monkeypatch
):
    """try32: ``manage.py simulate --from-db --since 7d`` printed olmo's actual attainment as 21 %
    (the simulator's own demand, counting work waiting for its prerequisites) while the admin
    what-if and the budgets page said 74 %; over the lookback window both now show the standing."""
    import json

    from django.core.management import call_command

    from fairway_cli.numbers import percent_text

    now = timezone.now()
    monkeypatch.setattr(timezone, "now", lambda: now)
    # Given, in olmo, a 4-GPU workload that ran for 1 h and one waiting (2 h) for it
    first = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    second = do_submit_workload(researcher, **submit_kwargs(gpu_count=4), after=[first.pk])
    Workload.objects.filter(pk__in=[first.pk, second.pk]).update(submitted_at=now - timedelta(hours=2))
    run_tick(cluster.pk)
    attempt = Attempt.objects.get(workload=first)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=now - timedelta(hours=1))
    olmo = next(b for b in budget_standings(cluster, load_tree(), now).budgets if b.path == "nlp/olmo")
    assert olmo.attainment is not None

    # When leadership runs the what-if from the command line over the lookback window
    out = io.StringIO()
    call_command("simulate", "--from-db", "--since", "7d", "--out", str(tmp_path), stdout=out)

    # Then its actual column is olmo's standing, as on the admin page, and it says so
    result = json.loads((tmp_path / "whatif.json").read_text())
    actual = next(r["actual"] for r in result["budgets"] if r["budget"] == "nlp/olmo")
    assert result["actual_is_standing"] is True
    assert actual["attainment"] == olmo.attainment
    assert actual["delivered_gpu_h"] == olmo.usage_gpu_hours
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("nlp/olmo"))
    assert line.split()[2] == percent_text(olmo.attainment, 1)  # try44: as the admin page writes it
    assert "as on the budgets page" in out.getvalue()
