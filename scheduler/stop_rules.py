"""An issued stop's standing (DESIGN.md §4) as pure predicates: no ORM, no clock.

One statement of each rule (STYLE.md), called by every surface that applies it: the server's
lifecycle and cancel (``scheduler.lifecycle``, ``services.do_cancel_workload``) and the
simulator that both the scenario runner's memory backend and the trace simulator drive
(``scheduler.sim.engine.Engine.cancel``). Reasons are the attempt end reasons' plain strings
(``Attempt.EndReason``'s values).
"""

from __future__ import annotations

REQUEUE_REASONS = frozenset({"preempted", "drained", "gpu_fault", "lost"})
"""End reasons after which the workload is requeued (DESIGN.md §4): the server's stops that are
not the workload's own end, and a lost host."""

FAILED_TO_START = "failed_to_start"
"""Requeued up to :data:`MAX_START_FAILURES` times (§4): the workload runs again."""

MAX_START_FAILURES = 3
"""A workload is requeued after ``failed_to_start`` at most this many times, then fails (§4)."""


def requeue_count(requeue_ends: int, start_failures: int) -> int:
    """How many times a workload went back to the queue, from its attempts' ends: those with a
    reason of :data:`REQUEUE_REASONS` (preempted, drained, GPU fault, lost) and its failed starts
    but the one that failed it (:data:`MAX_START_FAILURES`). What ``fairway ls`` (REQUEUES), the
    workloads page and the API (``accounting.requeues``) show (``scheduler.accounting``); a retry
    after the workload's own failure is not a requeue (``retries_used``, docs/jobs.md)."""
    return requeue_ends + min(start_failures, MAX_START_FAILURES)


def runs_again(stop_reason: str, *, retries_left: bool = False, start_failures_left: bool = True) -> bool:
    """Whether the workload of an attempt stopped for ``stop_reason`` runs again once the attempt
    ends (returns to pending, original submission kept: DESIGN.md §4): a requeue
    (:data:`REQUEUE_REASONS`), a failed start's requeue, a gang part's ``failed`` with retries
    left (``retries_left``). Not after a stop that ends the workload: ``canceled``, ``timeout``,
    a gang part's own ``succeeded``, ``failed`` without retries left. The forward simulation
    requeues a snapshot's stopping attempt by it (``scheduler.snapshot``, est48).
    ``start_failures_left``: for ``failed_to_start`` (a gang's part), whether the workload failed to
    start fewer than :data:`MAX_START_FAILURES` times before this one (after the last it fails:
    ``scheduler.lifecycle``; brk48b: the estimates requeued it whatever its count)."""
    if stop_reason in REQUEUE_REASONS:
        return True
    if stop_reason == FAILED_TO_START:
        return start_failures_left
    return stop_reason == "failed" and retries_left


def cancel_replaces(stop_reason: str | None, *, retries_left: bool = False) -> bool:
    """Whether a user's cancel replaces the stop already issued to an attempt (``stop_reason``;
    None or empty: no stop yet, the cancel is the stop).

    Once the server has issued a stop, the attempt's end reason is that stop's reason (DESIGN.md
    §4), so a cancel replaces only a stop after which the workload would run again: a requeue
    (:data:`REQUEUE_REASONS`), a failed start's requeue, a gang part's ``failed`` with retries
    left (``retries_left``: ``retries_used < retries``). A stop that ends the workload keeps its
    reason: ``canceled``, ``timeout`` (brk37: it was relabelled ``canceled``), a gang part's own
    ``succeeded``, or ``failed`` without retries left."""
    return not stop_reason or runs_again(stop_reason, retries_left=retries_left)
