"""cli46b: a quote for work that waits on ``after`` work not ended (``terms.waits_for``) ran the forward
simulation, for its lines (``scheduler.sim.estimate.quote``) and for the whole array
(``scheduler.array_quote.array_quote``), then threw every start away: no line has a start then, and
each is priced funded (arrayq46). No simulation runs now; the answer is the one before (its lines and
array below, taken from the code before the change on the same state)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings

from budgets.models import Budget
from scheduler.sim import estimate

URL = "/api/v1/workloads/quote/"
LINE = {"estimated_start": None, "starts_now": False, "unfunded": False, "start_text": "none: waits for #FIRST"}
BEFORE_LINES = [  # min_runtime_s, charge_gpu_hours, ratio_after, ratio_after_text, yours: the answer before
    (0, 0.0, 0.0, "0", False),
    (1800, 2.0, 0.0017857142857142857, "0.00179", False),
    (7200, 8.0, 0.007142857142857143, "0.00714", True),
    (28800, 32.0, 0.02857142857142857, "0.0286", False),
    (86400, 96.0, 0.08571428571428572, "0.0857", False),
]
BEFORE_ARRAY = {
    "members": 4,
    "limit": None,
    "min_runtime_s": 7200,
    "first_start": None,
    "last_start": None,
    "started": 0,
    "started_by": None,
    "starts_now": False,
    "charge_gpu_hours": 32.0,
    "unfunded": 0,
}
BEFORE_NOTE = (
    "An array of 4 members: each line prices one member as if it were submitted alone. The whole array, at your"
    " minimum runtime 2h, would charge 32.00 GPU-h for its protected parts; no member has a start until its"
    " after work has ended."
)


@pytest.fixture
def simulations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The forward simulations begun (``estimate.Forward``: the lines' and the array's alike)."""
    begun: list[str] = []
    real = estimate.Forward.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:
        begun.append(type(self).__name__)
        real(self, *args, **kwargs)

    monkeypatch.setattr(estimate.Forward, "__init__", spy)
    return begun


def _quote(researcher_client, submission, first: int, simulations: list[str]) -> dict[str, Any]:
    simulations.clear()
    before = datetime.now(UTC).replace(microsecond=0)
    body = researcher_client.post(URL, submission(array="0-3", after=[f"{first}:ok"]), format="json").json()
    after = datetime.now(UTC)
    window = timedelta(seconds=int(settings.FAIRWAY["LOOKBACK_WINDOW_S"]))
    searched = {q.pop("searched_until") for q in body["quotes"]} | {body["array"].pop("searched_until")}
    assert len(searched) == 1  # the window's end, as a complete search reached
    (until,) = searched
    assert before + window <= datetime.fromisoformat(until) <= after + window
    return json.loads(json.dumps(body).replace(f"#{first}", "#FIRST"))


@pytest.mark.parametrize("cap", [None, 0], ids=["uncapped", "downgrade-cap-0"])
def test_a_waiting_quote_runs_no_simulation_and_answers_as_before(
    researcher, researcher_client, submission, cluster, org_tree, simulations, cap
):
    if cap is not None:  # every start the simulation found was unfunded: the answer is still priced funded
        Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=cap, on_cap="downgrade")
    first = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    body = _quote(researcher_client, submission, first, simulations)
    assert simulations == []  # was one for the lines and one for the array, their starts thrown away
    assert body["quotes"] == [
        {"min_runtime_s": m, "charge_gpu_hours": c, "ratio_after": r, "ratio_after_text": t, "yours": y, **LINE}
        for m, c, r, t, y in BEFORE_LINES
    ]
    assert body["array"] == BEFORE_ARRAY and body["notes"][-1] == BEFORE_NOTE
    assert body["waits_for"] == [first]


def test_a_quote_not_waiting_still_simulates(researcher, researcher_client, submission, cluster, org_tree, simulations):
    body = researcher_client.post(URL, submission(array="0-3"), format="json").json()
    assert simulations and body["array"]["starts_now"] and all(q["starts_now"] for q in body["quotes"])
