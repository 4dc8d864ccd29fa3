"""try50: a researcher's day by hand (README and docs/ only); the faults it met, each pinned."""

from __future__ import annotations

from django.utils import timezone

from scheduler.estimates import store_estimates
from scheduler.models import Workload
from scheduler.reports import estimate_words
from scheduler.services import do_release_workload, do_submit_workload
from scheduler.tick import run_tick


def test_a_release_forgets_the_estimate_run_made_while_it_was_held(researcher, submit_kwargs):
    """try50: a workload submitted held got "no start found" from the estimates run (nothing starts
    held work in its simulation); once released, its page said "No start within the next 7 days:
    the last estimate found none…" until the next run, though it could start at once. A release
    forgets that answer, as an update does: "Not known yet" until the next run."""
    held = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, hold=True))
    now = timezone.now()
    run_tick(held.cluster_id, now=now)
    store_estimates(held.cluster_id, now)
    held.refresh_from_db()
    assert held.pending_reason == "held" and held.no_start_found
    released = do_release_workload(researcher, held)
    row = Workload.objects.get(pk=released.pk)
    assert (row.estimated_start, row.no_start_found) == (None, False)
    assert estimate_words(row).startswith("Not known yet")
