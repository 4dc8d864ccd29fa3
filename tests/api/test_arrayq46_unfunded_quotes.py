"""arrayq46: the quote's corners of unfunded46 (a line that starts at a budget's downgrade cap says
unfunded, charges 0 and leaves the ratio; docs/estimates.md "Quotes"): the whole array's charge
follows each member's start."""

from __future__ import annotations

from budgets.models import Budget
from tests.cli.inprocess import run_cli

URL = "/api/v1/workloads/quote/"
ARGV = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "2h")


def _downgrade_at_zero(org_tree) -> None:
    """nlp/olmo at a cap of 0 GPU-hours that downgrades: it never lifts, every allocated start is unfunded."""
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=0, on_cap="downgrade")


def test_an_array_at_a_downgrade_cap_charges_what_its_members_would(
    researcher, researcher_client, submission, cluster, org_tree, monkeypatch
):
    """The whole array charged members × gpus × M (4 × 4 × 2 h = 32 GPU-h) while each line, and each
    member once submitted, starts unfunded at the cap: its members are priced as a line is, 0 each."""
    _downgrade_at_zero(org_tree)
    body = researcher_client.post(URL, submission(array="0-3"), format="json").json()
    array = body["array"]
    assert (array["started"], array["starts_now"]) == (4, True)  # 16 A100s free: every member starts now
    assert (array["charge_gpu_hours"], array["unfunded"]) == (0.0, 4)
    yours = next(q for q in body["quotes"] if q["yours"])
    assert yours["unfunded"] and yours["charge_gpu_hours"] == 0.0  # as the line of one member
    note = next(n for n in body["notes"] if "array" in n)
    assert "would charge 0 GPU-h for its protected parts (4 of its members start unfunded" in note
    assert note in run_cli(monkeypatch, researcher, *ARGV, "--array", "0-3", "--", "python")
    # under no cap, every member is charged
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=None)
    array = researcher_client.post(URL, submission(array="0-3"), format="json").json()["array"]
    assert (array["charge_gpu_hours"], array["unfunded"]) == (32.0, 0)
