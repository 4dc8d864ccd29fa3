"""Filters of the workload list: ``?state=pending,running&budget=nlp&owner=me&cluster=philly``."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.db.models import QuerySet
from django.http import QueryDict
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import serializers

from budgets.services import resolve_budget, subtree_ids, unknown_budget_words
from scheduler.api.params import REPEATED, given_twice
from scheduler.models import Cluster, Workload
from scheduler.services import MAX_DB_INT


def _refused(text: str) -> forms.ValidationError:
    """A refusal whose text quotes the client's value: django-filter formats every message with
    ``%`` (``message % params``), so the text goes in as a parameter, never as the format (a value
    holding ``%``, ``?state=%25s``, was a 500)."""
    return forms.ValidationError("%(text)s", params={"text": text})


MAX_IDS = 500
"""The most ids one ``?id=`` names (``fairway wait`` asks in chunks of it: ``fairway_cli.cli.LIST_MAX_IDS``,
kept equal by a test): it bounds the query's ``IN`` list and the URL (500 ids of 7 digits: 4 KB)."""


def parse_id(text: str, noun: str = "workload") -> int:
    """One id as every id filter reads it (``id``'s items, ``group``, ``resubmitted_from``):
    ``12`` or ``#12`` (as the pages write them), ASCII digits, 1 to a database integer. Raises one
    refusal naming it otherwise (left53: ``?resubmitted_from=#12`` was "Enter a whole number.")."""
    part = text.strip().removeprefix("#")
    if not (part.isascii() and part.isdigit() and len(part) <= 19 and 1 <= int(part) <= MAX_DB_INT):
        raise _refused(f"{part[:40]!r} is not a {noun} id (a whole number from 1).")
    return int(part)


NO_IDS = "Give at least one id."


def workload_ids(value: str) -> list[int]:
    """``?id=12,#13, 14``: the ids, in order (:func:`parse_id` each). Raises a refusal naming the
    first that is no workload id, more than :data:`MAX_IDS`, or none at all (``?id=,`` listed
    nothing while ``?id=`` listed everything, left53: both are :data:`NO_IDS`)."""
    parts = [p for p in value.split(",") if p.strip()]
    if not parts:
        raise _refused(NO_IDS)
    if len(parts) > MAX_IDS:
        raise _refused(f"At most {MAX_IDS} ids at once, not {len(parts)}: ask in parts.")
    return [parse_id(p) for p in parts]


class IdsField(forms.CharField):
    """``id``'s form field: given empty (``?id=``) it is :data:`NO_IDS`, as ``?id=,`` is, not "no
    filter" (absent, it is no filter)."""

    def clean(self, value: Any) -> Any:
        if value is not None and not str(value).strip():
            raise forms.ValidationError(NO_IDS, code="invalid")
        return super().clean(value)


class IdsFilter(django_filters.CharFilter):
    field_class = IdsField


NO_STATES = "Give at least one state."


def workload_states(value: str) -> list[str]:
    """``?state=pending, running``: the states, read as :func:`workload_ids` reads ids (blank
    parts skipped). A typo (``?state=runing``) listed nothing, as if no workload ran: it is a 400
    that names the states; ``?state=,`` listed nothing where ``?id=,`` is a 400 (left56): it is
    :data:`NO_STATES`. ``?state=`` alone is no filter (the page's "any state")."""
    states = [s.strip() for s in value.split(",") if s.strip()]
    if not states:
        raise _refused(NO_STATES)
    unknown = [s for s in states if s not in Workload.State.values]
    if unknown:
        raise _refused(
            f"No state {', '.join(repr(s) for s in unknown)} (the states are: {', '.join(Workload.State.values)})."
        )
    return states


def _known_budget(value: str) -> None:
    if resolve_budget(value) is None:
        raise _refused(unknown_budget_words(value))


def known_owner(value: str) -> None:
    """``me`` or a user's name (the workload list's ``owner``, the group list's too)."""
    from accounts.models import User

    if value != "me" and not User.objects.filter(username=value).exists():
        raise _refused(f"No user {value!r}.")


def _known_group(value: str) -> None:
    """One message per value: not an id, or no group of that id (``?group=0`` said both)."""
    from scheduler.models import ArrayGroup

    pk = parse_id(value, "group")
    if not ArrayGroup.objects.filter(pk=pk).exists():
        raise _refused(f"No group {pk}.")


def _known_workload(value: str) -> None:
    pk = parse_id(value)
    if not Workload.objects.filter(pk=pk).exists():
        raise _refused(f"No workload {pk}.")


def _known_cluster(value: str) -> None:
    if not Cluster.objects.filter(name=value).exists():
        raise _refused(f"No cluster {value!r}.")


IDLE_VALUES = {"true": True, "false": False}


def _idle_value(value: str) -> None:
    if value.strip().lower() not in IDLE_VALUES:
        raise _refused(f"idle is true or false, not {value[:40]!r}.")


class WorkloadFilter(django_filters.FilterSet):
    """``state``: one or more states, comma-separated. ``budget``: a path or id; includes the
    budgets under it. ``owner``: a username or ``me``. ``cluster``: a cluster name. ``group``: an
    array group id. ``resubmitted_from``: a workload id, the workloads submitted again from it (left50).
    An unknown state, budget, owner, cluster, group or workload is a 400 naming it (the API; the web page
    ignores an invalid filter), as submitting to one is, not an empty list. ``id``: workload ids,
    comma-separated, at most :data:`MAX_IDS`; an id of no workload is not listed (``fairway wait``
    names those missing). ``idle``: ``true``, the workloads whose running attempt is idle
    (``scheduler.idle``: the one rule of the pages and the CLI), ``false`` the others."""

    state = django_filters.CharFilter(method="filter_state", validators=[workload_states])
    budget = django_filters.CharFilter(method="filter_budget", validators=[_known_budget])
    owner = django_filters.CharFilter(method="filter_owner", validators=[known_owner])
    cluster = django_filters.CharFilter(field_name="cluster__name", validators=[_known_cluster])
    group = django_filters.CharFilter(method="filter_group", validators=[_known_group])
    resubmitted_from = django_filters.CharFilter(method="filter_resubmitted_from", validators=[_known_workload])
    id = IdsFilter(method="filter_id", validators=[workload_ids])
    idle = django_filters.CharFilter(method="filter_idle", validators=[_idle_value])

    class Meta:
        model = Workload
        fields = ["state", "budget", "owner", "cluster", "group", "resubmitted_from", "id", "idle"]

    def filter_idle(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        from scheduler.idle import idle_workload_ids

        ids = idle_workload_ids()
        if IDLE_VALUES[value.strip().lower()]:
            return queryset.filter(pk__in=ids)
        return queryset.exclude(pk__in=ids)

    def filter_state(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        return queryset.filter(state__in=workload_states(value))

    def filter_group(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        return queryset.filter(group_id=parse_id(value, "group"))

    def filter_resubmitted_from(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        return queryset.filter(resubmitted_from_id=parse_id(value))

    def filter_id(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        return queryset.filter(pk__in=workload_ids(value))

    def filter_budget(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        budget = resolve_budget(value)
        if budget is None:
            return queryset.none()
        return queryset.filter(budget_id__in=subtree_ids([budget.id]))

    def filter_owner(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        if value == "me":
            return queryset.filter(owner=self.request.user)
        return queryset.filter(owner__username=value)


def one_value_each(params: QueryDict) -> tuple[QueryDict, list[str]]:
    """The workload list's query as :class:`WorkloadFilter` reads it, on the API and the page
    alike (brk40): ``state`` given several times is its values joined (``?state=pending&state=
    running`` is ``?state=pending,running``: the API listed the running ones alone, as QueryDict
    keeps the last value); the other filters given twice are returned by name
    (:func:`~scheduler.api.params.given_twice`), to be refused. Empty values count for nothing."""
    data = params.copy()
    states = [v for v in data.getlist("state") if v]
    if len(states) > 1:
        data.setlist("state", [",".join(states)])
    return data, given_twice(data, WorkloadFilter.base_filters)


class SkipUnaskedFilterBackend(DjangoFilterBackend):
    """django-filter's backend, without building and validating a filter form on a request that
    names none of the filter set's parameters (a workload's detail and cancel, the plain list):
    there every filter gets an empty value, which django-filter reads as "no filter", and its
    answer is the queryset unchanged (``queryset.all()``). The filter sets this skips for are
    those whose every filter reads one parameter of its own name (not a range's ``_min``/``_max``
    pair); ``tests/api/test_fast_representation.py`` compares it with django-filter's backend."""

    def filter_queryset(self, request: Any, queryset: QuerySet[Any], view: Any) -> QuerySet[Any]:
        names = _parameter_names(self.get_filterset_class(view, queryset))
        if names is not None and not any(name in request.query_params for name in names):
            return queryset.all()
        return super().filter_queryset(request, queryset, view)

    def get_filterset_kwargs(self, request: Any, queryset: QuerySet[Any], view: Any) -> dict[str, Any]:
        kwargs = super().get_filterset_kwargs(request, queryset, view)
        if issubclass(self.get_filterset_class(view, queryset) or object, WorkloadFilter):
            kwargs["data"], twice = one_value_each(kwargs["data"])
            if twice:  # the list refused them already (refuse_unknown); another view would read the last
                raise serializers.ValidationError({name: [REPEATED] for name in twice}, code="invalid")
        return kwargs


_NAMES: dict[type, frozenset[str] | None] = {}
_ONE_PARAMETER = (django_filters.CharFilter, django_filters.NumberFilter, IdsFilter)
"""Filters whose form field reads one parameter named as the filter (no range or multi-widget)."""


def _parameter_names(filterset_class: Any) -> frozenset[str] | None:
    """The query parameters ``filterset_class`` reads, when each filter reads one parameter of its
    own name (a single-value widget); None otherwise (and without a filter set)."""
    if filterset_class is None:
        return None
    if filterset_class not in _NAMES:
        filters = filterset_class.base_filters
        single = all(type(f) in _ONE_PARAMETER for f in filters.values())
        _NAMES[filterset_class] = frozenset(filters) if single else None
    return _NAMES[filterset_class]
