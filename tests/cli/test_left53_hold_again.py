"""left53: ``fairway hold`` of a workload its requester already holds printed "held" as if it had
changed; the API's hold answer says ``changed`` (as a PATCH's) and the CLI says "already held by
you: nothing changed", in the one function that words a hold that changed nothing
(``fairway_cli.words.hold_unchanged_text``, left51's words for an admin's or another's hold)."""

from __future__ import annotations

from scheduler.models import WorkloadEvent
from scheduler.services import do_hold_workload, do_submit_workload
from tests.cli.inprocess import run_cli


def test_holding_ones_own_hold_again_says_nothing_changed(monkeypatch, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    assert run_cli(monkeypatch, researcher, "hold", str(w.pk)).startswith(f"#{w.pk} w0 held (user hold")
    events = WorkloadEvent.objects.count()
    assert run_cli(monkeypatch, researcher, "hold", str(w.pk)) == f"#{w.pk} w0 already held by you: nothing changed\n"
    assert WorkloadEvent.objects.count() == events


def test_the_hold_answer_says_whether_it_changed(researcher_client, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    first = researcher_client.post(f"/api/v1/workloads/{w.pk}/hold/")
    again = researcher_client.post(f"/api/v1/workloads/{w.pk}/hold/")
    assert (first.json()["changed"], again.json()["changed"]) == (True, False)


def test_an_admins_own_hold_again_says_so_too(monkeypatch, researcher, admin, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    do_hold_workload(admin, w)
    assert run_cli(monkeypatch, admin, "hold", str(w.pk)) == f"#{w.pk} w0 already held by you: nothing changed\n"
