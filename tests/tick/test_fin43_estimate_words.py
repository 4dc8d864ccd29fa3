"""fin43: with the cluster's only host drained and nothing running, the estimated-start words and
the quote's note talked of running work ending before its wall-time limit: there is none."""

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


def test_nothing_running_and_the_only_host_drained_says_only_what_applies(tw):
    tw.host("h1", gpus=2, state=Host.State.DRAINED)
    w = _pending_without_start(tw)
    words = estimate_words(w)
    assert words.startswith("No start within the next"), words
    assert "wall-time limit" not in words and "running work" not in words, words
    assert "nothing is running" in words and "drained" in words, words
    note = quote_terms(w).notes[0]
    assert "running work" not in note and "wall-time limit" not in note, note


def test_with_running_work_the_words_keep_its_wall_time_limit(tw):
    host = tw.host("h1", gpus=1)
    running = tw.workload(gpus=1)
    tw.attempt(running, list(host.gpus.all()))
    w = _pending_without_start(tw)
    assert "wall-time limit" in estimate_words(w)
    assert "wall-time limit" in quote_terms(w).notes[0]
