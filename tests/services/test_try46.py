"""try46: hold, update and submit again read as one family (docs/jobs.md)."""

from __future__ import annotations

from django.utils import timezone

from fairway_cli.words import reason_words
from scheduler.reports import explain_pending
from scheduler.services import do_hold_workload, do_release_workload, do_submit_workload, do_update_workload


def test_a_held_workload_changed_still_says_held(researcher, submit_kwargs):
    """A new GPU count cleared a held workload's reason: until the next tick its page and
    `fairway ls` said "just submitted" / "not considered yet" of work that never starts until
    released."""
    w = do_submit_workload(researcher, **submit_kwargs())
    do_hold_workload(researcher, w)
    changed = do_update_workload(researcher, w, {"gpu_count": 2})
    assert (changed.gpu_count, changed.hold) == (2, "user")
    assert (changed.pending_reason, changed.pending_detail) == ("held", {"hold": "user"})


def test_a_released_workload_is_not_called_just_submitted(researcher, submit_kwargs):
    """A release (or a change of size) clears the reason until the next tick: `fairway ls` said
    "just submitted" and the page "Submitted; …" of work waiting since the morning."""
    w = do_submit_workload(researcher, **submit_kwargs())
    do_hold_workload(researcher, w)
    released = do_release_workload(researcher, w)
    assert reason_words(released.pending_reason) == "not considered yet"
    said = explain_pending(released, timezone.now()).sentences[0]
    assert said.startswith("The scheduler has not considered it yet (it will within a few seconds)"), said
    assert "Submitted" not in said
