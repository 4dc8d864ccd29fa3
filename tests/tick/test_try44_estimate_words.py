"""try44: the cluster's only host draining for maintenance, work still running on it, a new
workload pending. Its reason said "4 H100 GPUs are on hosts that take no new work (draining:
gpu01)", but its estimate said "No start within the next 7 days: the last estimate found none
unless work ends before its wall-time limit", and the quote "none before Dec 13" under a note on
running work ending: the running work ending frees nothing while no host takes new work."""

from __future__ import annotations

from scheduler.estimates import quote_terms
from scheduler.models import Host
from scheduler.reports import estimate_words


def _pending_without_start(tw):
    w = tw.workload(gpus=1)
    w.no_start_found = True
    w.pending_reason = "no_capacity"
    w.save()
    return w


def test_work_running_on_the_only_host_draining_says_no_host_takes_new_work(tw):
    host = tw.host("gpu01", gpus=2, state=Host.State.DRAINING)
    running = tw.workload(gpus=1)
    tw.attempt(running, list(host.gpus.all())[:1])
    w = _pending_without_start(tw)
    words = estimate_words(w)
    assert words.startswith("No start within the next"), words
    assert "unless work ends" not in words, words
    assert "no host takes new work (1 draining)" in words, words
    notes = quote_terms(w).notes
    assert any("no host takes new work (1 draining)" in note for note in notes), notes


def test_with_an_active_host_the_words_keep_the_wall_time_limit(tw):
    host = tw.host("gpu01", gpus=1)
    tw.host("gpu02", gpus=1, state=Host.State.DRAINING)
    running = tw.workload(gpus=1)
    tw.attempt(running, list(host.gpus.all()))
    w = _pending_without_start(tw)
    assert "unless work ends before its wall-time limit" in estimate_words(w)
    assert not any("takes new work" in note for note in quote_terms(w).notes)


def test_a_workload_waiting_on_its_budgets_cap_is_not_told_that_nothing_is_running(tw):
    """try44: budget vision at its cap (on_cap hold), nothing running: the reason said "Budget
    vision has reached its cap ... holds new work until its usage falls below the cap" and the
    estimate "No start within the next 7 days: nothing is running on the cluster": the cap, not
    the idle cluster, keeps it waiting (usage leaves the cap's period only as it ages)."""
    tw.host("gpu01", gpus=2)
    w = _pending_without_start(tw)
    w.pending_reason = "budget_capped"
    w.pending_detail = {"budget": "vision"}
    w.save()
    words = estimate_words(w)
    assert words.startswith("No start within the next"), words
    assert "nothing is running" not in words and "wall-time limit" not in words, words
    assert "budget vision" in words and "cap" in words, words
