"""try63: a host drained for maintenance while a workload waits on protected work elsewhere. Its
reason read "Protected work on gpu2 ends at 07:53:29 UTC, the earliest it could take those GPUs"
while the clusters page showed GPUs free on gpu1 (draining), and nothing said why those did not
count. The hosts that take no new work are named for ``protected_work`` and ``fair_share`` too, as
they were for ``insufficient_gpus`` (tryout24), on every surface (the API, the page and ``fairway
show`` print the one sentence list of ``reports.explain_pending``)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduler import reports
from scheduler.models import Host, Workload
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli

NAMED = "8 A100 GPUs are on hosts that take no new work (draining: a100-1)."


@pytest.mark.parametrize(
    ("reason", "detail"),
    [
        ("protected_work", {"hosts": ["a100-2"], "protected_until": None}),
        ("fair_share", {"host": "a100-2", "budget": "nlp", "other_budget": "vision", "blocking": []}),
    ],
)
def test_a_reason_naming_busy_hosts_also_names_those_taking_no_new_work(
    reason, detail, researcher, researcher_client, hosts, submit_kwargs, monkeypatch
):
    Host.objects.filter(pk=hosts["a100-1"].pk).update(state=Host.State.DRAINING)
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_model="A100", gpu_count=1))
    if detail.get("protected_until", 0) is None:
        detail = {**detail, "protected_until": int(timezone.now().timestamp()) + 3600}
    Workload.objects.filter(pk=waiting.pk).update(pending_reason=reason, pending_detail=detail)
    waiting.refresh_from_db()

    assert NAMED in reports.explain_pending(waiting).sentences
    assert NAMED in researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()["why_pending"]
    assert NAMED in run_cli(monkeypatch, researcher, "show", str(waiting.pk))


def test_with_every_host_taking_work_nothing_more_is_said(researcher, hosts, submit_kwargs):
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_model="A100", gpu_count=1))
    until = int(timezone.now().timestamp()) + 3600
    Workload.objects.filter(pk=waiting.pk).update(
        pending_reason="protected_work", pending_detail={"hosts": ["a100-2"], "protected_until": until}
    )
    waiting.refresh_from_db()
    assert not any("take no new work" in line for line in reports.explain_pending(waiting).sentences)
