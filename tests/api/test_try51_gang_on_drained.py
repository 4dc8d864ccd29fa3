"""try51: a gang of 8 H100s on a cluster of two 4-GPU hosts, one of them drained. Its page and
``fairway show`` said "Not enough H100 GPUs are free, and no work it may preempt would make room
(the GPUs are held by its own budget's work or by budgets further below their share)": it blamed
the work running on the other host, though with only 4 GPUs taking new work it could not start
even if every one of them were free. try37 said so where none takes new work; it now says how
many do wherever they are fewer than the workload asks for."""

from __future__ import annotations


def test_a_workload_larger_than_the_gpus_taking_work_is_told_so(
    researcher, researcher_client, submission, cluster, admin
):
    from scheduler.models import Host
    from scheduler.services import do_set_host_state
    from scheduler.tick import run_tick

    do_set_host_state(admin, Host.objects.get(name="a100-2"), "draining", "fan swap")
    run_tick(cluster.pk)
    assert Host.objects.get(name="a100-2").state == "drained"
    wid = researcher_client.post("/api/v1/workloads/", submission(gpu_count=16), format="json").json()["id"]
    run_tick(cluster.pk)
    detail = researcher_client.get(f"/api/v1/workloads/{wid}/").json()
    assert detail["pending_reason"] == "insufficient_gpus"
    why = " ".join(detail["why_pending"])
    assert "held by its own budget" not in why, why
    assert "only 8 of them are on hosts that take new work, fewer than its 16" in why, why
    assert "drained: a100-2" in why
