"""Bulk cancel / hold / release of the workloads a filter matches (docs/jobs.md "Bulk actions";
Slurm's ``scancel -u me --state=PENDING``, ``scontrol hold`` of many jobs): each workload by the
single-workload service, only those the actor may act on, the rest named with a reason."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduler import bulk
from scheduler.bulk import BulkError, do_bulk_action
from scheduler.models import ArrayGroup, Workload, WorkloadEvent
from scheduler.services import do_hold_workload, do_submit_workload
from tests.bulk_setup import states


def test_the_owner_cancels_their_pending_work_and_another_users_is_never_touched(researcher, mine, theirs):
    before = states()
    outcome = do_bulk_action(researcher, "cancel", Workload.objects.filter(state="pending"))
    assert outcome.matched == 5
    assert outcome.changed == [w.pk for w in mine]
    assert outcome.skipped == [(w.pk, "forbidden") for w in theirs]
    assert "owner" in outcome.reasons["forbidden"]
    after = states()
    assert {after[w.pk][0] for w in mine} == {"canceled"}
    assert all(after[w.pk] == before[w.pk] for w in theirs)
    assert not WorkloadEvent.objects.filter(workload__in=theirs).exclude(kind="submitted").exists()
    assert WorkloadEvent.objects.filter(workload__in=mine, kind="canceled", actor=researcher).count() == 3


def test_a_dry_run_changes_nothing_and_names_what_the_run_changes(researcher, mine, theirs):
    before = states()
    events = WorkloadEvent.objects.count()
    preview = do_bulk_action(researcher, "hold", Workload.objects.all(), dry_run=True)
    assert (preview.dry_run, preview.matched) == (True, 5)
    assert states() == before and WorkloadEvent.objects.count() == events
    done = do_bulk_action(researcher, "hold", Workload.objects.all())
    assert done.changed == preview.changed == [w.pk for w in mine]
    assert done.skipped == preview.skipped
    assert set(Workload.objects.filter(pk__in=done.changed).values_list("hold", flat=True)) == {"user"}


def test_a_filter_matching_nothing_does_nothing(researcher, mine):
    outcome = do_bulk_action(researcher, "cancel", Workload.objects.filter(state="running"))
    assert (outcome.matched, outcome.changed, outcome.skipped, outcome.reasons) == (0, [], [], {})
    assert set(Workload.objects.values_list("state", flat=True)) == {"pending"}


def test_more_matches_than_the_cap_are_refused_whole(settings, researcher, mine):
    settings.FAIRWAY = {**settings.FAIRWAY, "BULK_MAX": 2}
    for dry_run in (True, False):
        with pytest.raises(BulkError) as refused:
            do_bulk_action(researcher, "cancel", Workload.objects.all(), dry_run=dry_run)
        assert refused.value.code == "too_many_matched"
        assert "more than 2" in refused.value.message
    assert set(Workload.objects.values_list("state", flat=True)) == {"pending"}
    assert do_bulk_action(researcher, "cancel", Workload.objects.filter(pk__in=[mine[0].pk, mine[1].pk])).matched == 2


def test_each_workload_follows_the_single_workload_rules(researcher, admin, mine):
    a, b, c = mine
    Workload.objects.filter(pk=a.pk).update(state=Workload.State.RUNNING)
    do_hold_workload(admin, b)  # an admin hold: not the owner's to release
    held = do_bulk_action(researcher, "hold", Workload.objects.all())
    assert held.changed == [c.pk]
    assert held.skipped == [(a.pk, "not_pending"), (b.pk, "unchanged")]
    released = do_bulk_action(researcher, "release", Workload.objects.all())
    assert released.changed == [c.pk]
    assert released.skipped == [(a.pk, "not_pending"), (b.pk, "forbidden")]
    assert "only an admin" in released.reasons["forbidden"]
    assert Workload.objects.get(pk=b.pk).hold == "admin"
    again = do_bulk_action(researcher, "release", Workload.objects.filter(pk=c.pk))
    assert again.skipped == [(c.pk, "not_held")]


def test_a_cancel_of_started_work_asks_it_to_stop_and_finished_work_is_skipped(researcher, mine):
    a, b, c = mine
    Workload.objects.filter(pk=a.pk).update(state=Workload.State.SUCCEEDED)
    Workload.objects.filter(pk=b.pk).update(state=Workload.State.RUNNING)
    preview = do_bulk_action(researcher, "cancel", Workload.objects.all(), dry_run=True)
    assert (preview.changed, preview.stopping, preview.skipped) == ([b.pk, c.pk], [b.pk], [(a.pk, "already_final")])


def test_a_budget_manager_acts_on_the_members_work(manager, mine, theirs):
    outcome = do_bulk_action(manager, "hold", Workload.objects.all())
    assert outcome.changed == sorted(w.pk for w in [*mine, *theirs])
    assert outcome.skipped == []


def test_a_workload_that_changed_since_it_was_read_is_skipped_not_changed(monkeypatch, researcher, mine):
    a = mine[0]
    real = bulk._matches

    def read_then_start(workloads):  # the tick starts it between the read and its turn
        rows = real(workloads)
        Workload.objects.filter(pk=a.pk).update(state=Workload.State.RUNNING)
        return rows

    monkeypatch.setattr(bulk, "_matches", read_then_start)
    outcome = do_bulk_action(researcher, "hold", Workload.objects.all())
    assert outcome.skipped == [(a.pk, "not_pending")]
    assert Workload.objects.get(pk=a.pk).hold == ""


def test_the_group_path_still_holds_and_a_group_filter_matches_its_members(researcher, submit_kwargs):
    from scheduler.services import do_hold_group

    do_submit_workload(researcher, **submit_kwargs(), array="0-2")
    group = ArrayGroup.objects.get()
    ids = list(group.members.order_by("pk").values_list("pk", flat=True))
    assert do_hold_group(researcher, group) == ids
    outcome = do_bulk_action(researcher, "release", Workload.objects.filter(group=group))
    assert outcome.changed == ids


def test_a_preview_reads_a_fixed_number_of_queries_whatever_the_matches(researcher, teammate, submit_kwargs):
    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            do_bulk_action(researcher, "hold", Workload.objects.all(), dry_run=True)
        return len(queries)

    do_submit_workload(researcher, **submit_kwargs())
    do_submit_workload(teammate, **submit_kwargs())
    few = count()
    for i in range(6):
        do_submit_workload(researcher if i % 2 else teammate, **submit_kwargs(name=f"n{i}"))
    assert count() == few


def test_an_unknown_action_is_refused(researcher, mine):
    with pytest.raises(BulkError) as refused:
        do_bulk_action(researcher, "requeue", Workload.objects.all())
    assert refused.value.code == "invalid_action"
