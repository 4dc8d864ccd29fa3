"""try61: the only host had a drain scheduled in 25 minutes; `fairway submit -g 2 -M 1h --quote` said
"none before Dec 14" on every allocated line under "(nothing is running on the cluster now)", with no
word of the drain that `fairway show` of the same work names."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler.estimates import quote_terms
from scheduler.services import do_schedule_drain


def test_a_quote_names_a_drain_scheduled_on_the_cluster(tw):
    host = tw.host("gpu01", gpus=4)
    tw.host("gpu02", gpus=4)
    at = (timezone.now() + timedelta(minutes=25)).replace(microsecond=0)
    do_schedule_drain(None, host, at, "PSU swap")
    notes = quote_terms(tw.workload(gpus=2)).notes
    (note,) = [n for n in notes if "drains at" in n]
    assert note == (
        f"Host gpu01 drains at {instant_text(at.timestamp())} (scheduled by an admin): it starts no work there whose "
        "minimum runtime would end after that, and once drained none until it is resumed, which the "
        "simulation does not foresee."
    )
    assert "gpu02" not in note


def test_no_drain_scheduled_no_note(tw):
    tw.host("gpu01", gpus=4)
    assert not [n for n in quote_terms(tw.workload(gpus=2)).notes if "drains at" in n]
