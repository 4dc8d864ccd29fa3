"""Each cluster's registered hardware kept per web process while no host or GPU changed it (issue 15).

A submission checks its size and its image against the cluster's hardware
(``scheduler.services._hardware``: GPUs per host and model, the hosts' CPUs, memory and labels):
one grouped query and a JSON decode per host, ~1.3 ms of a 8–9 ms submission at 64 hosts.
Hardware changes when a host registers, says hello with other CPUs or memory, is relabelled or
removed, or its GPUs change; heartbeats, health and nominations do not touch it. So a process
keeps what it read under a version (:class:`config.memo.VersionedMemo`, one cache read per
submission), and every write of those fields forgets it: ``Host``'s and ``GPU``'s ``save``
(all fields, or ``update_fields`` naming one of them) and ``delete`` signals (``scheduler.apps``)
and their querysets' ``update``/``bulk_update`` (naming one of them), ``bulk_create`` and
``delete`` (``scheduler.models``). The plain reading stays the oracle (``tests/api/test_web_tier.py``).
"""

from __future__ import annotations

from collections.abc import Iterable

from config.memo import VersionedMemo

MEMO = VersionedMemo("fairway:hardware-version")


def forget_if(fields: Iterable[str] | None, hardware_fields: frozenset[str]) -> None:
    """Forget the kept hardware when ``fields`` (None: every field) names one of ``hardware_fields``."""
    if fields is None or not hardware_fields.isdisjoint(fields):
        MEMO.forget()
