"""Each cluster's registered hardware kept per web process while no host or GPU changed it (issue 15).

A submission checks its size and its image against the cluster's hardware
(``scheduler.services._hardware``: GPUs per host and model, the hosts' CPUs, memory and labels):
one grouped query and a JSON decode per host, ~1.3 ms of a 8–9 ms submission at 64 hosts.
Hardware changes when a host registers, says hello with other CPUs or memory, is relabelled or
removed, or its GPUs change; heartbeats, health and nominations do not touch it. So a process
keeps what it read under a version (:class:`config.memo.VersionedMemo`, one cache read per
submission), and every write of those fields (a host's cluster, name, labels, CPUs, memory and
removal, a GPU's host, index and model) forgets it: ``Host``'s and ``GPU``'s ``save``
(all fields, or ``update_fields`` naming one of them) and ``delete`` signals (``scheduler.apps``)
and their querysets' ``update``/``bulk_update`` (naming one of them), ``bulk_create`` and
``delete`` (``scheduler.models``). The plain reading stays the oracle (``tests/api/test_web_tier.py``).

A tick's snapshot keeps its cluster's stable hosts and GPUs under the same version
(``scheduler.snapshot._hardware_kept``) and reads only the volatile fields (host state, drain,
last heartbeat; GPU health, nomination) of the rows where they differ from the default
(``tests/tick/test_snapshot_kept.py`` compares it with ``_hardware_plain``).

The clusters themselves (a handful of rows, which change when one is created or edited) are kept
under the same version (:func:`shared_cluster`): a submission resolves its ``cluster`` from them
with no query, and reads the version once for both (``token``). Every write of a cluster forgets
it, whatever its fields (``Cluster``'s signals, ``scheduler.models.ClusterQuerySet``).
:func:`scheduler.services.resolve_cluster` stays the plain reading and the oracle.
"""

from __future__ import annotations

from typing import Any

from config.memo import READ, VersionedMemo

MEMO = VersionedMemo("fairway:hardware-version", per_request=True)


def shared_cluster(ref: Any, token: Any = READ) -> Any:
    """``scheduler.services.resolve_cluster(ref)`` (a Cluster, its id or name; None or "": the only
    cluster), from the clusters this process keeps (one cache read, none with ``token``). The
    Cluster returned is shared by the process's requests: read it, never change it."""
    from scheduler.models import Cluster
    from scheduler.services import MAX_DB_INT

    if isinstance(ref, Cluster):
        return ref
    clusters: list[Cluster] = MEMO.get("clusters", lambda: list(Cluster.objects.all()), token)  # by name
    if ref is None or ref == "":
        return clusters[0] if len(clusters) == 1 else None
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int):
        return next((c for c in clusters if c.pk == ref), None) if 0 < ref <= MAX_DB_INT else None
    if isinstance(ref, str):
        if "\x00" in ref:
            return None
        name = ref.strip()
        return next((c for c in clusters if c.name == name), None)
    return None
