"""try59: the cluster's only host has a drain scheduled in an hour; a workload whose minimum runtime
would cross it waits, its reason saying "reserved for maintenance. Host h1 drains at 02:48:07 UTC
before its minimum runtime would end". Its estimate said "No start within the next 7 days: the last
estimate found none unless work ends before its wall-time limit (…)": the drain, which the estimate
foresees (docs/deploy.md "Scheduled drains") and after which the host takes no work until resumed,
is what keeps it waiting, not the running work's limits."""

from __future__ import annotations

from datetime import timedelta

from scheduler.models import Host
from scheduler.reports import estimate_words
from scheduler.snapshot import epoch


def test_a_drain_keeping_it_off_the_only_host_is_named_by_its_estimate(tw):
    at = (tw.now + timedelta(hours=1)).replace(microsecond=0)
    host = tw.host("gpu01", gpus=2, drain_at=at)
    running = tw.workload(gpus=1)
    tw.attempt(running, list(host.gpus.all())[:1])
    w = tw.workload(gpus=1, min_runtime=7200)
    w.no_start_found = True
    w.pending_reason = "reserved_for_other"
    w.pending_detail = {"host": "gpu01", "reserved_for": None, "drain": {"host": "gpu01", "at": epoch(at)}}
    w.save()
    words = estimate_words(w)
    assert words.startswith("No start within the next"), words
    assert "wall-time limit" not in words, words
    assert "Host gpu01 drains at" in words and "resumed" in words, words
    assert Host.objects.get(pk=host.pk).drain_at == at
