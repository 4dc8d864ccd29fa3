"""CPUs and memory beside GPUs (DESIGN.md §3.3), stated once.

A host offers ``cpus`` and ``memory`` (None: unknown, no constraint). Work asks, per host it runs
on, ``cpus`` and ``memory``; a request left out is the host's per-GPU share of what the work holds
there (``floor(host CPUs × GPUs / host GPUs)``, likewise memory). A host fits work when its free
GPUs suffice (the caller's count) and, beside what open attempts there request, its CPUs and memory
do (:func:`fits`). Fair share, usage and charging never read these: GPU-time only.

Shares of GPUs are never more than the host has, so work that asks nothing special never meets a
CPU or memory limit: on a host where no open attempt asks more than its share
(``HostView.over_share == 0``), a workload within its share fits wherever its GPUs do
(:func:`only_gpus`), and the fast path then counts GPUs only.
"""

from __future__ import annotations

from scheduler.policy.types import Host

Res = tuple[int, int]
"""``(CPUs, memory bytes)`` on one host."""

NONE: Res = (0, 0)


def share(total: int | None, gpus: int, size: int) -> int:
    """``floor(total × gpus / size)``: the per-GPU share of ``gpus`` GPUs of a ``size``-GPU host
    (0 when the total is unknown)."""
    if total is None or size <= 0:
        return 0
    return total * gpus // size


def need(host: Host, gpus: int, cpus: int | None, memory: int | None) -> Res:
    """What work holding ``gpus`` GPUs of ``host`` takes there, with these requests (None: share)."""
    return (
        share(host.cpus, gpus, host.size) if cpus is None else cpus,
        share(host.memory, gpus, host.size) if memory is None else memory,
    )


def within_share(host: Host, gpus: int, cpus: int | None, memory: int | None) -> bool:
    """True when the requests ask no more than the per-GPU share of ``gpus`` GPUs of ``host``."""
    return (cpus is None or host.cpus is None or cpus <= share(host.cpus, gpus, host.size)) and (
        memory is None or host.memory is None or memory <= share(host.memory, gpus, host.size)
    )


def fits(host: Host, used: Res, want: Res) -> bool:
    """The one statement of the rule: ``want`` fits on ``host`` beside ``used`` (what its open
    attempts request, less what leaving victims give back) when unrequested CPUs and memory
    suffice; an unknown capacity never limits."""
    return (host.cpus is None or used[0] + want[0] <= host.cpus) and (
        host.memory is None or used[1] + want[1] <= host.memory
    )


def fits_empty(host: Host, gpus: int, cpus: int | None, memory: int | None) -> bool:
    """True when the requests fit the host with nothing else on it (admission, gangs' whole hosts)."""
    return fits(host, NONE, need(host, gpus, cpus, memory))
