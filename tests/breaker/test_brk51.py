"""brk51 (breaker): wait50, ext50 (a running workload's wall-time limit) and bulk50 attacked."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from scheduler import lifecycle
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import UpdateError, do_cancel_workload, do_submit_workload, do_update_workload
from scheduler.tick import run_tick

HOUR = 3600


def _running(w: Workload, started_ago_s: int = 0) -> Attempt:
    """Start ``w`` (a tick), confirmed ``started_ago_s`` seconds ago."""
    at = timezone.now() - timedelta(seconds=started_ago_s)
    run_tick(w.cluster_id, now=at)
    attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=at)
    w.refresh_from_db()
    assert w.state == Workload.State.RUNNING
    return attempt


@pytest.fixture
def canceling(researcher, submit_kwargs) -> Workload:
    """Running for 3 hours (M 1h, a 4h limit), its owner's cancel asked it to stop: still running
    until its GPUs are released."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR))
    _running(w, started_ago_s=3 * HOUR)
    do_cancel_workload(researcher, w)
    w.refresh_from_db()
    assert w.state == Workload.State.RUNNING
    return w


@pytest.mark.parametrize("who, value", [("researcher", 2 * HOUR), ("admin", 8 * HOUR), ("admin", None)])
def test_the_limit_of_a_workload_asked_to_stop_no_longer_changes(request, canceling, who, value):
    """docs/jobs.md: a stop already issued (a cancel too) refuses the change `not_pending`. A cancel
    leaves the workload `running` until its agent releases the GPUs, and its limit changed: a
    lowering's event said "it stops at the next pass, timeout", which never came (the tick stops
    no attempt already asked to stop)."""
    with pytest.raises(UpdateError) as refused:
        do_update_workload(request.getfixturevalue(who), canceling, {"max_runtime_s": value})
    assert (refused.value.code, refused.value.status) == ("not_pending", 409)
    row = Workload.objects.get(pk=canceling.pk)
    assert (row.max_runtime_s, row.spec_version) == (4 * HOUR, canceling.spec_version)
    assert not WorkloadEvent.objects.filter(workload=canceling, kind="updated").exists()


def test_the_page_of_a_workload_asked_to_stop_offers_no_limit_form(researcher, canceling):
    client = Client()
    client.force_login(researcher)
    page = client.get(f"/workloads/{canceling.pk}/").content.decode()
    assert 'id="edit-form"' not in page


@pytest.mark.parametrize("value", [2 * HOUR, 8 * HOUR])
def test_a_group_update_leaves_a_member_that_started_after_the_check_as_it_is(
    researcher, submit_kwargs, monkeypatch, value
):
    """docs/jobs.md: a group's update changes only its pending members, "one that starts meanwhile
    is left as it is". Every member is checked first (brk50), then changed one by one: a member the
    tick started in between went down the running workload's limit path, so a lowering changed a
    running member and a raise by its owner answered 403 ``raise_needs_admin`` after the members
    before it had changed."""
    from scheduler import services

    kw = submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=4 * HOUR, array="0-1")
    members = do_submit_workload(researcher, **kw)
    group = (members[0] if isinstance(members, list) else members).group
    checked_update = services._checked_update
    checked: list[int] = []

    def then_a_tick(current, changes, tree, actor=None):  # the tick starts both once both are checked
        answer = checked_update(current, changes, tree, actor)
        checked.append(current.pk)
        if len(checked) == 2:
            run_tick(current.cluster_id)
        return answer

    monkeypatch.setattr(services, "_checked_update", then_a_tick)
    assert services.do_update_group(researcher, group, {"max_runtime_s": value}) == []
    rows = Workload.objects.filter(group=group)
    assert {(w.state, w.max_runtime_s) for w in rows} == {(Workload.State.STARTING, 4 * HOUR)}
    assert not WorkloadEvent.objects.filter(workload__group=group, kind="updated").exists()


def test_a_bulk_cancel_names_work_already_stopping_unchanged_not_canceled(researcher, submit_kwargs, canceling):
    """bulk50 answers ``changed``: "workloads changed", ``stopping``: "asked to stop: they end
    canceled". A workload its earlier cancel (or its own timeout) already stops is changed by no
    second cancel (``do_cancel_workload`` keeps the stop issued: no write, no event), yet a bulk
    cancel counted it changed and stopping, every time (``fairway cancel --mine --state running``
    said "canceled 2 workloads (2 asked to stop)" twice, the page "Cancel these 2"), a timeout one
    too, which ends ``failed``, not canceled. It is skipped ``unchanged``, as a hold that changes
    nothing is."""
    from scheduler.bulk import do_bulk_action

    timing_out = do_submit_workload(
        researcher, **submit_kwargs(name="t", gpu_count=1, min_runtime_s=HOUR, max_runtime_s=2 * HOUR)
    )
    _running(timing_out, started_ago_s=3 * HOUR)
    run_tick(timing_out.cluster_id)  # its limit passed: a timeout stop
    assert Workload.objects.get(pk=timing_out.pk).state == Workload.State.PREEMPTING
    fresh = do_submit_workload(researcher, **submit_kwargs(name="f", gpu_count=1))
    _running(fresh)
    events = WorkloadEvent.objects.count()
    started = Workload.objects.filter(pk__in=[canceling.pk, timing_out.pk, fresh.pk])

    for dry_run in (True, False):
        outcome = do_bulk_action(researcher, "cancel", started, dry_run=dry_run)
        assert (outcome.changed, outcome.stopping) == ([fresh.pk], [fresh.pk])
        assert outcome.skipped == [(canceling.pk, "unchanged"), (timing_out.pk, "unchanged")]
        assert "stop" in outcome.reasons["unchanged"]
    assert WorkloadEvent.objects.count() == events + 1  # the fresh one's cancel_requested alone
    stop = Attempt.objects.get(workload=timing_out, ended_at__isnull=True).stop_reason
    assert stop == Attempt.EndReason.TIMEOUT


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_bulk_question_is_asked_on_stderr_so_a_redirected_stdout_still_shows_it(
    monkeypatch, capsys, researcher, submit_kwargs
):
    """``fairway cancel --mine --state pending > log`` (a terminal's stdin, stdout to a file or a
    pipe) wrote "Cancel these 2 workloads? [y/N]" into the file and waited on the keyboard with
    nothing on the screen. The question goes to stderr, as ``rm -i``'s and ``getpass``'s do; the
    count and the outcome stay on stdout."""
    import sys

    from tests.cli.inprocess import run_cli

    for i in range(2):
        do_submit_workload(researcher, **submit_kwargs(name=f"r{i}"))
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    out = run_cli(monkeypatch, researcher, "cancel", "--mine", "--state", "pending")
    assert "Cancel these 2 workloads? [y/N] " in capsys.readouterr().err
    assert "[y/N]" not in out
    assert out.startswith("2 workloads match: 2 to cancel\n") and out.endswith("canceled 2 workloads\n")
    assert set(Workload.objects.values_list("state", flat=True)) == {"canceled"}
