"""left40: one displayed share for a live, an archived-with-work and an archived-without-work budget.

DESIGN.md §3.7: an archived budget with work still counts in its siblings' normalization; once it
has no work left it drops out. The figure is the policy's (``BudgetTree.live`` and
``normalized_shares`` on the cluster's snapshot, ``scheduler.policy.figures.budget_figures``), and
every surface shows it: the budgets page, ``GET budgets/tree/``, ``GET budgets/``, the admin's list
and the admin what-if (both columns).

Before: an archived budget without work showed a share and an entitlement computed as if it were
live (``nlp/gone`` 40 %: nlp's live children and it summed to more than nlp), and the what-if
counted as "with work" only the workloads submitted inside its window, so an archived budget whose
work was older than the window showed a third entitlement, its siblings a larger one.
"""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from budgets.admin import current_shares_yaml
from budgets.models import Budget
from budgets.services import do_archive_budget, do_create_budget, load_tree
from fairway_cli.numbers import gpu_hours_text
from scheduler.reports import budget_standings
from scheduler.services import do_submit_workload

EXPECTED = {
    "vision/sam": Fraction(1, 3),  # live
    "nlp/tulu": Fraction(1, 3),  # live: nlp's 2/3 over tulu and olmo
    "nlp/olmo": Fraction(1, 3),  # archived, its work pending: still counted (§3.7)
    "nlp/gone": Fraction(0),  # archived, no work: dropped out, entitled to nothing
}


@pytest.fixture
def world(org_tree, manager, outsider, cluster, submit_kwargs):
    do_submit_workload(outsider, **submit_kwargs(gpu_count=1, budget=org_tree["vision/sam"]))  # a replay to run
    gone = do_create_budget(name="gone", parent=org_tree["nlp"], shares=3)
    old = timezone.now() - timedelta(days=8)  # before the what-if's 7-day window: still pending
    do_submit_workload(manager, **submit_kwargs(gpu_count=1, submitted_at=old))
    do_archive_budget(Budget.objects.get(pk=org_tree["nlp/olmo"].pk))
    do_archive_budget(gone)
    return cluster


def _cells(html: str, row_pattern: str) -> list[str]:
    row = re.search(row_pattern, html, re.S)
    assert row is not None, row_pattern
    return [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]


def test_every_surface_shows_the_policys_share_of_live_and_archived_budgets(world, admin, researcher_client) -> None:
    cluster = world
    standing = {b.path: b for b in budget_standings(cluster, load_tree()).budgets}
    for path, share in EXPECTED.items():
        assert Fraction(standing[path].normalized_share).limit_denominator(1000) == share, path
    assert standing["nlp/gone"].entitlement_gpu_hours == 0 and standing["nlp/gone"].ratio is None
    pct = {path: f"{float(share) * 100:.1f}%" for path, share in EXPECTED.items()}
    entitled = {path: gpu_hours_text(standing[path].entitlement_gpu_hours) for path in EXPECTED}

    # budgets/tree/ and budgets/
    (tree,) = researcher_client.get("/api/v1/budgets/tree/", {"cluster": cluster.name}).json()
    by_path = {b["path"]: b for b in tree["budgets"]}
    listed = {b["path"]: b for b in researcher_client.get("/api/v1/budgets/").json()}
    for path, share in EXPECTED.items():
        assert by_path[path]["normalized_share"] == pytest.approx(float(share), abs=1e-9), path
        assert by_path[path]["entitlement_gpu_hours"] == standing[path].entitlement_gpu_hours, path
        assert listed[path]["normalized_share"] == pytest.approx(float(share), abs=1e-9), path

    # the budgets page
    web = APIClient()
    web.force_login(admin)
    html = web.get("/budgets/").content.decode()
    for path in EXPECTED:
        cells = _cells(html, rf'<tr[^>]*data-budget="{re.escape(path)}">(.*?)</tr>')
        assert cells[2] == pct[path] and cells[3] == entitled[path], (path, cells)

    # the admin's list
    html = web.get(reverse("admin:budgets_budget_changelist")).content.decode()
    for path in EXPECTED:
        cells = _cells(html, rf"<tr>(?:(?!</tr>).)*?>{re.escape(path)}</(?:a|td|th)>(.*?)</tr>")
        assert pct[path] in cells, (path, cells)
        assert f"{cluster.name}: {entitled[path]}" in cells, (path, cells)

    # the what-if, both columns (the same shares: the same entitlement)
    page = web.post(
        "/admin/budgets/budget/what-if/", {"shares": current_shares_yaml(), "window": "7d", "cluster": cluster.name}
    ).content.decode()
    rows = {
        cells[0]: cells
        for row in re.findall(r'<tr class="whatif-row">(.*?)</tr>', page, re.S)
        for cells in [[c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]]
    }
    for path in EXPECTED:
        assert rows[path][2] == entitled[path], (path, rows[path])
        assert rows[path][3] == entitled[path], (path, rows[path])
