"""words46: `fairway history` said "not measured (held no whole minute)" of a failed_to_start
attempt that never ran. ``scheduler.efficiency`` says why: ``never_started``; the words follow."""

from __future__ import annotations

from datetime import timedelta

from fairway_cli.words import utilization_words
from scheduler.efficiency import efficiency_of_attempts
from scheduler.models import GPU, Attempt
from tests.tick.test_efficiency import _held, _sample


def test_an_attempt_that_never_started_is_not_measured_because_it_never_started(tw, ticks):
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    # held a whole minute and more (its own minute), sampled: still nothing of it ran
    a = _held(tw, [gpu], placed=minute + timedelta(seconds=20), ended=minute + timedelta(minutes=2, seconds=5))
    Attempt.objects.filter(pk=a.pk).update(started_at=None, end_reason="failed_to_start")
    _sample(gpu, minute + timedelta(minutes=1), 71.0)
    data = efficiency_of_attempts([a.pk])[a.pk].as_data()
    assert data["utilization"] is None and data["utilization_why"] == "never_started"
    assert utilization_words(data["utilization"], data["utilization_why"]) == "not measured (never started)"


def test_a_workload_that_ran_after_a_failed_start_keeps_the_ran_attempts_reason(tw, ticks):
    gpu = GPU.objects.get(host=tw.host("h1", 1))
    minute = tw.now.replace(second=0) - timedelta(minutes=10)
    w = tw.workload(gpus=1)
    failed = _held(tw, [gpu], w, placed=minute, ended=minute + timedelta(seconds=3))
    Attempt.objects.filter(pk=failed.pk).update(started_at=None, end_reason="failed_to_start")
    ran = _held(tw, [gpu], w, placed=minute + timedelta(minutes=1), ended=minute + timedelta(minutes=3))
    found = efficiency_of_attempts([failed.pk, ran.pk])
    total = found[failed.pk]
    total.add(found[ran.pk])
    assert found[ran.pk].utilization_why == "no_sample"
    assert total.utilization_why == "no_sample"  # one of them ran: not "never started"


def test_the_cli_reads_an_older_servers_reasons():
    assert utilization_words(None, "no_whole_minute") == "not measured (held no whole minute)"
    assert utilization_words(None, "no_own_minute").startswith("not measured (its GPUs were shared")
    assert utilization_words(None, "something_newer") == "not measured"
