"""brk48b: a pending workload moved (``PATCH workloads/{id}/``) into a budget that is held, or whose
nearest cap is 0 GPU-hours with on_cap=downgrade (its allocated work runs unfunded), or made
allocated there, said just "pending" until a tick, where a submission there says held / unfunded
at once (tryout47b, rules48): a move is judged as a submission there (brk48), its reason too."""

from __future__ import annotations

from decimal import Decimal

from budgets.models import Budget
from scheduler.models import Workload
from scheduler.services import do_submit_workload


def _zero_cap_downgrade(budget: Budget) -> None:
    Budget.objects.filter(pk=budget.pk).update(
        cap_gpu_hours=Decimal(0), cap_period_days=7, on_cap=Budget.OnCap.DOWNGRADE
    )


def test_a_move_into_a_zero_cap_downgrade_budget_says_unfunded_as_a_submission(
    manager, manager_client, submit_kwargs, org_tree
):
    olmo, tulu = org_tree["nlp/olmo"], org_tree["nlp/tulu"]
    _zero_cap_downgrade(olmo)
    submitted = do_submit_workload(manager, **submit_kwargs(budget=olmo))
    moved = do_submit_workload(manager, **submit_kwargs(budget=tulu))
    assert moved.pending_reason == ""
    answer = manager_client.patch(f"/api/v1/workloads/{moved.pk}/", {"budget": "nlp/olmo"}, format="json")
    assert answer.status_code == 200, answer.content
    assert (
        (answer.json()["pending_reason"], answer.json()["pending_detail"])
        == (
            submitted.pending_reason,
            submitted.pending_detail,
        )
        == ("budget_capped", {"budget": "nlp/olmo", "unfunded": True})
    )
    # and back out of it: nothing to say, as a submission to tulu
    back = manager_client.patch(f"/api/v1/workloads/{moved.pk}/", {"budget": "nlp/tulu"}, format="json").json()
    assert back["pending_reason"] == ""


def test_made_allocated_in_a_zero_cap_downgrade_budget_says_unfunded(manager, manager_client, submit_kwargs, org_tree):
    olmo = org_tree["nlp/olmo"]
    _zero_cap_downgrade(olmo)
    w = do_submit_workload(manager, **submit_kwargs(budget=olmo, min_runtime_s=0))
    assert w.pending_reason == ""
    answer = manager_client.patch(f"/api/v1/workloads/{w.pk}/", {"min_runtime": "1h"}, format="json")
    assert answer.status_code == 200, answer.content
    assert Workload.objects.get(pk=w.pk).pending_detail == {"budget": "nlp/olmo", "unfunded": True}


def test_a_move_into_a_held_budget_says_held_as_a_submission(manager, manager_client, submit_kwargs, org_tree):
    olmo, tulu = org_tree["nlp/olmo"], org_tree["nlp/tulu"]
    Budget.objects.filter(pk=olmo.pk).update(hold=True)
    submitted = do_submit_workload(manager, **submit_kwargs(budget=olmo))
    moved = do_submit_workload(manager, **submit_kwargs(budget=tulu))
    answer = manager_client.patch(f"/api/v1/workloads/{moved.pk}/", {"budget": "nlp/olmo"}, format="json")
    assert answer.status_code == 200, answer.content
    assert submitted.pending_reason != ""
    assert answer.json()["pending_reason"] == submitted.pending_reason
    assert answer.json()["pending_detail"] == submitted.pending_detail


def test_a_moved_workload_on_its_own_hold_or_waiting_for_another_keeps_that_first(
    manager, manager_client, submit_kwargs, org_tree
):
    """The policy's order: its own hold, a dependency's wait, then its budget's verdict."""
    olmo, tulu = org_tree["nlp/olmo"], org_tree["nlp/tulu"]
    _zero_cap_downgrade(olmo)
    held = do_submit_workload(manager, **submit_kwargs(budget=tulu, hold=True))
    first = do_submit_workload(manager, **submit_kwargs(budget=tulu))
    waiting = do_submit_workload(manager, **submit_kwargs(budget=tulu, after=[str(first.pk)]))
    for w in (held, waiting):
        answer = manager_client.patch(f"/api/v1/workloads/{w.pk}/", {"budget": "nlp/olmo"}, format="json")
        assert answer.status_code == 200, answer.content
        assert answer.json()["pending_detail"].get("unfunded") is None, answer.json()
    assert Workload.objects.get(pk=held.pk).pending_reason == "held"
