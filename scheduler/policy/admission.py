"""Submission-time feasibility (DESIGN.md §3.3): a request no host of the cluster
could ever satisfy is rejected at once with a clear code."""

from __future__ import annotations

from collections.abc import Iterable


def infeasible_request(host_sizes: Iterable[tuple[str, int]], model: str, gpus: int) -> tuple[str, str] | None:
    """Why ``gpus`` GPUs of ``model`` can never run on these hosts, or None if they can.

    ``host_sizes`` are ``(model, GPU count)`` of every registered host of the cluster.
    Returns ``(code, message)`` with code ``invalid_gpu_count``, ``unknown_model`` or
    ``too_many_gpus``.
    """
    if gpus < 1:
        return "invalid_gpu_count", "a workload needs at least 1 GPU"
    sizes = [n for m, n in host_sizes if m == model]
    if not sizes:
        return "unknown_model", f"no host of this cluster has {model} GPUs"
    largest = max(sizes)
    if gpus <= largest:
        return None
    if gpus % largest:
        return (
            "too_many_gpus",
            f"{gpus} GPUs is more than one {model} host ({largest}) and not a multiple of it",
        )
    need = gpus // largest
    have = sum(1 for n in sizes if n == largest)
    if need > have:
        return "too_many_gpus", f"{gpus} GPUs needs {need} whole {largest}-GPU hosts; the cluster has {have}"
    return None
