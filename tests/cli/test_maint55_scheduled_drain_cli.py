"""maint55: ``fairway hosts drain NAME --at TIME | --in DURATION`` schedules a drain, ``fairway
hosts`` and ``fairway hosts NAME`` show it, ``cancel-drain`` and ``resume`` cancel it."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fairway_cli.cli import EXIT_API, EXIT_USAGE
from scheduler.models import Host
from tests.cli.inprocess import run_cli


def test_an_admin_schedules_lists_and_cancels_a_drain(monkeypatch, admin, researcher, hosts):
    at = (timezone.now() + timedelta(days=2)).replace(second=0, microsecond=0)
    said = run_cli(
        monkeypatch, admin, "hosts", "drain", "a100-1", "--at", at.strftime("%Y-%m-%dT%H:%MZ"), "--reason", "PSU"
    )
    assert said.startswith("a100-1: active; drain scheduled at ") and said.rstrip().endswith("by admin: PSU")
    assert Host.objects.get(name="a100-1").drain_at == at

    listing = run_cli(monkeypatch, researcher, "hosts")
    assert "a100-1: drain scheduled at " in listing
    one = run_cli(monkeypatch, researcher, "hosts", "a100-1")
    assert "scheduled: drain scheduled at " in " ".join(one.split())

    said = run_cli(monkeypatch, admin, "hosts", "drain-now", "a100-1", "--in", "3h")
    assert "drain now scheduled at " in said  # replaced
    said = run_cli(monkeypatch, admin, "hosts", "cancel-drain", "a100-1")
    # try62: it said "a100-1: active; no drain scheduled", the words of a cancel of none (a no-op)
    assert said.startswith("a100-1: active (its drain now scheduled at ") and said.endswith(" is canceled)\n")
    assert Host.objects.get(name="a100-1").drain_at is None

    run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", "--in", "1h")
    said = run_cli(monkeypatch, admin, "hosts", "resume", "a100-1")  # says so (left59)
    assert said.startswith("a100-1: active (its drain scheduled at ") and said.endswith(" is canceled)\n")
    assert Host.objects.get(name="a100-1").drain_at is None


def test_bad_schedules_are_refused_and_change_nothing(monkeypatch, admin, researcher, hosts):
    past = run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", "--at", "2020-01-01T00:00Z", expect=EXIT_API)
    assert "is past" in past
    bad = run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", "--in", "later", expect=EXIT_API)
    assert "duration" in bad
    usage = run_cli(monkeypatch, admin, "hosts", "cordon", "a100-1", "--in", "2h", expect=EXIT_USAGE)
    assert "schedule a drain or drain-now, not cordon" in usage
    both = run_cli(monkeypatch, admin, "hosts", "drain", "a100-1", "--in", "2h", "--at", "x", expect=EXIT_USAGE)
    assert "not both" in both
    refused = run_cli(monkeypatch, researcher, "hosts", "drain", "a100-1", "--in", "2h", expect=EXIT_API)
    assert "change_host" in refused
    none = run_cli(monkeypatch, admin, "hosts", "cancel-drain", "a100-1")  # a no-op (left59)
    assert none == "a100-1: active; no drain scheduled\n"
    assert Host.objects.get(name="a100-1").drain_at is None
