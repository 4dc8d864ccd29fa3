"""left51: ``fairway hold`` of a workload an admin already holds changes nothing (the API's 200
no-op, docs/jobs.md "Hold and release") and says so, instead of "held (admin hold)" as if the
requester had held it."""

from __future__ import annotations

import json

from scheduler.models import Workload, WorkloadEvent
from scheduler.services import do_hold_workload, do_submit_workload
from tests.cli.inprocess import run_cli


def test_a_noop_hold_of_an_admin_hold_says_it_is_already_held_by_an_admin(
    monkeypatch, researcher, admin, submit_kwargs
):
    held = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    free = do_submit_workload(researcher, **submit_kwargs(name="w1"))
    do_hold_workload(admin, held)
    events = WorkloadEvent.objects.count()

    out = run_cli(monkeypatch, researcher, "hold", str(held.pk), str(free.pk))  # exit 0: the API's no-op is a 200

    assert out == (
        f"#{held.pk} w0 already held by an admin (admin): nothing changed; only an admin may release it\n"
        f"#{free.pk} w1 held (user hold: you, the owner or a budget manager may release it)\n"
    )
    assert Workload.objects.get(pk=held.pk).hold == "admin"
    assert WorkloadEvent.objects.count() == events + 1  # the one hold of w1
    answers = json.loads(run_cli(monkeypatch, researcher, "hold", str(held.pk), "--json"))
    assert [w["hold"] for w in answers] == ["admin"]  # the API's answer, as it is


def test_the_admin_who_holds_it_still_reads_held(monkeypatch, researcher, admin, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    do_hold_workload(researcher, w)
    assert run_cli(monkeypatch, admin, "hold", str(w.pk)) == f"#{w.pk} w0 held (admin hold)\n"
    assert Workload.objects.get(pk=w.pk).hold == "admin"


def test_a_managers_noop_hold_of_the_owners_hold_names_the_owner(monkeypatch, researcher, manager, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    do_hold_workload(researcher, w)
    assert run_cli(monkeypatch, manager, "hold", str(w.pk)) == (
        f"#{w.pk} w0 already held by researcher (user hold): nothing changed\n"
    )
    held = Workload.objects.get(pk=w.pk)
    assert (held.hold, held.held_by) == ("user", researcher)
