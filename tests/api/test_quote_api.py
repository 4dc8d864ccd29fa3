"""Contract quotes before submission (DESIGN.md §3.8): ``POST /api/v1/workloads/quote/``."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from rest_framework.test import APIClient

from scheduler.models import Attempt, Workload, WorkloadEvent

URL = "/api/v1/workloads/quote/"


def _rows() -> tuple[int, int, int]:
    return Workload.objects.count(), WorkloadEvent.objects.count(), Attempt.objects.count()


def test_a_quote_prices_every_minimum_runtime_and_writes_nothing(researcher_client, submission, cluster):
    before = _rows()
    response = researcher_client.post(URL, submission(min_runtime="1h"), format="json")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["budget"], body["cluster"], body["gpu_model"], body["gpu_count"]) == ("nlp/olmo", "default", "A100", 4)
    lines = body["quotes"]
    assert [q["min_runtime_s"] for q in lines] == [0, 1800, 3600, 7200, 28800, 86400]
    assert [q["yours"] for q in lines] == [False, False, True, False, False, False]
    assert [q["charge_gpu_hours"] for q in lines] == [0.0, 2.0, 4.0, 8.0, 32.0, 96.0]
    ratios = [q["ratio_after"] for q in lines]
    assert ratios == sorted(ratios) and ratios[0] < ratios[-1]
    assert all(q["estimated_start"] is not None for q in lines)  # 16 A100s are free
    assert all(q["starts_now"] for q in lines)  # tryout26: "now", not the current second
    assert _rows() == before


def test_a_quote_behind_protected_work_is_estimated_at_its_end(researcher, researcher_client, submission, cluster):
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.tick import run_tick

    filler = submission(gpu_count=8, min_runtime="1h")
    for _ in range(2):
        assert researcher_client.post("/api/v1/workloads/", filler, format="json").status_code == 201
    run_tick(cluster.pk)
    Attempt.objects.update(started_at=timezone.now(), protected_until=timezone.now() + timedelta(hours=1))
    body = researcher_client.post(URL, submission(gpu_count=8, min_runtime="2h"), format="json").json()
    # Its own budget's work is never room (§3.4): no start within one window, whatever M.
    assert {q["estimated_start"] for q in body["quotes"]} == {None}
    assert not any(q["starts_now"] for q in body["quotes"])
    from datetime import datetime

    for q in body["quotes"]:  # the search covered the whole window
        searched = datetime.fromisoformat(q["searched_until"].replace("Z", "+00:00"))
        assert searched >= timezone.now() + timedelta(days=7) - timedelta(minutes=5)


def test_a_quote_is_validated_like_a_submission(researcher_client, submission, cluster):
    bad = submission(budget="nope", gpu_count=0, min_runtime="forever")
    quoted = researcher_client.post(URL, bad, format="json")
    submitted = researcher_client.post("/api/v1/workloads/", bad, format="json")

    assert quoted.status_code == submitted.status_code == 400
    assert quoted.json() == submitted.json()
    assert Workload.objects.count() == 0


def test_an_outsider_gets_the_submissions_refusal(outsider, api_client_for, submission, cluster):
    response = api_client_for(outsider).post(URL, submission(), format="json")
    assert response.status_code == 400
    assert "not_a_member" in str(response.json())
    assert Workload.objects.count() == 0


def test_the_quote_is_in_the_openapi_schema(db):
    import yaml

    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    post = schema["paths"]["/api/v1/workloads/quote/"]["post"]
    assert post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/Quote")


def test_a_quote_counts_the_cpu_and_memory_it_asks_for(researcher_client, submission, cluster):
    """tryout22: the quote's hypothetical workload dropped ``cpus`` and ``memory``, so a request
    no host could hold beside the running work was quoted to start now. Each A100 host runs a
    protected 1-GPU workload of its own budget holding 40 of its 64 CPUs (or 400G of 512G):
    a 1-GPU request for 40 CPUs (or 400G) fits nowhere until they end, and its own budget's work
    is never room (§3.4), so no start is found; without the request it starts now."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Host
    from scheduler.tick import run_tick

    g = 1 << 30
    Host.objects.filter(name__startswith="a100").update(cpus=64, memory_bytes=512 * g)
    filler = submission(gpu_count=1, min_runtime="1h", cpus=40, memory="400G")
    for _ in range(2):
        assert researcher_client.post("/api/v1/workloads/", filler, format="json").status_code == 201
    run_tick(cluster.pk)
    assert Attempt.objects.count() == 2
    Attempt.objects.update(started_at=timezone.now(), protected_until=timezone.now() + timedelta(hours=1))

    def starts(**asks):
        body = researcher_client.post(URL, submission(gpu_count=1, min_runtime="1h", **asks), format="json").json()
        return {q["estimated_start"] is not None for q in body["quotes"] if q["min_runtime_s"]}

    assert starts() == {True}
    assert starts(cpus=40) == {False}
    assert starts(memory="400G") == {False}


def test_a_quote_with_after_work_not_ended_has_no_start_and_says_for_what(
    researcher, researcher_client, submission, cluster, monkeypatch
):
    """tryout: a quote with ``after`` priced the workload as if its dependency were done, while
    the workload submitted has no estimate until it has ended (it waits on a dependency). The
    quote says so: no start, ``waits_for`` and a note, on the API, the CLI and the form."""
    import re

    from django.test import Client

    from tests.cli.inprocess import run_cli
    from tests.web.test_pages import _form

    first = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    body = researcher_client.post(URL, submission(after=[f"{first}:ok"]), format="json").json()
    assert body["waits_for"] == [first] and body["array"] is None
    assert {q["estimated_start"] for q in body["quotes"]} == {None}
    note = next(n for n in body["notes"] if "waits for" in n)
    assert f"#{first}" in note

    argv = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "1h")
    out = run_cli(monkeypatch, researcher, *argv, "--after", str(first), "--", "python")
    assert out.count(f"none: waits for #{first}") == 6 and note in out
    browser = Client()
    browser.force_login(researcher)
    page = browser.post("/submit/", {**_form(min_runtime="1h", after=str(first)), "quote": "1"}).content.decode()
    assert len(re.findall(f"none: waits for #{first}</td>", page)) == 6

    Workload.objects.filter(pk=first).update(state=Workload.State.SUCCEEDED)
    done = researcher_client.post(URL, submission(after=[f"{first}:ok"]), format="json").json()
    assert done["waits_for"] == [] and all(q["estimated_start"] for q in done["quotes"])
    assert not any("waits for" in n for n in done["notes"])


def test_an_array_quote_says_it_prices_one_member(researcher, researcher_client, submission, cluster, monkeypatch):
    from tests.cli.inprocess import run_cli

    body = researcher_client.post(URL, submission(array="0-9%2"), format="json").json()
    array = body["array"]
    assert (array["members"], array["limit"], array["min_runtime_s"]) == (10, 2, 7200) and body["waits_for"] == []
    note = next(n for n in body["notes"] if "array" in n)
    assert "10 members" in note and "one member" in note and "%2" in note
    argv = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "1h")
    cli_note = next(
        n
        for n in researcher_client.post(URL, submission(array="0-9%2", min_runtime="1h"), format="json").json()["notes"]
        if "array" in n
    )
    assert cli_note in run_cli(monkeypatch, researcher, *argv, "--array", "0-9%2", "--", "python")
    plain = researcher_client.post(URL, submission(), format="json").json()
    assert plain["array"] is None and not any("array" in n for n in plain["notes"])


def test_an_array_quote_answers_for_the_whole_array(researcher_client, submission, cluster):
    """16 free A100s, members of 4 GPUs: four start at once; a fifth only once one of them ends,
    which the simulation lets happen only at their wall-time limit (2 h, then the stop's grace). The charge is every
    member's protected part: 5 × 4 GPUs × 1 h."""
    before = _rows()
    body = researcher_client.post(
        URL, submission(array="0-4", min_runtime="1h", max_runtime="2h"), format="json"
    ).json()
    array = body["array"]
    assert array["members"] == 5 and array["limit"] is None and array["started"] == 5
    assert array["charge_gpu_hours"] == 20.0 and array["starts_now"] is True
    first = datetime.fromisoformat(array["first_start"])
    last = datetime.fromisoformat(array["last_start"])
    grace = settings.FAIRWAY["GRACE_PERIOD_S"]  # the timed-out member's GPUs are released after its grace
    assert last - first == timedelta(hours=2, seconds=grace)
    assert body["quotes"][0]["charge_gpu_hours"] == 0.0  # the lines still price one member
    note = next(n for n in body["notes"] if "array" in n)
    assert "20.00 GPU-h" in note and "first member starts now" in note and "its last by" in note
    assert _rows() == before


def test_an_array_quote_respects_its_cap(researcher_client, submission, cluster):
    """%2 of 10: two members start at once; the others wait for a slot of the cap (the quote adds
    only as many members as the cap lets run: their starts are not searched), so the last member
    has no start, and the note says why."""
    body = researcher_client.post(URL, submission(array="0-9%2", min_runtime="1h"), format="json").json()
    array = body["array"]
    assert (array["started"], array["last_start"], array["charge_gpu_hours"]) == (2, None, 40.0)
    assert array["first_start"] is not None and array["started_by"] == array["first_start"]
    note = next(n for n in body["notes"] if "array" in n)
    assert "2 members now" in note and "the other 8 wait for a slot of the %2 cap" in note


def test_an_array_quote_waiting_on_after_work_has_no_start(researcher, researcher_client, submission, cluster):
    first = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    body = researcher_client.post(URL, submission(array="0-3", after=[f"{first}:ok"]), format="json").json()
    assert body["array"]["first_start"] is None and body["array"]["last_start"] is None
    assert body["array"]["charge_gpu_hours"] == 32.0


def test_the_quote_notes_are_the_servers_words_on_every_surface(
    researcher, researcher_client, submission, cluster, monkeypatch
):
    """The form and the CLI printed two different footnotes; both print the API's notes, the
    start note among them (what the instant means, docs/estimates.md)."""
    import html

    from django.test import Client

    from scheduler.reports import start_note
    from tests.cli.inprocess import run_cli
    from tests.web.test_pages import _form

    notes = researcher_client.post(URL, submission(), format="json").json()["notes"]
    assert start_note() in notes
    argv = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "1h", "--", "x")
    out = run_cli(monkeypatch, researcher, *argv)
    browser = Client()
    browser.force_login(researcher)
    page = browser.post("/submit/", {**_form(min_runtime="1h"), "quote": "1"}).content.decode()
    for note in notes:
        assert note in out and html.escape(note) in page


def test_a_quote_on_a_held_budget_says_so(researcher, researcher_client, submission, cluster, org_tree, monkeypatch):
    """tryout24: a quote for a budget on hold printed "none before <in 7 days>" on every line and
    nothing else, while the workload, once submitted, said "its budget is on hold". The quote now
    names the held budget (the nearest one on hold, the budget itself or one above it)."""
    from budgets.services import do_set_hold
    from tests.cli.inprocess import run_cli

    do_set_hold(org_tree["nlp"], True)
    body = researcher_client.post(URL, submission(), format="json").json()
    assert {q["estimated_start"] for q in body["quotes"]} == {None}
    note = next(n for n in body["notes"] if "on hold" in n)
    assert note.startswith("Budget nlp is on hold")
    argv = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "1h", "--", "x")
    assert note in run_cli(monkeypatch, researcher, *argv)
    do_set_hold(org_tree["nlp"], False)
    body = researcher_client.post(URL, submission(), format="json").json()
    assert not any("on hold" in n for n in body["notes"])


def test_a_quote_on_a_budget_capped_with_hold_says_so(researcher_client, submission, cluster, org_tree):
    """tryout24: the same for a budget whose cap is reached with ``on_cap`` hold."""
    from budgets.models import Budget

    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=0, on_cap="hold")
    body = researcher_client.post(URL, submission(), format="json").json()
    assert all(q["estimated_start"] is None for q in body["quotes"] if q["min_runtime_s"])
    assert any(n.startswith("Budget nlp/olmo has reached its cap and holds new allocated work") for n in body["notes"])
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(on_cap="downgrade")
    body = researcher_client.post(URL, submission(), format="json").json()
    assert not any("holds new allocated work" in n for n in body["notes"])


def test_a_quote_on_a_budget_capped_with_downgrade_says_its_work_runs_unfunded(
    researcher_client, submission, cluster, org_tree
):
    """tryout: at a cap that downgrades, the quote priced charges and a protected minimum runtime
    that the workload would not get (it runs unfunded, as unallocated work); a note says so. Under
    the cap, no note."""
    from budgets.models import Budget

    body = researcher_client.post(URL, submission(), format="json").json()
    assert not any("cap" in n for n in body["notes"])
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=0, on_cap="downgrade")
    body = researcher_client.post(URL, submission(), format="json").json()
    note = (
        "Budget nlp/olmo has reached its cap: until its usage falls below the cap its new work runs unfunded, "
        "as unallocated work does: its minimum runtime protects nothing, it can be preempted at any time and "
        "nothing is charged (a line that starts then says unfunded, charges 0 and leaves the ratio as it is)."
    )
    assert note in body["notes"]
    # unfunded46: a cap of 0 never lifts, so every allocated line starts unfunded and says so
    allocated = [q for q in body["quotes"] if q["min_runtime_s"]]
    assert allocated and all(q["unfunded"] and q["start_text"].endswith(" (unfunded)") for q in allocated)
    assert {q["charge_gpu_hours"] for q in body["quotes"]} == {0.0}


def test_an_array_note_with_one_member_started_says_it_once():
    """try40: a %2 array of 4 where one GPU was free read "its first member starts now; 1 of its
    members start now, the others not before Dec 13 2026 11:52:39 UTC": the first member twice, a
    plural verb for one, "not before" for a search that found nothing, and the instant in another
    form than the lines' "none before Dec 13 11:52:54 UTC"."""
    from datetime import UTC

    from fairway_cli.numbers import instant_text
    from scheduler.array_quote import ArrayQuote, array_note

    now = datetime.now(UTC).replace(microsecond=0)
    horizon = now + timedelta(days=7)
    one = ArrayQuote(
        members=4, limit=2, min_runtime_s=7200, first_start=now, last_start=None, started=1, started_by=now,
        charge_gpu_hours=8.0, searched_until=horizon, starts_now=True,
    )  # fmt: skip
    note = array_note(one, waits=False)
    assert note.endswith(
        f"; its first member starts now; no start is found for the other 3 before {instant_text(horizon)}."
    )
    later = now + timedelta(hours=1)
    two = ArrayQuote(
        members=5, limit=None, min_runtime_s=7200, first_start=now, last_start=None, started=2, started_by=later,
        charge_gpu_hours=10.0, searched_until=horizon, starts_now=True,
    )  # fmt: skip
    assert array_note(two, waits=False).endswith(
        f"; its first member starts now; 2 of its members start by {instant_text(later)}; "
        f"no start is found for the other 3 before {instant_text(horizon)}."
    )


def test_a_quote_at_a_hold_cap_that_lifts_within_the_window_starts_the_allocated_lines_at_the_lift(
    researcher_client, submission, cluster, org_tree
):
    """left39: at a cap that lifts as old usage leaves its period the quote said "none" (and "the
    simulation lifts no cap") though the tick starts the work then. The simulation follows the cap:
    the allocated lines start at the first second the usage in the period is below the cap."""
    from django.utils import timezone

    from budgets.models import Budget, UsageEntry

    olmo = org_tree["nlp/olmo"]
    # Given olmo at its cap (1 GPU-hour a day, hold) by 2 GPUs × 1 h that ended 23 h ago
    end = timezone.now().replace(microsecond=0) - timedelta(hours=23)
    UsageEntry.objects.create(budget=olmo, cluster=cluster, start=end - timedelta(hours=1), end=end, gpus=2)
    Budget.objects.filter(pk=olmo.pk).update(cap_gpu_hours=1, cap_period_days=1, on_cap="hold")
    body = researcher_client.post(URL, submission(), format="json").json()
    # Then the unallocated line starts now and every allocated one once 2 × (end − (t − 24 h)) < 1 h
    lift = (end + timedelta(hours=24, minutes=-30, seconds=1)).isoformat().replace("+00:00", "Z")
    assert {q["estimated_start"] for q in body["quotes"] if q["min_runtime_s"]} == {lift}
    assert body["quotes"][0]["starts_now"]
    assert not any("lifts no cap" in n for n in body["notes"])
    assert any(n.startswith("Budget nlp/olmo has reached its cap and holds new allocated work") for n in body["notes"])
