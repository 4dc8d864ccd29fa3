"""left56: a bulk action's ``not_pending`` (and ``already_final``) reason said its sentence once per
state its skips met; ``--json --yes`` matching nothing to change answered ``dry_run: true``."""

from __future__ import annotations

import json

from scheduler.models import Workload
from scheduler.services import cancel_refusal, hold_refusal
from tests.cli.inprocess import run_cli


def test_not_pending_is_said_once_with_the_states(monkeypatch, researcher, mine):
    Workload.objects.filter(pk=mine[0].pk).update(state="running")
    Workload.objects.filter(pk__in=[mine[1].pk, mine[2].pk]).update(state="succeeded")
    answer = json.loads(
        run_cli(monkeypatch, researcher, "hold", "--mine", "--state", "running,succeeded", "--dry-run", "--json")
    )
    assert answer["reasons"] == {
        "not_pending": "Only a pending workload can be held or released; these are running or succeeded."
    }
    out = run_cli(monkeypatch, researcher, "hold", "--mine", "--state", "running,succeeded", "--dry-run")
    assert out.count("Only a pending workload") == 1


def test_already_final_is_said_once_with_the_states(monkeypatch, researcher, mine):
    Workload.objects.filter(pk=mine[0].pk).update(state="failed")
    Workload.objects.filter(pk__in=[mine[1].pk, mine[2].pk]).update(state="succeeded")
    answer = json.loads(
        run_cli(monkeypatch, researcher, "cancel", "--mine", "--state", "failed,succeeded", "--yes", "--json")
    )
    assert answer["reasons"] == {"already_final": "These workloads have already ended (failed or succeeded)."}


def test_one_workloads_refusal_reads_as_before(researcher, mine):
    w = Workload.objects.get(pk=mine[0].pk)
    w.state = "running"
    assert (
        hold_refusal(researcher, w).message == "Only a pending workload can be held or released; this one is running."
    )
    w.state = "failed"
    assert cancel_refusal(researcher, w).message == "The workload has already ended (failed)."


def test_json_yes_with_nothing_to_change_is_no_dry_run(monkeypatch, researcher, mine):
    Workload.objects.filter(pk__in=[w.pk for w in mine]).update(state="succeeded")
    answer = json.loads(run_cli(monkeypatch, researcher, "cancel", "--mine", "--state", "succeeded", "--yes", "--json"))
    assert (answer["dry_run"], answer["changed"], answer["skipped"]) == (False, 0, 3)
    answer = json.loads(
        run_cli(monkeypatch, researcher, "cancel", "--mine", "--state", "succeeded", "--dry-run", "--json")
    )
    assert answer["dry_run"] is True
