"""left41: "a host is offline" (its attempts have run only up to its last heartbeat, DESIGN.md §4)
is one rule, ``accounting.host_silent_since``: its SQL form (``SILENT_HOST``/``SILENT_LINK``), the
accounting's readers and the snapshot's hosts (the budgets' usage) read it, and agree on the same
state at the same instant, on either side of ``HOST_OFFLINE_AFTER_S``."""

from __future__ import annotations

import itertools
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone

from scheduler import snapshot as snap
from scheduler.accounting import SILENT_HOST, accounting, host_silent_since, silent_until, with_accounting
from scheduler.lifecycle import sweep_hosts
from scheduler.models import Attempt, Host, Workload
from scheduler.policy.usage import windowed_usage
from scheduler.tick import run_tick


def test_the_sql_form_is_the_rule_on_every_combination(cluster):
    """Every host state × removed or not × heard from or not: ``SILENT_HOST`` selects exactly the
    hosts ``host_silent_since`` gives a heartbeat for (an exhaustive oracle, 16 rows)."""
    host = Host.objects.get(name="h100-1")
    now = timezone.now().replace(microsecond=0)
    for state, removed, heard in itertools.product(Host.State.values, (None, now), (None, now - timedelta(seconds=9))):
        Host.objects.filter(pk=host.pk).update(state=state, removed_at=removed, last_heartbeat=heard)
        in_sql = Host.objects.filter(SILENT_HOST, pk=host.pk).exists()
        assert in_sql == (host_silent_since(state, removed, heard) is not None), (state, removed, heard)
        assert host_silent_since(state, removed, heard) in (None, heard)


@pytest.mark.parametrize("past", [True, False], ids=["just-past-the-threshold", "just-before-it"])
def test_snapshot_and_accounting_agree_at_the_offline_threshold(past, researcher_client, submission, cluster, org_tree):
    """4 H100s started 200 s ago; h100-1 last heard ``HOST_OFFLINE_AFTER_S`` ± 1 s ago and the
    sweep run at ``now``: just past, both the snapshot (the attempt's ``charged_until``, the budget's
    usage) and the accounting (the workload's run and charge) stop at the last heartbeat; just
    before, both count up to ``now``."""
    wid = researcher_client.post(
        "/api/v1/workloads/", submission(gpu_model="H100", min_runtime="1h"), format="json"
    ).json()["id"]
    run_tick(cluster.pk)
    now = timezone.now().replace(microsecond=0) + timedelta(seconds=5)
    attempt = Attempt.objects.get(workload_id=wid)
    Attempt.objects.filter(pk=attempt.pk).update(started_at=now - timedelta(seconds=200))
    Workload.objects.filter(pk=wid).update(state=Workload.State.RUNNING)
    Host.objects.filter(cluster=cluster).update(last_heartbeat=now)
    after = settings.FAIRWAY["HOST_OFFLINE_AFTER_S"] + (1 if past else -1)
    heartbeat = now - timedelta(seconds=after)
    Host.objects.filter(name="h100-1").update(last_heartbeat=heartbeat)
    sweep_hosts(now=now)
    assert Host.objects.get(name="h100-1").state == (Host.State.OFFLINE if past else Host.State.ACTIVE)
    ran = 200 - after if past else 200

    acct = accounting(with_accounting(Workload.objects.filter(pk=wid)).get(), now)
    assert acct["elapsed_s"] == ran and acct["charged_gpu_seconds"] == 4 * ran
    links = Attempt.objects.get(pk=attempt.pk).gpu_links.select_related("gpu__host")
    assert silent_until(links) == (heartbeat if past else None)

    snap.forget_kept()
    for hardware in (snap._hardware_plain, snap._hardware_kept, snap._hardware_kept):  # kept: read, then reused
        s, _index = snap._load_snapshot(cluster.pk, now, str, hardware)
        (open_attempt,) = s.attempts
        assert open_attempt.charged_until == (snap.epoch(heartbeat) if past else None)
        usage = windowed_usage(s.usage, s.attempts, snap.epoch(now), s.window)
        assert usage[open_attempt.budget] == acct["charged_gpu_seconds"]


def test_no_other_source_states_the_rule_again():
    """The snapshot wrote ``state == Host.State.OFFLINE and last`` beside accounting's rule; the
    scenario runner ``state=OFFLINE, removed_at__isnull=True, last_heartbeat__isnull=False``."""
    root = Path(__file__).resolve().parents[2]
    again = re.compile(r"State\.OFFLINE\s+and\s+\w*last|last_heartbeat__isnull=False")
    offenders = [
        str(path.relative_to(root))
        for folder in ("scheduler", "web", "budgets")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "accounting.py" and again.search(path.read_text())
    ]
    assert offenders == []
