"""try40: a researcher's and leadership's tryout (failing-first cases)."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.urls import reverse
from django.utils import timezone

from budgets.models import Budget, UsageEntry


def test_the_admins_budget_list_shows_a_caps_use_as_the_budgets_page(admin, cluster, org_tree):
    """The budget list, where leadership sets caps, read ``10.0 GPU-h / 7 d, then unfunded`` for a
    cap the budgets page and ``fairway budgets`` showed as ``12.0 of 10.0 GPU-h / 7 d, then unfunded
    (reached)``: one cap, one text."""
    Budget.objects.filter(pk=org_tree["nlp"].pk).update(cap_gpu_hours=10, cap_period_days=7)
    Budget.objects.filter(pk=org_tree["vision"].pk).update(cap_gpu_hours=100, cap_period_days=7)
    now = timezone.now()
    UsageEntry.objects.create(
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        start=now - timedelta(hours=4),
        end=now - timedelta(hours=1),
        gpus=4,
    )
    web = Client()
    web.force_login(admin)
    listing = web.get(reverse("admin:budgets_budget_changelist")).content.decode()
    page = web.get("/budgets/").content.decode()
    for words in ("12.0 of 10.0 GPU-h / 7 d, then unfunded (reached)", "0 of 100 GPU-h / 7 d, then unfunded"):
        assert words in page, re.findall(r"cap [^<]*", page)
        assert f">{words}<" in listing


def test_a_bad_since_is_named_once_and_quoted_on_history_and_statements(researcher, api_client_for, org_tree):
    """``fairway history --since 3x`` answered the help alone, without the value; ``fairway
    statement B --since 2026-13-01`` read "since: since: '2026-13-01' is not …": one parameter,
    one wording, the value quoted and the field named once (by the error's key)."""
    api = api_client_for(researcher)
    history = api.get("/api/v1/workloads/history/", {"since": "3x"})
    assert history.status_code == 400
    assert history.json()["since"] == [
        "'3x' is not a duration back from now (e.g. 7d, 36h, 2w) or an ISO 8601 date or date-time "
        "(e.g. 2026-11-01T00:00Z)"
    ]
    statement = api.get(f"/api/v1/budgets/{org_tree['nlp/olmo'].pk}/statement.csv", {"since": "2026-13-01"})
    assert statement.status_code == 400
    [message] = statement.json()["since"]
    assert message.startswith("'2026-13-01' is not a duration back from now"), message


def test_the_admins_workload_and_attempt_lists_write_times_and_amounts_as_every_page(
    admin, researcher, researcher_client, submission, cluster
):
    """The workload list read ``3600`` for a minimum runtime and ``Dec. 6, 2026, 12:06 p.m.``
    for a submission (the pages: ``1h``, ``12:06:28 UTC``); the attempt list wrote a protection
    ending at 12:00:15 as ``noon`` and charges in raw GPU-seconds (``4416``), where the pages
    and the CLI write ``1.23 GPU-h``."""
    from fairway_cli.numbers import gpu_time_text, instant_text
    from scheduler.models import Attempt, Workload
    from scheduler.tick import run_tick

    pk = researcher_client.post("/api/v1/workloads/", submission(gpu_count=2, min_runtime="1h"), format="json").json()[
        "id"
    ]
    run_tick(cluster.pk)
    workload = Workload.objects.get(pk=pk)
    now = timezone.now()
    Attempt.objects.filter(workload=workload).update(
        started_at=now - timedelta(hours=1),
        protected_until=now,
        ended_at=now,
        end_reason=Attempt.EndReason.SUCCEEDED,
        charged_gpu_seconds=7200,
    )
    attempt = workload.attempts.get()
    web = Client()
    web.force_login(admin)
    workloads = web.get(reverse("admin:scheduler_workload_changelist")).content.decode()
    assert ">1h<" in workloads and f">{instant_text(workload.submitted_at)}<" in workloads
    attempts = web.get(reverse("admin:scheduler_attempt_changelist")).content.decode()
    for text in (instant_text(attempt.started_at), instant_text(attempt.protected_until), gpu_time_text(7200)):
        assert f">{text}<" in attempts, text
    assert "noon" not in attempts and ">7200<" not in attempts
