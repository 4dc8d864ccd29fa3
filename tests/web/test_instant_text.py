"""One instant, one text (tryout28): a protection end read 11:29:05 in the attempts table (cut
down) and 11:29:06 in "In the way" (rounded up, the policy's second). Every surface now writes
instants with ``fairway_cli.numbers.instant_text``."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from django.test import Client
from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from tests.api.fair_share_setup import olmo_waits_for_visions_protection
from tests.cli.inprocess import run_cli


def test_instant_text_rounds_up_to_the_second_whatever_the_input():
    now = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)
    exact = datetime(2026, 3, 3, 11, 29, 5, 400000, tzinfo=UTC)
    assert instant_text(exact, now) == "11:29:06 UTC"
    assert instant_text(exact.timestamp(), now) == "11:29:06 UTC"
    assert instant_text("2026-03-03T11:29:05.400000Z", now) == "11:29:06 UTC"
    assert instant_text(exact.replace(microsecond=0), now) == "11:29:05 UTC"
    assert instant_text(exact - timedelta(days=1), now) == "Mar 2 11:29:06 UTC"
    assert instant_text(exact - timedelta(days=400), now) == "Jan 27 2025 11:29:06 UTC"
    assert instant_text(datetime(2026, 3, 2, 23, 59, 59, 1, tzinfo=UTC), now) == "00:00:00 UTC"  # the next day
    assert instant_text(None) == "" and instant_text("soon") == "soon"


def test_a_protection_end_reads_the_same_in_the_attempts_table_in_the_way_and_the_cli(
    researcher, outsider, submit_kwargs, org_tree, cluster, monkeypatch
):
    # Given: vision/sam's work holds both A100 hosts, protected to a fraction of a second; nlp's
    # 8-GPU workload waits for that protection to end.
    now = timezone.now().replace(microsecond=400000)
    waiting = olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs, now=now)
    waiting.refresh_from_db()
    assert waiting.pending_reason == "protected_work"
    blocker = Attempt.objects.filter(ended_at__isnull=True).order_by("protected_until").first()
    assert blocker is not None and blocker.protected_until is not None
    assert blocker.protected_until.microsecond  # the case that rounded two ways
    text = instant_text(
        datetime.fromtimestamp(math.ceil(blocker.protected_until.timestamp()), tz=UTC)
    )  # today's or another day's words

    mine, theirs = Client(), Client()
    mine.force_login(researcher)
    theirs.force_login(outsider)
    in_the_way = mine.get(f"/workloads/{waiting.pk}/").content.decode()
    table = theirs.get(f"/workloads/{blocker.workload_id}/").content.decode()
    shown_ls = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    shown_attempts = run_cli(monkeypatch, outsider, "show", str(blocker.workload_id))

    # Then: the same second everywhere, the policy's (rounded up).
    assert f"#{blocker.workload_id} " in in_the_way and f"protected until {text})" in in_the_way
    assert re.search(rf"<td>{re.escape(text)}</td>", table), table
    assert f"protected until {text}" in shown_ls
    assert text in shown_attempts


def test_instant_text_absolute_is_the_full_form_whatever_today_is():
    now = datetime(2026, 3, 3, 12, 0, tzinfo=UTC)
    exact = datetime(2026, 3, 3, 11, 29, 5, 400000, tzinfo=UTC)
    assert instant_text(exact, now, absolute=True) == "Mar 3 2026 11:29:06 UTC"
    assert instant_text(exact.timestamp(), absolute=True) == "Mar 3 2026 11:29:06 UTC"
    assert instant_text(None, absolute=True) == ""


def test_the_estimate_moved_event_writes_instants_as_every_surface_does(researcher, submit_kwargs, cluster):
    """The stored message said ``2026-03-03 11:29`` (minutes, cut down, its own format) where every
    surface writes ``Mar 3 2026 11:29:06 UTC`` (seconds rounded up); stored text is read later, so
    the absolute form, never one relative to the day it was written."""
    from scheduler.estimates import _notify_moved
    from scheduler.models import WorkloadEvent

    w = do_submit_workload(researcher, **submit_kwargs())
    old = datetime(2026, 3, 3, 11, 29, 5, 400000, tzinfo=UTC)
    new = datetime(2026, 3, 3, 13, 2, 0, tzinfo=UTC)
    _notify_moved([(w, old, new)])
    event = WorkloadEvent.objects.get(workload=w, kind="estimate_moved")
    assert event.message == "estimated start moved from Mar 3 2026 11:29:06 UTC to Mar 3 2026 13:02:00 UTC"
    assert event.data == {"from": old.isoformat(), "to": new.isoformat()}
