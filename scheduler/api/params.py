"""Query parameters more than one endpoint reads, read by one parser each."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils.dateparse import parse_date, parse_datetime
from rest_framework import serializers

from fairway_common.limits import BACK_RANGE_TEXT, MAX_BACK_DAYS
from scheduler.models import Cluster, Host
from scheduler.trace import parse_duration

MAX_BACK = timedelta(days=MAX_BACK_DAYS)
"""The furthest back an instant may be given as a duration (``400d``): ``fairway_common.limits``, the
CLI's bound too."""

INSTANT_HELP = "a duration back from now (e.g. 7d, 36h, 2w) or an ISO 8601 date or date-time (e.g. 2026-11-01T00:00Z)"


def instant_problem(raw: str) -> str:
    """What is wrong with ``raw`` as an instant parameter, quoting it (the help alone left the
    reader to guess which value was read, try40): every reader of :func:`parse_instant` says it so."""
    return f"{raw[:40]!r} is not {INSTANT_HELP}"


def _iso(raw: str) -> datetime | None:
    """``raw`` as an ISO 8601 date-time (UTC unless it says) or date (its UTC midnight), or None."""
    try:
        at = parse_datetime(raw)
        if at is None:
            day = parse_date(raw)
            at = datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None
    except ValueError:
        return None
    if at is None:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def parse_instant(name: str, raw: str | None, now: datetime, default: datetime) -> datetime:
    """The instant query parameter ``name`` means: ``default`` when absent; a duration back from
    ``now`` (``2w``, ``7d``, ``36h``, ``90m``: :func:`~scheduler.trace.parse_duration`, 1s to 400d); or an
    ISO 8601 date or date-time. Anything else is a 400 ``invalid`` saying both forms.
    ``metrics/pyramid/`` (``since``, ``until``) and ``workloads/history/`` (``since``) read it."""
    if not raw:
        return default
    raw = raw.replace("\x00", "").strip()
    at = _iso(raw)
    if at is not None:
        try:  # 9999-12-31T23:59:59-12:00 is a datetime whose UTC instant is not (year 10000): a 500 (brk32)
            return at.astimezone(UTC)
        except OverflowError:
            raise serializers.ValidationError({name: ["a date from year 1 to 9999 in UTC"]}, code="invalid") from None
    try:
        seconds = parse_duration(raw)
    except ValueError:
        raise serializers.ValidationError({name: [instant_problem(raw)]}, code="invalid") from None
    if not 0 < seconds <= MAX_BACK.total_seconds():
        raise serializers.ValidationError({name: [BACK_RANGE_TEXT]}, code="invalid")
    return now - timedelta(seconds=seconds)


def demand_window(text: str) -> timedelta:
    """The window of recorded demand a what-if replays (``7d``, ``36h``): longer than zero and at most
    :data:`MAX_BACK`. Raises ValueError naming the text. The admin's what-if and ``manage.py
    simulate --from-db --since`` read it (``99999999d`` overflowed the command's dates: brk31)."""
    seconds = parse_duration(text.strip())
    if seconds <= 0:
        raise ValueError(f"window {text!r}: must be longer than zero")
    if seconds > MAX_BACK.total_seconds():  # 99999999999d overflowed timedelta: a 500
        raise ValueError(f"window {text[:40]!r}: at most {MAX_BACK.days}d of recorded demand")
    return timedelta(seconds=seconds)


_INTEGER = re.compile(r"-?[0-9]{1,18}")
"""An integer query parameter: ASCII digits, an optional minus (``int()`` also reads ``1_0``,
blanks and any script's digits, brk35), few enough for a database integer."""


def int_param(name: str, raw: str | None, message: str) -> int | None:
    """Query parameter ``name`` as an int: None when absent or empty; a 400 ``invalid`` with
    ``message`` under ``name`` when it is not :data:`_INTEGER`."""
    if raw is None or raw == "":
        return None
    if not _INTEGER.fullmatch(raw):
        raise serializers.ValidationError({name: [message]}, code="invalid")
    return int(raw)


REPEATED = "give it once (only a list's state takes several values)"
"""The refusal of a query parameter given twice, under its name (the API's 400, the web page's line)."""


def given_twice(params: Any, names: Iterable[str]) -> list[str]:
    """The parameters among ``names`` that ``params`` (a QueryDict) gives two non-empty values or
    more: an endpoint reads one, and QueryDict's is the last (``?budget=nlp&budget=vision`` read as
    vision alone, silently; brk40)."""
    return sorted(n for n in names if len([v for v in params.getlist(n) if v]) > 1)


def no_such_parameter_text(names: Iterable[str]) -> str:
    """The refusal of a query parameter an endpoint or a page does not read, said under its name,
    with the ones it reads (``names``, sorted): the one wording of the API (:func:`refuse_unknown`)
    and the web pages (the workload list said "no such filter (the filters are …)": words47)."""
    listed = sorted(set(names))
    if not listed:
        return "no such parameter (there are none)"
    return f"no such parameter (the parameters are: {', '.join(listed)})"


def refuse_unknown(params: Any, known: Iterable[str], several: Iterable[str] = (), *, api: bool = True) -> None:
    """A query parameter the endpoint does not read is a 400 ``unknown_parameter`` naming the ones it
    reads, never dropped: ``?user=rita`` (the filter is ``owner``) or ``?mine=1`` listed everyone's
    workloads as if they were rita's (brk31; the web page since brk30). DRF's ``format`` is read by
    every endpoint (``api``; a web page reads none: words47). One it reads given twice, but for
    those in ``several``, is a 400 ``invalid`` (:func:`given_twice`)."""
    names = sorted({*known, *(("format",) if api else ())})
    unknown = sorted(k for k in params if k not in names)
    if unknown:
        message = no_such_parameter_text(names)
        raise serializers.ValidationError({k: [message] for k in unknown}, code="unknown_parameter")
    if twice := given_twice(params, [n for n in names if n not in set(several)]):
        raise serializers.ValidationError({k: [REPEATED] for k in twice}, code="invalid")


# A filter naming nothing that exists is a 400 naming it (as submitting to it is), never an empty
# list that reads as "nothing there" (tryout24).


def cluster_param(value: str | None) -> str | None:
    """The ``cluster`` query parameter: None when absent or empty; else the name, which must be a
    cluster's (a 400 ``invalid`` otherwise)."""
    name = (value or "").replace("\x00", "")
    if not name:
        return None
    if not Cluster.objects.filter(name=name).exists():
        raise serializers.ValidationError({"cluster": [f"No cluster {name[:100]!r}."]}, code="invalid")
    return name


def cluster_only_params(params: Any, *, api: bool = True) -> list[Cluster]:
    """The clusters a view whose one parameter is ``cluster`` shows: every one by name, or the one
    named (:func:`cluster_param`); any other parameter, or one given twice, a 400 (:func:`refuse_unknown`;
    ``api``: DRF's ``format`` read too). The one reading of ``budgets/tree/``, ``metrics/`` and the
    budgets and clusters pages (pages46: the pages showed every cluster whatever was asked, 200)."""
    refuse_unknown(params, ["cluster"], api=api)
    clusters = Cluster.objects.order_by("name")
    if cluster := cluster_param(params.get("cluster")):
        clusters = clusters.filter(name=cluster)
    return list(clusters)


def host_state_param(value: str | None) -> str | None:
    """The hosts list's ``state``: None when absent or empty; else one of the host states."""
    state = (value or "").replace("\x00", "")
    if not state:
        return None
    if state not in Host.State.values:
        raise serializers.ValidationError(
            {"state": [f"No host state {state[:40]!r} (the states are: {', '.join(Host.State.values)})."]},
            code="invalid",
        )
    return state
