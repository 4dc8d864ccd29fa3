"""Whether a registered GPU is in its agent's last report: one rule and one wording for every
surface that shows GPU samples (the hosts API, ``fairway hosts``, the clusters page, the admin).

An agent's hello whose GPUs differ from the registered ones is held for an admin's approval
(``Host.pending_inventory``, ``lifecycle._check_inventory``, docs/deploy.md §11). Until then a
registered GPU whose UUID the agent no longer reports (it fell off the bus, a card was pulled) is
still registered, but nothing measures it: its last sample is dropped at the hold (``GPU.last_sample``
emptied, so no reader takes the old numbers for current ones: the pyramid's stand-in utilization,
the workload page's) and every surface says "missing from the agent's last report since …". The
instant is the first hello that left it out (``pending_inventory["missing"]``: UUID → ISO instant,
kept across later hellos while it stays missing); a hold written before it was kept has none.

A stored sample carries the instant the server received it (``SAMPLED_AT``, :func:`stamped`): the
server stores one every few heartbeats (``gateway.sample_interval``), so a GPU freed since reads
its workload's last load until the next one (util49); every surface says the sample's age
(:func:`sampled_at`) rather than showing it as current.

A stored sample older than ``FAIRWAY_HOST_LOST_AFTER_S`` (the silence after which the server counts
a host's attempts lost) measures nothing now: :func:`current_sample` reads it as a GPU never
sampled (not measured), on every surface and in the pyramid, its age still said (left50;
docs/standing.md, "A stale GPU sample").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from fairway_cli.numbers import instant_text

SAMPLED_AT = "at"
"""The key of a stored sample (``GPU.last_sample``) holding when the server received it (ISO 8601)."""

MISSING = "missing"
"""The key of ``Host.pending_inventory`` mapping each registered GPU's UUID that the agent left out
to the instant (ISO 8601) of the first hello that did."""


@dataclass(frozen=True, slots=True)
class Unreported:
    """A registered GPU missing from its agent's last report, since ``since`` (None: not known)."""

    since: datetime | None

    @property
    def text(self) -> str:
        """The one wording: ``missing from the agent's last report since 14:05:09 UTC``."""
        words = "missing from the agent's last report"
        return f"{words} since {instant_text(self.since)}" if self.since is not None else words


def missing_map(pending: Any) -> dict[str, datetime | None] | None:
    """UUID → since of the GPUs ``pending`` (a ``Host.pending_inventory``) says are missing, or None
    when the hold has no ``missing`` map (written before it was kept: :func:`unreported_in` then
    reads the reported UUIDs)."""
    if not isinstance(pending, Mapping) or not isinstance(pending.get(MISSING), Mapping):
        return None
    return {str(uuid): parse_datetime(str(at)) if at else None for uuid, at in pending[MISSING].items()}


def reported_uuids(pending: Any) -> set[str]:
    """The UUIDs of the GPUs the agent reported in the held hello (``pending``)."""
    gpus = pending.get("gpus") if isinstance(pending, Mapping) else pending
    return {str(g.get("uuid")) for g in (gpus or []) if isinstance(g, Mapping)}


def unreported_in(pending: Any, uuid: str) -> Unreported | None:
    """The rule: the GPU of ``uuid``, registered on a host whose held inventory is ``pending``, is
    missing from its agent's last report (:class:`Unreported`), or None (reported, or no hold)."""
    if not pending:
        return None
    missing = missing_map(pending)
    if missing is not None:
        return Unreported(missing[uuid]) if uuid in missing else None
    return None if uuid in reported_uuids(pending) else Unreported(None)


def unreported(gpu: Any) -> Unreported | None:
    """:func:`unreported_in` of a ``GPU`` row with its host loaded (``select_related`` or a prefetch
    from the host: no query)."""
    return unreported_in(gpu.host.pending_inventory, gpu.uuid)


def missing_on_hold(registered_uuids: list[str], reported: set[str], before: Any, now: datetime) -> dict[str, str]:
    """The ``missing`` map of a new hold: each registered UUID not ``reported``, since the instant
    the hold ``before`` (the host's previous ``pending_inventory``) gave it, else ``now``."""
    earlier = missing_map(before) or {}
    return {uuid: (earlier.get(uuid) or now).isoformat() for uuid in sorted(registered_uuids) if uuid not in reported}


def stamped(sample: Mapping[str, Any], at: datetime) -> dict[str, Any]:
    """``sample`` as stored: with the instant ``at`` the server received it (:data:`SAMPLED_AT`)."""
    return {**sample, SAMPLED_AT: at.isoformat()}


def sampled_at(sample: Any) -> datetime | None:
    """When a stored sample (``GPU.last_sample``) was received; None without one (or one stored
    before samples carried their instant)."""
    at = sample.get(SAMPLED_AT) if isinstance(sample, Mapping) else None
    return parse_datetime(at) if isinstance(at, str) else None


def sample_stale_after_s() -> float:
    """How old a stored sample may be and still measure its GPU: ``FAIRWAY_HOST_LOST_AFTER_S``, and
    never less than two stored samples apart (``gateway.sample_interval``), so that no sample goes
    stale between two stores of a host that reports."""
    from scheduler.gateway import sample_interval

    return max(float(settings.FAIRWAY["HOST_LOST_AFTER_S"]), 2 * sample_interval())


def current_sample(sample: Any, now: datetime) -> Mapping[str, Any]:
    """The rule: a stored sample (``GPU.last_sample``) as a measurement at ``now``: itself, or
    ``{}`` (not measured, as a GPU never sampled) when there is none or it was received more than
    :func:`sample_stale_after_s` before ``now``. One stored before samples carried their instant
    has no age to judge: itself. Every reader of a GPU's numbers reads them through this."""
    if not isinstance(sample, Mapping) or not sample:
        return {}
    at = sampled_at(sample)
    if at is not None and (now - at).total_seconds() > sample_stale_after_s():
        return {}
    return sample
