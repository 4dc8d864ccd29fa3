"""try50: a researcher's day by hand (README and docs/ only); the faults it met, each pinned."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from scheduler.estimates import store_estimates
from scheduler.models import Host, Workload
from scheduler.reports import estimate_words
from scheduler.services import do_release_workload, do_submit_workload
from scheduler.tick import run_tick


def test_a_release_forgets_the_estimate_run_made_while_it_was_held(researcher, submit_kwargs):
    """try50: a workload submitted held got "no start found" from the estimates run (nothing starts
    held work in its simulation); once released, its page said "No start within the next 7 days:
    the last estimate found none…" until the next run, though it could start at once. A release
    forgets that answer, as an update does: "Not known yet" until the next run."""
    held = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, hold=True))
    now = timezone.now()
    run_tick(held.cluster_id, now=now)
    store_estimates(held.cluster_id, now)
    held.refresh_from_db()
    assert held.pending_reason == "held" and not held.no_start_found  # brk52: no answer of a held one
    Workload.objects.filter(pk=held.pk).update(no_start_found=True)  # a run that read it before the tick
    held.refresh_from_db()
    released = do_release_workload(researcher, held)
    row = Workload.objects.get(pk=released.pk)
    assert (row.estimated_start, row.no_start_found) == (None, False)
    assert estimate_words(row).startswith("Not known yet")


def test_no_estimate_says_which_wait_keeps_it(researcher, submit_kwargs, org_tree):
    """try50: a workload held by its owner read "Not given while it waits as said above: the
    estimate lets no work end on its own (only at its wall-time limit) and no hold or hardware
    change…", words that named neither its hold nor what ends the wait. Each wait says its own."""
    from budgets.services import do_set_hold

    held = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, hold=True))
    too_big = do_submit_workload(researcher, **submit_kwargs(gpu_model="H100", gpu_count=4))
    Host.objects.filter(name="h100-1").update(removed_at=timezone.now())  # its only H100 host retired
    run_tick(held.cluster_id)
    held.refresh_from_db()
    too_big.refresh_from_db()
    assert (held.pending_reason, too_big.pending_reason) == ("held", "unschedulable")
    assert estimate_words(held) == (
        "Not given while it is held: the estimate releases no hold, so it gives one once it is released."
    )
    assert estimate_words(too_big).startswith("Not given while no host can hold it")
    do_release_workload(researcher, held)
    do_set_hold(org_tree["nlp/olmo"], True)
    run_tick(held.cluster_id)
    held.refresh_from_db()
    assert estimate_words(held).startswith("Not given while its budget is on hold")


def test_run_tick_of_an_unknown_cluster_names_the_clusters_there_are(cluster):
    """try50: ``manage.py run_tick nope`` said "no such cluster: nope" alone, where
    ``create_join_token`` names the clusters there are and where one comes from; one sentence now."""
    with pytest.raises(CommandError) as refused:
        call_command("run_tick", "nope", "default")
    assert str(refused.value) == (
        "no such cluster: nope (the clusters are: default); an admin creates one at /admin/ → Clusters → Add"
    )
    with pytest.raises(CommandError) as again:
        call_command("create_join_token", "--cluster", "nope")
    assert str(again.value) == str(refused.value)


def test_the_log_of_an_attempt_still_starting_says_so(researcher, submit_kwargs, monkeypatch):
    """try50: ``fairway release 8; fairway logs 8 -f`` printed "[gpu1: agent: no attempt
    2502142751402001392 here]" and stopped: the attempt was placed, its agent had not started it
    yet. An attempt its agent has not confirmed says it is starting, with no log yet."""
    from scheduler import gateway
    from scheduler.models import Attempt

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(w.cluster_id)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    assert attempt.started_at is None
    monkeypatch.setattr(
        gateway,
        "request_log_tails",
        lambda hosts, wire_id, tail: {h: {"error": f"agent: no attempt {wire_id} here"} for h in hosts},
    )
    [part] = gateway.attempt_log_tails(attempt.pk, 100)
    host = attempt.host.name
    assert (part.error, part.eof) == (f"attempt 1 is starting on {host}: no log yet", False)


def test_why_pending_of_work_whose_dependencies_ended_since_the_tick(researcher, submit_kwargs):
    """try50: ``fairway show`` of a workload whose ``after`` dependency had just succeeded said "It
    waits for the workloads it depends on to end." (the last tick's reason, no dependency left to
    name). It says they have ended and the scheduler judges it again."""
    from scheduler.reports import explain_pending

    first = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    then = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, after=[str(first.pk)]))
    run_tick(then.cluster_id)
    then.refresh_from_db()
    assert then.pending_reason == "dependency"
    assert f"It waits for #{first.pk} (" in explain_pending(then).lines()[0]
    Workload.objects.filter(pk=first.pk).update(state=Workload.State.SUCCEEDED, finished_at=timezone.now())
    assert explain_pending(Workload.objects.get(pk=then.pk)).lines()[0] == (
        "The workloads it waited for have ended: the scheduler judges it again within a few seconds."
    )


def test_a_budget_one_is_not_a_member_of_names_those_one_may_submit_to(researcher, submit_kwargs, org_tree):
    """try50: ``fairway submit -b nlp`` by a member of nlp/olmo said "You are not a member of budget
    nlp or of a budget above it." and nothing of where to submit; it names the choices, as a
    submission naming no budget does (``sole_budget_problem``)."""
    from scheduler.services import SubmissionError

    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(budget=org_tree["nlp"]))
    [problem] = refused.value.problems
    assert (problem.code, problem.field) == ("not_a_member", "budget")
    assert problem.message == (
        "You are not a member of budget nlp or of a budget above it. You may submit to: nlp/olmo."
    )


def test_budget_statement_of_a_leafs_name_alone_says_its_path(org_tree, researcher, api_client_for):
    """try50: ``manage.py budget_statement olmo`` and ``GET workloads/history/?budget=olmo`` said "no
    budget 'olmo'" where the lists' filter says "Budgets are named by their path: did you mean
    nlp/olmo?" (one sentence now: ``budgets.services.unknown_budget_words``)."""
    with pytest.raises(CommandError) as refused:
        call_command("budget_statement", "olmo")
    said = "No budget 'olmo'. Budgets are named by their path: did you mean nlp/olmo?"
    assert str(refused.value) == said
    history = api_client_for(researcher).get("/api/v1/workloads/history/?budget=olmo")
    assert (history.status_code, history.json()) == (400, {"budget": [said], "code": "invalid"})


def test_a_statement_from_a_future_day_names_the_default_until_as_such():
    """try50: ``fairway statement vision/det --since 2026-12-07`` said "since (2026-12-07) is after
    until (2026-12-06)" to someone who gave no until: it names today, the default."""
    from datetime import date

    from budgets.statement import StatementError, parse_range

    with pytest.raises(StatementError) as refused:
        parse_range("2026-12-07", None, today=date(2026, 12, 6))
    assert refused.value.message == "since (2026-12-07) is after today (2026-12-06, the default until)."
    with pytest.raises(StatementError) as typed:
        parse_range("2026-12-07", "2026-12-01", today=date(2026, 12, 6))
    assert typed.value.message == "since (2026-12-07) is after until (2026-12-01)."


def test_a_separate_clock_without_redis_says_it_reaches_no_worker(settings, monkeypatch, caplog):
    """try50: ``manage.py clock`` and ``rundramatiq`` started without ``REDIS_URL`` outside production
    ran, logged nothing wrong, and no tick ever happened (each on a broker in its own memory); they
    say so at start and point at ``serve``, which runs both without Redis."""
    import threading

    from scheduler import clock as clock_module
    from scheduler.management.production import embedded_warning

    settings.PRODUCTION, settings.REDIS_URL = False, ""

    class Stub:
        interval = 5.0

        def start(self) -> Stub:
            return self

        def stop(self) -> None:
            pass

    class Done(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            return True

    monkeypatch.setattr(clock_module, "Clock", lambda interval=None: Stub())
    monkeypatch.setattr(threading, "Event", Done)
    monkeypatch.setattr("signal.signal", lambda *a: None)
    with caplog.at_level("WARNING", logger="scheduler.clock"):
        call_command("clock")
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == [embedded_warning("clock")]
    assert "reaches no other process" in said[0] and "`manage.py serve` runs the worker and the clock" in said[0]
    settings.REDIS_URL = "redis://127.0.0.1:6379/7"
    assert embedded_warning("worker") is None
