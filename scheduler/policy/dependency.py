"""The ``dependency`` pending reason (DESIGN.md §3.8): a workload waits while its ``after`` list
is not met (the server judges that and sets ``Workload.waiting``), or while its array group
already holds its ``%N`` cap: members holding GPUs (``Snapshot.group_limits``) plus the members
started earlier in the same pass.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.policy.types import Snapshot, Workload


def dependency_block(snap: Snapshot, w: Workload, started: Mapping[str, int]) -> dict[str, object] | None:
    """The reason's detail when ``w`` must wait, else None. ``started``: group → starts so far."""
    if w.waiting:
        return {"after": True}
    if w.group is None:
        return None
    cap = snap.group_limits.get(w.group)
    if cap is None:
        return None
    limit, holding = cap
    if holding + started.get(w.group, 0) >= limit:
        return {"group": w.group, "limit": limit}
    return None
