"""The README's pictures of a lab's Fairway (``make screenshots``; skipped unless
``$FAIRWAY_SCREENSHOTS`` names the folder, so ``make test`` never runs it).

The state is the demo's, built the same way every time: ``seed_demo --hosts 4 --gpus 8`` (the
budget tree of the Philly VCs, cluster ``philly``), ``import_history philly --days 7`` (a week of
the trace run through the policy: usage, attempts, the pyramid's hours; sampled by job id, no
randomness), then the work of this morning: five workloads running (one of them idle for two
hours), two waiting for GPUs, a host draining, a temporary share. The flow pictures (login, submit,
a workload running, pending, canceled, the API docs) come from tests/e2e/test_browser.py.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

VIEWPORT = {"width": 1360, "height": 900}
SHOTS = os.environ.get("FAIRWAY_SCREENSHOTS", "")

pytestmark = pytest.mark.skipif(not SHOTS, reason="make screenshots only ($FAIRWAY_SCREENSHOTS)")

# name, budget, GPUs, minimum runtime (s), hours running (None: pending)
WORK: list[tuple[str, str, int, int, float | None]] = [
    ("llama-pretrain", "vc-11cb48", 8, 6 * 3600, 5.0),
    ("vit-finetune", "vc-51b7ef", 8, 4 * 3600, 1.5),
    ("lr-sweep-07", "vc-e13805", 4, 3600, 3.0),
    ("rl-rollouts", "vc-unknown", 4, 2 * 3600, 2.5),
    ("data-dedup", "vc-103959", 8, 3600, 0.5),
    ("moe-pretrain", "vc-6214e9", 16, 8 * 3600, None),
    ("eval-harness", "vc-ee9e8c", 8, 1800, None),
]
IDLE = "lr-sweep-07"


def build_lab(tmp_path: Path) -> dict[str, Any]:
    """The lab's state (module docstring); the workloads by name."""
    from budgets.models import Budget
    from budgets.services import apply_due_boosts, do_schedule_boost
    from scheduler import lifecycle
    from scheduler.estimates import store_estimates
    from scheduler.models import GPU, Attempt, Cluster, GpuMinuteSample, Host, Workload, WorkloadEvent
    from scheduler.services import do_set_host_state, do_submit_workload
    from scheduler.tick import run_tick
    from tests.conftest import connected

    call_command("seed_demo", "--hosts", "4", "--gpus", "8", "--tokens-out", str(tmp_path / "tokens.json"))
    cluster = Cluster.objects.get(name="philly")
    connected(*cluster.hosts.all())
    from accounts.models import User

    # The trace's jobs are the lab's past, not the researcher's own (its dashboard shows this morning's).
    User.objects.create_user("philly-trace", is_active=False)
    # As the demo (docs/demo.md): the week's work waiting at its end canceled there, saying so.
    call_command(
        "import_history", "philly", "--cluster", "philly", "--user", "philly-trace", "--days", "7",
        "--requeued", "cancel",
    )  # fmt: skip

    researcher = User.objects.get(username="researcher")
    now = timezone.now()
    made: dict[str, Workload] = {}
    for name, budget, gpus, min_runtime_s, hours in WORK:
        made[name] = do_submit_workload(
            researcher, name=name, budget=Budget.objects.get(name=budget, archived_at__isnull=True), cluster=cluster,
            gpu_model="H100", gpu_count=gpus, image="ghcr.io/lab/train:2026.12", command=["python", "train.py"],
            env={"WANDB_PROJECT": name}, min_runtime_s=min_runtime_s,
        )  # fmt: skip
        if hours is None:
            continue
        run_tick(cluster.pk)
        attempt = Attempt.objects.select_related("host").get(workload=made[name])
        lifecycle.attempt_started(attempt.host, attempt.pk)
        began = now - timedelta(hours=hours)
        Attempt.objects.filter(pk=attempt.pk).update(
            placed_at=began, started_at=began, protected_until=began + timedelta(seconds=min_runtime_s)
        )
        Workload.objects.filter(pk=made[name].pk).update(submitted_at=began - timedelta(minutes=3))
        # its events say the same instants as its fields (submitted 3 minutes before it started)
        WorkloadEvent.objects.filter(workload=made[name], kind="submitted").update(at=began - timedelta(minutes=3))
        WorkloadEvent.objects.filter(workload=made[name]).exclude(kind="submitted").update(at=began)
        minute = now.replace(second=0, microsecond=0)
        GpuMinuteSample.objects.bulk_create(
            [
                GpuMinuteSample(
                    gpu=g, minute=minute - timedelta(minutes=m), samples=2, utilization_samples=2,
                    utilization_sum=2 * (0.0 if name == IDLE and m < 120 else 55.0 + (m * 7 + g.index * 13) % 40),
                )
                for g in GPU.objects.filter(attempt_links__attempt=attempt)
                for m in range(min(170, int(hours * 60)))
            ]
        )  # fmt: skip
    Host.objects.filter(cluster=cluster).update(last_heartbeat=now)
    admin = User.objects.get(username="admin")
    protected = Attempt.objects.select_related("host").get(workload=made["vit-finetune"])
    do_set_host_state(admin, protected.host, "draining", "NVLink firmware update")
    do_schedule_boost(
        admin, Budget.objects.get(name="vc-103959"), 3, now + timedelta(days=2), note="NeurIPS camera-ready"
    )
    apply_due_boosts()
    run_tick(cluster.pk)
    store_estimates(cluster.pk, timezone.now())
    return {"workloads": made, "drained": protected.host}


def test_a_lab_week_in_pictures(transactional_db: None, live_server: Any, chromium: Any, tmp_path: Path) -> None:
    lab = build_lab(tmp_path)
    shots = Path(SHOTS)
    shots.mkdir(parents=True, exist_ok=True)
    work = lab["workloads"]

    def shot(page: Any, path: str, name: str, *, full_page: bool = True) -> None:
        page.goto(path)
        page.wait_for_load_state("load")
        page.wait_for_timeout(300)  # the pages' live parts (websockets) have no "network idle"
        page.screenshot(path=str(shots / f"{name}.png"), full_page=full_page)

    from budgets.models import Budget
    from tests.browser import log_in

    page = chromium.page(live_server.url, viewport=VIEWPORT)
    log_in(page, "researcher", "fairway-demo")
    shot(page, "/", "04-dashboard")
    shot(page, "/workloads/", "08-workloads", full_page=False)  # the first screen: 50 rows of the week follow
    shot(page, "/budgets/", "09-budgets")
    shot(page, "/clusters/", "10-clusters")
    shot(page, "/metrics/", "11-metrics")
    shot(page, f"/workloads/{work['moe-pretrain'].pk}/", "07b-workload-pending-fair-share")
    shot(page, f"/workloads/{work[IDLE].pk}/", "16-workload-idle")

    admin = chromium.page(live_server.url, viewport=VIEWPORT)
    # the admin's navigation sidebar closed: the page's own content is the picture
    admin.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    log_in(admin, "admin", "fairway-admin")
    shot(admin, "/clusters/", "10b-clusters-admin-draining")
    boosted = Budget.objects.get(name="vc-103959")
    shot(admin, f"/admin/budgets/budget/{boosted.pk}/change/", "17-admin-budget-temporary-share")
