"""try63: unallocated work (M = 0) kept out by CPUs or memory, not GPUs. A host had 3 GPUs free
and 2 of its 32 CPUs left (one allocated workload asked 30); a 2-GPU unallocated workload asking
its per-GPU share of CPUs waited as "not enough GPUs" ("Unallocated work ... and not enough are
free now for its 2 × H100") beside the 3 free GPUs on the clusters page. Its reason now says which
resource is short (``resources``), as an allocated workload's does (DESIGN.md §3.3, §3.8), in the
policy and its oracle alike, and the words follow (``fairway_cli.words.reason_words``)."""

from __future__ import annotations

from dataclasses import replace

from fairway_cli.words import reason_words
from scheduler.policy import GpuHealth, Host, Snapshot, schedule
from scheduler.policy.reference import reference_schedule
from tests.policy.builders import pending, running, snap, tree
from tests.policy.oracle_harness import differences

G = 1 << 30


def _host(name: str, cpus: int | None = 32, memory: int | None = 256 * G, gpus: int = 4) -> Host:
    return Host(name, "H100", dict.fromkeys(range(gpus), GpuHealth.HEALTHY), cpus=cpus, memory=memory)


def _both(s: Snapshot):  # noqa: ANN202
    fast, ref = schedule(s), reference_schedule(s)
    assert differences(s, fast, ref) == []
    return fast


def test_unallocated_work_kept_out_by_cpus_says_cpus():
    hog = replace(running("a1", "A", [("h1", 0)]), cpus=30)
    dec = _both(snap([_host("h1")], tree("A", "B"), [hog], [pending("u", "B", 2, m=0)]))
    assert not dec.starts
    info = dec.pending["u"]
    assert (info.reason, info.detail.get("resources")) == ("insufficient_gpus", ["cpus"])
    assert reason_words(info.reason, info.detail["resources"]) == "not enough CPUs"


def test_unallocated_work_kept_out_by_memory_and_cpus_says_both():
    hog = replace(running("a1", "A", [("h1", 0)]), cpus=30, memory=250 * G)
    dec = _both(snap([_host("h1")], tree("A", "B"), [hog], [pending("u", "B", 2, m=0)]))
    assert dec.pending["u"].detail.get("resources") == ["cpus", "memory"]


def test_unallocated_work_short_of_gpus_says_nothing_of_cpus():
    hog = replace(running("a1", "A", [("h1", 0), ("h1", 1), ("h1", 2)]), cpus=30)
    dec = _both(snap([_host("h1")], tree("A", "B"), [hog], [pending("u", "B", 2, m=0)]))
    assert (dec.pending["u"].reason, dec.pending["u"].detail) == ("insufficient_gpus", {})


def test_its_page_api_and_cli_say_cpus(researcher, researcher_client, submit_kwargs, monkeypatch):
    from scheduler import reports
    from scheduler.models import Workload
    from scheduler.services import do_submit_workload
    from tests.cli.inprocess import run_cli

    w = do_submit_workload(researcher, **submit_kwargs(gpu_model="A100", gpu_count=2, min_runtime_s=0))
    Workload.objects.filter(pk=w.pk).update(pending_reason="insufficient_gpus", pending_detail={"resources": ["cpus"]})
    w.refresh_from_db()

    said = (
        "Not enough CPUs for it: it asks for its per-GPU share of CPUs per host, and the hosts with 2 A100 GPUs "
        "free have less left (unallocated work only uses what no allocated work holds)."
    )
    assert reports.explain_pending(w).sentences == (said,)
    data = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert data["why_pending"] == [said] and data["pending_resources"] == ["cpus"]
    assert said in run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert "not enough CPUs" in run_cli(monkeypatch, researcher, "ls")
