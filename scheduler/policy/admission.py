"""Submission-time feasibility (DESIGN.md §3.3): a request no host of the cluster
could ever satisfy is rejected at once with a clear code and message.

This is the one statement of the rule (GPUs: :func:`infeasible_shape`; CPUs and memory per
host: :func:`infeasible_resources`). Live submission (``scheduler.services``,
hence the API, the web form, the CLI and trace replays), the scenario runner and
the trace simulator call it; so do the pass's ``unschedulable`` reason and the idle
screen (``Standing.unschedulable``, per shape, on the registered hosts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from scheduler.policy.resources import share

HostCapacity = tuple[int, int | None, int | None]
"""One registered host's ``(GPUs, CPUs, memory bytes)``; None: unknown (no constraint)."""

GpuShapes = Mapping[str, tuple[int, int]]
"""GPU model → ``(largest host size, number of hosts of that size)``, from :func:`gpu_shapes`."""


def gpu_shapes(host_sizes: Iterable[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """Summarize ``(model, GPU count)`` of every registered host into :data:`GpuShapes`.

    All :func:`infeasible_shape` needs: callers that judge many requests against the same
    hosts (the simulator) build it once.
    """
    shapes: dict[str, tuple[int, int]] = {}
    for model, size in host_sizes:
        big, count = shapes.get(model, (0, 0))
        if size > big:
            big, count = size, 0
        if size == big:
            count += 1
        shapes[model] = (big, count)
    return shapes


def infeasible_shape(shapes: GpuShapes, model: str, gpus: int, *, cluster: str | None = None) -> tuple[str, str] | None:
    """Why ``gpus`` GPUs of ``model`` can never run on hosts of these ``shapes``, or None if they can.

    ``n ≤`` the largest host of the model fits one host; a larger ``n`` is a gang and must be
    a multiple of that size with that many hosts of that size (§3.3). Returns ``(code,
    message)``, code ``invalid_gpu_count``, ``unknown_model`` or ``too_many_gpus``; the message
    is a sentence for people (``cluster`` names the cluster in it).
    """
    where = f"cluster {cluster}" if cluster else "this cluster"
    if gpus < 1:
        return "invalid_gpu_count", "A workload needs at least 1 GPU."
    largest, have = shapes.get(model, (0, 0))
    if largest < 1:
        models = ", ".join(sorted(m for m, (n, _c) in shapes.items() if n > 0)) or "no registered hosts"
        return "unknown_model", f"{where[0].upper()}{where[1:]} has no {model} GPUs (it has: {models})."
    if gpus <= largest:
        return None
    if gpus % largest:
        return (
            "too_many_gpus",
            f"{gpus} GPUs is more than the largest {model} host ({largest}) and not a multiple of it.",
        )
    need = gpus // largest
    if need > have:
        return "too_many_gpus", f"{gpus} GPUs need {need} whole {largest}-GPU {model} hosts; {where} has {have}."
    return None


SHARED_MEMORY_PROBLEM = "Shared memory is part of memory: at most the memory request"
"""The refusal of a ``shared_memory`` above the memory request, given (``services._check_requests``)
or left out (:func:`infeasible_resources`): the words of every surface (API, web form, CLI, YAML)."""


def infeasible_resources(
    capacities: Sequence[HostCapacity],
    largest: int,
    gpus: int,
    cpus: int | None,
    memory: int | None,
    shared_memory: int | None = None,
) -> tuple[str, str] | None:
    """Why CPU or memory requests per host can never be met on hosts of one model (``capacities``;
    the request's GPUs already fit their shape), or None.

    Work of ``gpus ≤ largest`` needs one host with at least ``gpus`` GPUs offering the requests;
    a gang needs ``gpus / largest`` hosts of the largest size offering them. A request left out
    is the host's per-GPU share, which every host offers (DESIGN.md §3.3). Codes
    ``too_many_cpus``, ``too_much_memory``; ``invalid_shared_memory`` when ``memory`` is left out
    and ``shared_memory`` is more than the per-GPU share of a host that could hold the work, the
    host of known memory that gives the least (decision brk46, docs/resources.md: placement does
    not weigh shared memory, so every such host must give enough; a gang's share is the whole host).
    """
    if cpus is None and memory is None and shared_memory is None:
        return None
    if cpus is not None and cpus < 0 or memory is not None and memory < 0:
        return "invalid_request", "CPU and memory requests cannot be negative."
    gang = gpus > largest
    on_host = largest if gang else gpus
    need = gpus // largest if gang else 1
    if cpus is not None or memory is not None:
        bad = _short_of(capacities, largest, gpus, cpus, memory, gang=gang, on_host=on_host, need=need)
        if bad is not None:
            return bad
    if shared_memory is not None and memory is None:
        shares = [share(m, on_host, size) for size, _c, m in capacities if _holds(size, on_host, largest, gang) and m]
        least = min(shares, default=None)
        if least is not None and shared_memory > least:
            return (
                "invalid_shared_memory",
                f"{SHARED_MEMORY_PROBLEM}; left out, memory is the host's per-GPU share, {_size(least)} for "
                f"{on_host} GPU{'s' if on_host != 1 else ''} on the host of the model that gives the least: "
                "give memory too.",
            )
    return None


def _holds(size: int, on_host: int, largest: int, gang: bool) -> bool:
    """A host of ``size`` GPUs can hold ``on_host`` GPUs of the work (a gang's part: a whole host of
    the largest size)."""
    return size >= on_host and not (gang and size != largest)


def _short_of(
    capacities: Sequence[HostCapacity],
    largest: int,
    gpus: int,
    cpus: int | None,
    memory: int | None,
    *,
    gang: bool,
    on_host: int,
    need: int,
) -> tuple[str, str] | None:
    """:func:`infeasible_resources` of the CPU and memory requests given."""

    def offers(cap: HostCapacity, cpu_ok: bool, mem_ok: bool) -> bool:
        size, c, m = cap
        if not _holds(size, on_host, largest, gang):
            return False
        return (cpu_ok or cpus is None or c is None or cpus <= c) and (
            mem_ok or memory is None or m is None or memory <= m
        )

    if sum(1 for cap in capacities if offers(cap, False, True)) < need:
        most = max((c or 0 for s, c, _ in capacities if s >= on_host), default=0)
        return "too_many_cpus", f"{cpus} CPUs per host is more than {_hosts(need)} offers (at most {most})."
    if sum(1 for cap in capacities if offers(cap, False, False)) < need:
        most = max((m or 0 for s, _, m in capacities if s >= on_host), default=0)
        return (
            "too_much_memory",
            f"{_size(memory or 0)} of memory per host is more than {_hosts(need)} offers (at most {_size(most)}).",
        )
    return None


def _hosts(need: int) -> str:
    return "any host of the model" if need == 1 else f"{need} whole hosts of the model"


def _size(n: int) -> str:
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n} bytes"


class HostTable(NamedTuple):
    """A cluster's registered hosts as :func:`infeasible_request` reads them, from
    :func:`host_table`: their shapes and, per GPU model, their ``(GPUs, CPUs, memory)``. Callers
    that judge many requests against the same hosts (a web process, while its kept hardware holds)
    build it once."""

    shapes: dict[str, tuple[int, int]]
    capacities: dict[str, list[HostCapacity]]


def host_table(host_sizes: Iterable[tuple[str, int] | tuple[str, int, int | None, int | None]]) -> HostTable:
    """:class:`HostTable` of hosts given as ``(model, GPUs, CPUs, memory)`` (a pair: unknown CPUs
    and memory)."""
    hosts = [(h[0], h[1], h[2] if len(h) > 2 else None, h[3] if len(h) > 3 else None) for h in host_sizes]
    capacities: dict[str, list[HostCapacity]] = {}
    for mo, n, c, m in hosts:
        capacities.setdefault(mo, []).append((n, c, m))
    return HostTable(gpu_shapes((m, n) for m, n, _, _ in hosts), capacities)


def infeasible_in(
    table: HostTable,
    model: str,
    gpus: int,
    *,
    cluster: str | None = None,
    cpus: int | None = None,
    memory: int | None = None,
    shared_memory: int | None = None,
) -> tuple[str, str] | None:
    """:func:`infeasible_request` on hosts already summarized by :func:`host_table`."""
    bad = infeasible_shape(table.shapes, model, gpus, cluster=cluster)
    if bad is None:
        capacities = table.capacities.get(model, [])
        bad = infeasible_resources(capacities, table.shapes[model][0], gpus, cpus, memory, shared_memory)
    return bad


def infeasible_request(
    host_sizes: Iterable[tuple[str, int] | tuple[str, int, int | None, int | None]],
    model: str,
    gpus: int,
    *,
    cluster: str | None = None,
    cpus: int | None = None,
    memory: int | None = None,
) -> tuple[str, str] | None:
    """:func:`infeasible_shape` of ``(model, GPU count)`` of every registered host of the cluster,
    then :func:`infeasible_resources` of the CPU and memory requests (hosts given as
    ``(model, GPUs, CPUs, memory)``; a pair has unknown CPUs and memory)."""
    return infeasible_in(host_table(host_sizes), model, gpus, cluster=cluster, cpus=cpus, memory=memory)


__all__ = [
    "SHARED_MEMORY_PROBLEM",
    "HostTable",
    "gpu_shapes",
    "host_table",
    "infeasible_in",
    "infeasible_request",
    "infeasible_resources",
    "infeasible_shape",
]
