"""words63: the pages' "occupied" right now and the pyramid's occupied GPU-time are one count.

A gang's part that exits first releases its host's GPUs (brk36) while the attempt stays open
until its last part reports: the live count (``reports.occupancy``: the dashboard, clusters and
metrics pages, the API) showed those GPUs free, the pyramid kept counting them occupied until the
whole attempt ended (``[placed_at, ended_at or now)``), and counted them twice once new work took
them (capped at the registered time). A released part's GPU-time now ends at its release."""

from __future__ import annotations

from datetime import timedelta

from scheduler import lifecycle
from scheduler.models import GPU, Host
from scheduler.pyramid import HOUR, compute_hour, hour_of
from scheduler.reports import occupancy


def _occupied(cluster, since, at) -> float:  # noqa: ANN001
    total, hour = 0.0, hour_of(since)
    while hour <= at:
        t = compute_hour(cluster, hour, now=at)
        total += t["allocated"] + t["unallocated"]
        hour += HOUR
    return total


def test_a_released_part_is_free_in_the_live_count_and_in_the_pyramid(tw, pushed, ticks):
    h1, _h2 = tw.host("h1", 2), tw.host("h2", 2)
    Host.objects.update(created_at=tw.now - timedelta(hours=2))  # registered before the attempt
    w = tw.workload(gpus=4, min_runtime=600)
    attempt = tw.attempt(w, list(GPU.objects.order_by("host__name", "index")), started_ago=100)
    assert lifecycle.attempt_exited(h1, attempt.pk, 0, now=tw.now)

    (occ,) = occupancy([tw.cluster])
    assert (occ.busy, occ.gpus) == (2, 4)
    # over the 600 s after the release only h2's two GPUs were occupied, as the live count says
    t0 = tw.now
    t1 = t0 + timedelta(seconds=600)
    assert _occupied(tw.cluster, attempt.placed_at, t1) - _occupied(tw.cluster, attempt.placed_at, t0) == 2 * 600
