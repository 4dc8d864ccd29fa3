"""try51: ``fairway metrics`` printed "h100: 00:00:00 UTC to 01:00:44 UTC, 1 complete hour and the
current hour up to 01:00:45 UTC": the API read the clock once for its default ``until`` and again
for the current hour's end, a second apart when they straddled one. One instant serves both (the
metrics page already passed its own)."""

from __future__ import annotations

from datetime import timedelta
from itertools import count

from django.utils import timezone

from scheduler.models import Host
from scheduler.pyramid import hour_of


def test_the_range_ends_where_the_current_hour_does(researcher_client, cluster, monkeypatch):
    start = hour_of(timezone.now()) + timedelta(minutes=30)
    Host.objects.update(created_at=start - timedelta(hours=2))
    ticks = count()
    monkeypatch.setattr(timezone, "now", lambda: start + timedelta(seconds=next(ticks)))  # a second per read

    [c] = researcher_client.get("/api/v1/metrics/pyramid/").json()
    assert c["range"]["partial_hour_until"] is not None
    assert c["range"]["until"] == c["range"]["partial_hour_until"]
