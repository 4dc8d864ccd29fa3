"""Display helpers for Fairway's pages: durations, GPU-hours (the one wording of
``fairway_cli.numbers``), percentages. Ratios come as ``ratio_text`` from the server."""

from __future__ import annotations

import shlex
from datetime import datetime
from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone

from fairway_cli.numbers import duration_text, gpu_hours_text, gpu_time_text, instant_text, percent_text
from fairway_cli.words import (
    NOT_SCHEDULABLE_WORDS,
    RETRIES_WORDS,
    drain_only,
    draining_host_words,
    occupancy_now_text,
    occupancy_parts_text,
    reason_words,
    silent_host_words,
    unfunded_text,
    why_waits_text,
)
from scheduler.sizes import format_size

register = template.Library()


@register.filter
def size(n: Any) -> str:
    """Bytes as ``64G``, ``512M`` (binary units, scheduler.sizes); ``—`` for None."""
    return format_size(n if isinstance(n, int) else None)


@register.filter
def duration(seconds: Any) -> str:
    """Seconds as ``2h 30m`` / ``45s`` / ``1d 2h``: the CLI's and the server's notes' one rule
    (``fairway_cli.numbers.duration_text``), its units apart; ``0`` → ``0 (unallocated)`` is the
    caller's business."""
    return duration_text(seconds, sep=" ")


@register.simple_tag
def retries_words() -> str:
    """:data:`fairway_cli.words.RETRIES_WORDS`: what ``retries`` re-runs, and what it never does."""
    return RETRIES_WORDS


@register.simple_tag
def not_schedulable_words() -> str:
    """:data:`fairway_cli.words.NOT_SCHEDULABLE_WORDS`: the occupancy bar's grey part and the GPU
    grid's grey tiles, in one wording (left51)."""
    return NOT_SCHEDULABLE_WORDS


@register.simple_tag
def page_refresh_s() -> str:
    """``FAIRWAY["PAGE_REFRESH_S"]`` as a workload's page polls it (htmx's ``every 3s``) and says it
    beside the live log (``refreshed every 3 s``): one number for both."""
    return f"{settings.FAIRWAY['PAGE_REFRESH_S']:g}"


@register.filter
def unfunded_mark(text: Any, unfunded: Any) -> str:
    """:func:`fairway_cli.words.unfunded_text`: ``1 h (unfunded)`` while the work runs unfunded at
    its budget's cap, as ``fairway ls`` writes its minimum runtime."""
    return unfunded_text(str(text), unfunded)


@register.filter
def shell_join(argv: Any) -> str:
    """An argv list as one shell-quoted line (``shlex.join``), so spaces and quotes read right."""
    if not isinstance(argv, list | tuple):
        return "" if argv is None else str(argv)
    return shlex.join(str(a) for a in argv)


@register.filter
def gpu_time(gpu_seconds: Any) -> str:
    """:func:`fairway_cli.numbers.gpu_time_text` for templates."""
    return gpu_time_text(gpu_seconds)


@register.filter
def since(value: datetime | None, until: datetime | None = None) -> str:
    """Time from ``value`` to ``until`` (default now) as a duration; ``0s`` under a second (try56:
    the clusters page's last heartbeat read "0 ago")."""
    if value is None:
        return ""
    seconds = max(0, int(((until or timezone.now()) - value).total_seconds()))
    return duration(seconds) if seconds else "0s"


@register.filter
def hours(value: Any) -> str:
    """GPU-hours as every surface prints them (:func:`fairway_cli.numbers.gpu_hours_text`)."""
    return gpu_hours_text(value)


@register.filter
def pct(value: Any, digits: int = 0) -> str:
    """A fraction as a percentage: ``0.333`` → ``33%`` (``fairway_cli.numbers.percent_text``)."""
    return percent_text(value, digits)


@register.filter
def occupancy_parts(total: Any) -> str:
    """:func:`fairway_cli.words.occupancy_parts_text`: the pyramid's occupancy split, its parts
    adding up to the whole's percentage, as ``fairway metrics`` writes it."""
    return occupancy_parts_text(total if isinstance(total, dict) else {})


@register.filter
def occupancy_now(o: Any) -> str:
    """:func:`fairway_cli.words.occupancy_now_text` of a cluster's ``reports.Occupancy``: the metrics
    page's occupancy right now, as ``fairway metrics`` says it."""
    return occupancy_now_text(o.as_dict())


@register.filter
def width(value: Any, cap: float = 1.0) -> str:
    """A fraction as a CSS width, clamped to 0..cap (as a percentage of the bar)."""
    try:
        number = max(0.0, min(float(value), float(cap)))
    except (TypeError, ValueError):
        number = 0.0
    return f"{number / float(cap) * 100:.2f}%"


@register.filter
def ratio_of(part: Any, whole: Any) -> float:
    try:
        return float(part) / float(whole) if float(whole) else 0.0
    except (TypeError, ValueError):
        return 0.0


@register.filter
def utc(value: datetime | None) -> str:
    """:func:`fairway_cli.numbers.instant_text`: ``14:05:09 UTC`` today, ``Mar 3 14:05:09 UTC``
    another day — the instant as the server's sentences and the CLI write it."""
    return instant_text(value)


@register.filter
def silent_words(silent: Any) -> str:
    """An open attempt's offline host (``scheduler.lifecycle.SilentHost``) in the line
    ``fairway show`` writes for it (:func:`fairway_cli.words.silent_host_words`)."""
    return silent_host_words(silent._asdict())


@register.filter
def draining_words(draining: Any) -> str:
    """An open attempt's draining host (``scheduler.lifecycle.DrainingHost``) in the line
    ``fairway show`` writes for it (:func:`fairway_cli.words.draining_host_words`)."""
    return draining_host_words(draining._asdict())


@register.filter
def requests_words(workload: Any) -> str:
    """``scheduler.reports.requests_text``: its CPU and memory requests per host, as the API and
    ``fairway show`` say them."""
    from scheduler.reports import requests_text

    return requests_text(workload)


@register.filter
def no_attempt(workload: Any) -> str:
    """``scheduler.reports.no_attempt_words``: "no attempt yet", or that it ended without one."""
    from scheduler.reports import no_attempt_words

    return no_attempt_words(workload.state)


@register.filter
def pending_words(workload: Any) -> str:
    """A pending workload's reason in a few words (:func:`fairway_cli.words.reason_words`, as
    ``fairway ls`` writes it), with what its ``resources`` say is short."""
    detail = workload.pending_detail or {}
    return reason_words(
        workload.pending_reason,
        detail.get("resources"),
        detail.get("limit"),
        workload.hold,
        drain_only(workload.pending_reason, detail),
    )


@register.filter
def why_waits(workload: Any) -> str:
    """:func:`pending_words` and the estimated start, as ``fairway ls`` writes them
    (:func:`fairway_cli.words.why_waits_text`)."""
    return why_waits_text(pending_words(workload), workload.estimated_start, workload.estimate_unfunded)


@register.filter
def get(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def indent(depth: Any) -> str:
    try:
        return f"{int(depth) * 18}px"
    except (TypeError, ValueError):
        return "0"
