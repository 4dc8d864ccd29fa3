"""Submission-time feasibility (DESIGN.md §3.3): a request no host of the cluster
could ever satisfy is rejected at once with a clear code and message.

This is the one statement of the rule. Live submission (``scheduler.services``,
hence the API, the web form, the CLI and trace replays), the scenario runner and
the trace simulator call it; so do the pass's ``unschedulable`` reason and the idle
screen (``Standing.unschedulable``, per shape, on the registered hosts).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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
        return "too_many_gpus", f"{gpus} GPUs needs {need} whole {largest}-GPU {model} hosts; {where} has {have}."
    return None


def infeasible_request(
    host_sizes: Iterable[tuple[str, int]], model: str, gpus: int, *, cluster: str | None = None
) -> tuple[str, str] | None:
    """:func:`infeasible_shape` of ``(model, GPU count)`` of every registered host of the cluster."""
    return infeasible_shape(gpu_shapes(host_sizes), model, gpus, cluster=cluster)
