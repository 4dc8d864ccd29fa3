"""A waiting workload's page in a real browser (Playwright driving Debian's Chromium, as
tests/browser.py launches it): its reason, its reservation and its estimated start agree
(DESIGN.md §3.8: a workload holding a reservation is never estimated later than its start).
Skipped when ``/usr/bin/chromium`` or the ``playwright`` package is missing."""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from scheduler.estimates import store_estimates
from scheduler.models import Workload
from tests.api.fair_share_setup import olmo_waits_for_visions_protection
from tests.browser import log_in

_WHEN = re.compile(r"(?:(?P<mon>[A-Z][a-z]{2}) (?P<day>\d{1,2}) )?(?P<hms>\d{2}:\d{2}:\d{2}) UTC")


def _parse_when(text: str, now: datetime) -> datetime:
    """``14:05:09 UTC`` (today) or ``Mar 3 14:05:09 UTC``, as the page writes times."""
    m = _WHEN.search(text)
    assert m is not None, text
    hour, minute, second = (int(x) for x in m["hms"].split(":"))
    if m["mon"]:
        month = list(calendar.month_abbr).index(m["mon"])
        return datetime(now.year, month, int(m["day"]), hour, minute, second, tzinfo=UTC)
    at = now.replace(hour=hour, minute=minute, second=second, microsecond=0)
    return at + timedelta(days=1) if at < now - timedelta(hours=12) else at  # rendered after midnight


def test_a_waiting_workloads_reason_reservation_and_estimate_agree(
    new_page, researcher, outsider, submit_kwargs, org_tree, cluster
):
    # nlp/olmo, further below its share, may preempt vision/sam's work on both A100 hosts once its
    # protection ends in 10 minutes.
    now = timezone.now()
    waiting = olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs)
    store_estimates(cluster.pk, timezone.now())
    waiting.refresh_from_db()
    assert (waiting.state, waiting.pending_reason) == ("pending", "protected_work")
    reserved_start = waiting.pending_detail["reserved_start"]
    assert waiting.estimated_start is not None
    # The victims are stopped at the reservation's start (their protection end) and released a
    # grace later: the room, and the estimate, count from the release (DESIGN.md §3.5).
    assert waiting.estimated_start.timestamp() <= reserved_start + settings.FAIRWAY["GRACE_PERIOD_S"]
    assert Workload.objects.filter(state="pending").count() == 1

    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{waiting.pk}/")
    why = page.inner_text("#why-pending")
    estimate = page.inner_text("#estimated-start")

    assert "protected" in why.lower()  # the reason: the victims are still protected
    reservation = re.search(r"reserved for it: it starts by (.+?) at the latest", why)
    assert reservation is not None, why
    shown_reserved = _parse_when(reservation[1], now)
    shown_estimate = _parse_when(estimate, now)
    protection_end = _parse_when(why.split("reserved for it")[0], now)  # the reason's own numbers
    grace = timedelta(seconds=settings.FAIRWAY["GRACE_PERIOD_S"])
    # The reservation names the latest start: the victims' protection end, then their grace.
    assert shown_estimate <= shown_reserved == protection_end + grace
    assert shown_reserved == datetime.fromtimestamp(reserved_start, tz=UTC) + grace
