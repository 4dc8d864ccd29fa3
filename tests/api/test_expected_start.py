"""One expected start (tryout): a pending workload's start is the same instant, in the same
words, on the API (list and detail), the pages (list and detail) and the CLI (``ls``, ``show``);
a reserved workload's is capped at its reservation's start plus the grace
(``scheduler.sim.estimate.reservation_latest``) wherever it is shown, also before any estimate
run; and the words say what the instant is: the scheduler's start (docs/estimates.md)."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.test import Client

from fairway_cli.numbers import instant_text
from scheduler.estimates import dependency_words
from scheduler.models import Workload
from scheduler.reports import start_note
from scheduler.tick import run_tick
from tests.api.fair_share_setup import olmo_waits_for_visions_protection
from tests.cli.inprocess import run_cli


@pytest.fixture
def reserved(researcher, outsider, submit_kwargs, org_tree, cluster):
    """vision/sam holds both A100 hosts, protected 10 more minutes; nlp/olmo's 8-GPU workload
    waits with a reservation for then. No estimate run yet."""
    waiting = olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs)
    waiting.refresh_from_db()
    latest = datetime.fromtimestamp(
        waiting.pending_detail["reserved_start"] + settings.FAIRWAY["GRACE_PERIOD_S"], tz=UTC
    )
    return waiting, latest


def _surfaces(w: Workload, user, researcher_client, monkeypatch) -> dict[str, str]:
    browser = Client()
    browser.force_login(user)
    listed = next(r for r in researcher_client.get("/api/v1/workloads/").json()["results"] if r["id"] == w.pk)
    detail = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    ls = next(line for line in run_cli(monkeypatch, user, "ls").splitlines() if line.split()[0] == str(w.pk))
    return {
        "api list": listed["estimated_start"],
        "api detail": detail["estimated_start"],
        "words": detail["estimated_start_words"],
        "sentences": " ".join(detail["pending_explanation"]["sentences"]),
        "list page": browser.get("/workloads/").content.decode(),
        "detail page": browser.get(f"/workloads/{w.pk}/").content.decode(),
        "ls": ls,
        "show": run_cli(monkeypatch, user, "show", str(w.pk)),
    }


def test_a_reserved_workload_shows_one_start_everywhere_before_any_estimate_run(
    reserved, researcher, researcher_client, monkeypatch
):
    """tryout: before an estimate run the page said 'by <reservation + grace>' while the API's
    estimated_start was null and ``fairway ls`` / the list page showed no start at all; the tick
    that stores the reservation caps the stored estimate at its latest start."""
    w, latest = reserved
    text = instant_text(latest)
    iso = latest.isoformat().replace("+00:00", "Z")
    seen = _surfaces(w, researcher, researcher_client, monkeypatch)
    assert seen["api list"] == seen["api detail"] == iso
    assert f"By {text} at the latest (GPUs are reserved for it)." in seen["words"]
    assert f"it starts by {text} at the latest" in seen["sentences"]
    assert f"by {text}" in seen["list page"] and f"by {text}" in seen["ls"]
    assert f"Estimated start: By {text} at the latest" in seen["detail page"]
    assert f"estimated start: By {text} at the latest" in seen["show"]


def test_a_later_stored_estimate_is_capped_by_a_new_reservation(reserved, researcher, researcher_client, monkeypatch):
    """An estimate stored before the reservation (later than its latest start) is capped by the
    tick that stores it, so no surface shows the later one."""
    w, latest = reserved
    Workload.objects.filter(pk=w.pk).update(estimated_start=latest + timedelta(hours=3), pending_detail={})
    run_tick(w.cluster_id)
    w.refresh_from_db()
    assert w.estimated_start == latest
    seen = _surfaces(w, researcher, researcher_client, monkeypatch)
    assert seen["api list"] == latest.isoformat().replace("+00:00", "Z")
    assert f"by {instant_text(latest)}" in seen["ls"]


def test_the_start_words_say_it_is_the_schedulers_start(reserved, researcher, researcher_client, monkeypatch):
    """The instant is the scheduler's decision; the job runs after a tick and its agent's start.
    The words say so, in one sentence every surface prints (docs/estimates.md)."""
    w, _latest = reserved
    note = start_note()
    assert "scheduler" in note and "host has started it" in note
    seen = _surfaces(w, researcher, researcher_client, monkeypatch)
    assert seen["words"].endswith(note)
    assert html.escape(note) in seen["detail page"] and note in seen["show"]


def test_a_workload_waiting_on_a_dependency_says_why_it_has_no_estimate(
    researcher, researcher_client, submission, cluster
):
    """Its quote said "none: waits for #N"; once submitted its page said "None yet: estimates are
    refreshed every 60 s", as if one were coming. It says none comes while it waits."""
    first = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    quoted = researcher_client.post("/api/v1/workloads/quote/", submission(after=[str(first)]), format="json").json()
    assert quoted["waits_for"] == [first]
    second = researcher_client.post("/api/v1/workloads/", submission(after=[str(first)]), format="json").json()["id"]
    run_tick(cluster.pk)
    detail = researcher_client.get(f"/api/v1/workloads/{second}/").json()
    assert detail["pending_reason"] == "dependency" and detail["estimated_start"] is None
    assert detail["estimated_start_words"] == dependency_words()  # left39: says why, as its quote did
    assert f"#{first}" in " ".join(detail["pending_explanation"]["sentences"])


def test_a_hold_clears_the_estimate_on_every_surface_at_the_next_tick(
    reserved, researcher, researcher_client, monkeypatch, org_tree
):
    """tryout: a budget put on hold said "budget on hold; by 22:46:50 UTC" in `fairway ls`, and
    "By 22:46:50 UTC at the latest" beside "no new work starts until leadership releases it" on
    the page and the API, until the next estimates run (up to 60 s). The tick that writes the
    reason clears the estimate found before it."""
    from budgets.services import do_set_hold

    w, latest = reserved
    assert w.estimated_start == latest
    do_set_hold(org_tree["nlp/olmo"], True)
    run_tick(w.cluster_id)
    w.refresh_from_db()
    assert w.pending_reason == "held" and w.estimated_start is None
    seen = _surfaces(w, researcher, researcher_client, monkeypatch)
    assert seen["api list"] is None and seen["api detail"] is None
    assert seen["words"].startswith("Not given while its budget is on hold")
    assert f"{latest:%H:%M:%S}" not in seen["ls"] + seen["show"] + seen["detail page"]


def test_no_estimate_reads_as_a_sentence_not_a_leaked_none_on_every_surface(
    researcher, researcher_client, submission, cluster, monkeypatch
):
    """tryout: the page read "Estimated start: None while it waits…" and "None yet…", as if a
    Python None had leaked. The words are made once (``estimate_words``) and every surface
    prints the same sentence, which does not start with "None"."""
    first = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    second = researcher_client.post("/api/v1/workloads/", submission(after=[str(first)]), format="json").json()["id"]
    run_tick(cluster.pk)
    for wid in (first, second):
        w = Workload.objects.get(pk=wid)
        if w.state != Workload.State.PENDING:
            continue
        seen = _surfaces(w, researcher, researcher_client, monkeypatch)
        words = seen["words"]
        assert words and not words.startswith("None")
        assert f"Estimated start: {html.escape(words)}" in seen["detail page"]
        assert f"estimated start: {words}" in seen["show"]
        assert "start: None" not in seen["detail page"] + seen["show"]


def test_an_any_dependency_on_running_work_says_why_it_has_no_estimate_in_one_sentence_everywhere(
    researcher, researcher_client, submission, cluster, monkeypatch
):
    """left39: a workload after ``#12:any``, #12 running with a 3 h wall-time limit, had no estimate
    (docs/estimates.md: the simulation follows no dependency), and the words said "the estimate
    lets no work end on its own (only at its wall-time limit)" (the page, the API, ``fairway
    show``) or "the simulation ends no work on its own" (the quote): both true of work without a
    limit, neither the reason here, as #12 does end at its limit and an ``:any`` dependent could
    start then. One sentence from the estimates module says why, on every surface."""
    # Given #first running with a wall-time limit
    first = researcher_client.post("/api/v1/workloads/", submission(max_runtime="3h"), format="json").json()["id"]
    run_tick(cluster.pk)
    assert Workload.objects.get(pk=first).state in (Workload.State.STARTING, Workload.State.RUNNING)
    said = dependency_words()
    assert "wall-time limit" in said and "any" in said and "follow" in said
    # When a workload after it (any end) is quoted, Then the quote's note is the same sentence naming it
    quoted = researcher_client.post("/api/v1/workloads/quote/", submission(after=[f"{first}:any"]), format="json")
    body = quoted.json()
    assert {q["estimated_start"] for q in body["quotes"]} == {None}
    assert dependency_words([first]) in body["notes"]
    argv = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "1h")
    assert dependency_words([first]) in run_cli(monkeypatch, researcher, *argv, "--after", f"{first}:any", "--", "x")
    # and once submitted, its estimate's words on the API, the page and `fairway show`
    second = researcher_client.post("/api/v1/workloads/", submission(after=[f"{first}:any"]), format="json").json()
    run_tick(cluster.pk)
    w = Workload.objects.get(pk=second["id"])
    assert (w.pending_reason, w.estimated_start) == ("dependency", None)
    seen = _surfaces(w, researcher, researcher_client, monkeypatch)
    assert seen["words"] == said
    assert html.escape(said) in seen["detail page"]
    assert said in " ".join(seen["show"].split())


def test_an_estimate_earlier_than_the_reservation_is_not_credited_to_it(
    reserved, researcher, researcher_client, monkeypatch
):
    """try40: a 1-GPU member whose reservation (on the host freeing at 13:48:56) was later than
    its estimate (12:19:09, on another host) read "GPUs are reserved for it: it starts by 12:19:09
    UTC at the latest": the reservation named as the cause of an instant it does not give. The
    one instant stays the estimate's; the reservation's own bound is said beside it."""
    w, latest = reserved
    earlier = latest - timedelta(minutes=5)
    Workload.objects.filter(pk=w.pk).update(estimated_start=earlier)
    seen = _surfaces(w, researcher, researcher_client, monkeypatch)
    sentences = seen["sentences"]
    assert f"GPUs are reserved for it: it starts by {instant_text(earlier)}" not in sentences
    assert (
        f"GPUs are also reserved for it, free by {instant_text(latest)} at the latest; "
        f"it may start earlier elsewhere: by {instant_text(earlier)} at the latest."
    ) in sentences
    assert f"By {instant_text(earlier)} at the latest (if nothing else ends earlier)." in seen["words"]
