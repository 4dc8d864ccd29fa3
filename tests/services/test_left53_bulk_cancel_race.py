"""left53: a bulk cancel counted as changed a started workload someone else cancelled between its
read and its turn (the service, reading the row again under its lock, changed nothing: the stop
already asked stays). It counts what the single-workload service changed (``cancel_workload``'s
answer, the rule ``cancel_changes``), skipped ``unchanged`` otherwise."""

from __future__ import annotations

from scheduler import bulk
from scheduler.models import Workload, WorkloadEvent
from scheduler.services import do_cancel_workload, do_submit_workload
from tests.breaker.test_brk51 import _running


def test_one_cancelled_by_another_meanwhile_is_skipped_unchanged(monkeypatch, researcher, manager, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    _running(w)
    real = bulk._open_attempts

    def read_then_cancel(action, rows):  # its owner cancels it between the read and its turn
        attempts = real(action, rows)
        do_cancel_workload(researcher, w)
        return attempts

    monkeypatch.setattr(bulk, "_open_attempts", read_then_cancel)
    events = WorkloadEvent.objects.filter(kind="cancel_requested").count()
    outcome = bulk.do_bulk_action(manager, "cancel", Workload.objects.filter(pk=w.pk))
    assert WorkloadEvent.objects.filter(kind="cancel_requested").count() == events + 1  # the owner's alone
    assert (outcome.changed, outcome.stopping, outcome.skipped) == ([], [], [(w.pk, "unchanged")])
    assert outcome.reasons["unchanged"] == bulk.STOPPING_WORDS
