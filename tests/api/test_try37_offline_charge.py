"""try37: an attempt on an offline host is charged up to the host's last heartbeat on every
surface, as the budgets' usage counts it (DESIGN.md §4), not up to now until it ends lost."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from budgets.models import Budget
from scheduler.models import Attempt, Host, Workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def test_an_offline_hosts_attempt_is_charged_to_its_last_heartbeat_everywhere(
    researcher, researcher_client, submission, cluster, org_tree, monkeypatch
):
    """4 H100s started 200 s ago on h100-1, silent for the last 140 s (offline, not yet lost): the
    budgets' usage counted 4 × 60 GPU-s, while the workload's charge (API, pages, ``fairway ls``),
    its attempt's row and the statement counted 4 × 200 and fell back to 4 × 60 when it ended lost."""
    wid = researcher_client.post(
        "/api/v1/workloads/", submission(gpu_model="H100", min_runtime="1h"), format="json"
    ).json()["id"]
    run_tick(cluster.pk)
    now = timezone.now().replace(microsecond=0)
    attempt = Attempt.objects.get(workload_id=wid)
    # placed and started 200 s ago (placement comes first: the efficiency's GPU-time held counts from it)
    Attempt.objects.filter(pk=attempt.pk).update(
        placed_at=now - timedelta(seconds=200), started_at=now - timedelta(seconds=200)
    )
    Workload.objects.filter(pk=wid).update(state=Workload.State.RUNNING)
    Host.objects.filter(name="h100-1").update(state=Host.State.OFFLINE, last_heartbeat=now - timedelta(seconds=140))
    expected = round(4 * 60 / 3600, 4)

    listed = next(r for r in researcher_client.get("/api/v1/workloads/").json()["results"] if r["id"] == wid)
    detail = researcher_client.get(f"/api/v1/workloads/{wid}/").json()
    assert listed["accounting"]["charged_gpu_hours"] == expected
    assert detail["accounting"]["charged_gpu_hours"] == expected
    assert detail["accounting"]["elapsed_s"] == 60
    assert detail["attempts"][0]["charged_gpu_seconds"] == 4 * 60

    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=100)
    tree = researcher_client.get("/api/v1/budgets/tree/", {"cluster": "default"}).json()[0]
    olmo = next(b for b in tree["budgets"] if b["path"] == "nlp/olmo")
    assert abs(olmo["usage_gpu_hours"] - expected) < 0.001  # the usage: the rule the charge now follows
    # the cap's usage too (snapshot.cap_records, its SQL compiled from accounting's: left40)
    assert abs(olmo["cap_used_gpu_hours"] - expected) < 0.001

    browser = Client()
    browser.force_login(researcher)
    charges = re.compile(r"[0-9.,]+ GPU-(?:min|h)\b")
    # the charge and, in the same words since left60, the efficiency's GPU-time held: both to the heartbeat
    assert charges.findall(browser.get(f"/workloads/{wid}/").content.decode()) == ["4.0 GPU-min"] * 2
    assert charges.findall(browser.get("/workloads/").content.decode()) == ["4.0 GPU-min"]
    row = next(line for line in run_cli(monkeypatch, researcher, "ls").splitlines() if line.split()[0] == str(wid))
    assert "4.0 GPU-min" in row

    budget = org_tree["nlp/olmo"]
    statement = researcher_client.get(f"/api/v1/budgets/{budget.pk}/statement.csv").content.decode()
    allocated = sum(float(line.split(",")[4]) for line in statement.splitlines()[1:] if line)
    assert abs(allocated - expected) < 0.0002

    # the three forms of the rule agree: the list's subquery, a page's query, a detail's prefetch
    from scheduler.accounting import silent_until, silent_until_of, with_accounting

    heartbeat = now - timedelta(seconds=140)
    assert with_accounting(Workload.objects.filter(pk=wid)).get().acct_open_until == heartbeat
    assert silent_until_of([wid]) == {wid: heartbeat}
    links = Attempt.objects.get(pk=attempt.pk).gpu_links.select_related("gpu__host")
    assert silent_until(links) == heartbeat
    Host.objects.filter(name="h100-1").update(state=Host.State.ACTIVE)  # back: it runs now
    assert with_accounting(Workload.objects.filter(pk=wid)).get().acct_open_until is None
    assert silent_until_of([wid]) == {} and silent_until(links.all()) is None
