"""The attempts a producer changed between two snapshots (the attempts' side of
:class:`~scheduler.policy.pending.PendingLog`): :meth:`~scheduler.policy.standing.Standing.sync`
reads them instead of comparing every attempt of the snapshot with the last one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scheduler.policy.types import Attempt, Snapshot


class AttemptLog:
    """A producer's record of the attempt ids it put or dropped; :meth:`cut` closes the interval
    of one snapshot. Every change of the attempts must be told, or the changes are wrong."""

    def __init__(self) -> None:
        self.serial = 0
        self._ids: set[str] = set()

    def touch(self, aid: str) -> None:
        self._ids.add(aid)

    def cut(self, attempts: Mapping[str, Attempt]) -> AttemptChanges:
        """The changes since the last cut (since the start for the first), read from the
        producer's ``attempts`` by id; starts the next interval."""
        out = AttemptChanges(self, self.serial, {aid: attempts.get(aid) for aid in self._ids})
        self.serial += 1
        self._ids = set()
        return out


@dataclass(frozen=True, slots=True)
class AttemptChanges:
    """The open attempts put (new, or replaced by another object: the attempt now) or dropped
    (None) between the previous snapshot of ``source`` (number ``serial - 1``) and this one, by
    id: what a producer that keeps its attempts by id (the forward simulation of estimates)
    hands with a snapshot's attempts (``snap.attempts.changes``), so that :meth:`Standing.sync`
    reads them instead of comparing every attempt (as :class:`~scheduler.policy.pending.PendingChanges`
    for the pending workloads)."""

    source: AttemptLog
    serial: int
    changed: dict[str, Attempt | None]


class AttemptsView(list[Attempt]):
    """A snapshot's attempts (``snap.attempts``) with the :class:`AttemptChanges` since the
    producer's previous snapshot (``changes``): any reader sees a list; the policy's standing
    reads the changes."""

    def __init__(self, items: Iterable[Attempt], changes: AttemptChanges) -> None:
        super().__init__(items)
        self.changes = changes


def attempt_changes(snap: Snapshot) -> AttemptChanges | None:
    """The changes ``snap``'s attempts carry, if any."""
    changes = getattr(snap.attempts, "changes", None)
    return changes if isinstance(changes, AttemptChanges) else None
