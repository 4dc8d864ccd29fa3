"""arrayq46: the quote's corners of unfunded46 (a line that starts at a budget's downgrade cap says
unfunded, charges 0 and leaves the ratio; docs/estimates.md "Quotes"): the whole array's charge
follows each member's start, and a line with no start (it waits on ``after`` work) is priced funded."""

from __future__ import annotations

from django.test import Client

from budgets.models import Budget
from tests.cli.inprocess import run_cli
from tests.web.test_pages import _form

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


def test_a_line_waiting_on_after_work_is_priced_funded_not_unfunded(
    researcher, researcher_client, submission, cluster, org_tree, monkeypatch
):
    """A line that waits on ``after`` work has no start ("none: waits for #…"), but it kept the
    simulation's unfunded flag: a charge of 0 and the ratio now, as if it were known to start at the
    cap. With no start known it is priced funded: gpus × M and its commitment in the ratio, on the
    API, the form and the CLI alike; the whole array too."""
    _downgrade_at_zero(org_tree)
    first = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    body = researcher_client.post(URL, submission(after=[f"{first}:ok"]), format="json").json()
    lines = body["quotes"]
    assert body["waits_for"] == [first]
    assert {q["start_text"] for q in lines} == {f"none: waits for #{first}"}
    assert not any(q["unfunded"] for q in lines)
    assert [q["charge_gpu_hours"] for q in lines] == [4 * q["min_runtime_s"] / 3600 for q in lines]
    ratios = [q["ratio_after"] for q in lines]
    assert ratios == sorted(ratios) and ratios[0] < ratios[-1]  # each commitment counts
    out = run_cli(monkeypatch, researcher, *ARGV, "--after", f"{first}:ok", "--", "python")
    assert "(unfunded)" not in out and "8.00 GPU-h" in out and "96.00 GPU-h" in out
    browser = Client()
    browser.force_login(researcher)
    page = browser.post("/submit/", {**_form(after=f"{first}:ok"), "quote": "1"}).content.decode()
    assert "(unfunded)" not in page and "8.00 GPU-h" in page and "96.00 GPU-h" in page
    array = researcher_client.post(URL, submission(array="0-3", after=[f"{first}:ok"]), format="json").json()["array"]
    assert (array["first_start"], array["charge_gpu_hours"], array["unfunded"]) == (None, 32.0, 0)
