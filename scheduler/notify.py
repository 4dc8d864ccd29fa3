"""Side effects that must happen only after the database commits (STYLE.md: enqueue after commit).

Every state change that the tick or an agent must hear about calls one of these
inside its transaction; nothing is sent if the transaction rolls back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from django.db import transaction


def request_tick_on_commit(cluster_id: int) -> None:
    """Ask for a (debounced) scheduling tick of ``cluster_id`` once the transaction commits."""
    from scheduler import tasks  # local import: tasks imports the broker

    transaction.on_commit(lambda: tasks.request_tick(cluster_id))


def request_estimates_on_commit(cluster_id: int) -> None:
    """Ask for (debounced, single-flight) estimated starts of ``cluster_id`` once the transaction
    commits: a change the forward simulation reads that no tick would ask them for (a running
    workload's wall-time limit, docs/jobs.md)."""
    from scheduler import tasks  # local import: tasks imports the broker

    transaction.on_commit(lambda: tasks.request_estimates(cluster_id))


def push_hosts_on_commit(host_ids: Iterable[int]) -> None:
    """Push the desired state of these hosts to their agents once the transaction commits."""
    from scheduler import gateway  # local import: gateway imports channels

    ids = sorted(set(host_ids))
    if ids:
        transaction.on_commit(lambda: gateway.push_desired_state(ids))


def events_on_commit(events: Iterable[object], owners: Mapping[int, int] | None = None) -> None:
    """Queue the notifications these just-written workload events call for; they are sent by
    the ``deliver_notification`` actor once the transaction commits (scheduler/notifications.py).
    ``owners``: workload id → owner id where the caller has read them (else read there)."""
    from scheduler import notifications  # local import: it imports the mail machinery

    notifications.queue_for(events, owners)
