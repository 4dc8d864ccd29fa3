"""Filters of the workload list: ``?state=pending,running&budget=nlp&owner=me&cluster=philly``."""

from __future__ import annotations

import django_filters
from django import forms
from django.db.models import QuerySet

from budgets.services import budget_hint, resolve_budget, subtree_ids
from scheduler.models import Cluster, Workload
from scheduler.services import MAX_DB_INT


class IdFilter(django_filters.NumberFilter):
    """A row id: a whole number a database integer holds (1 to 2^63 - 1), else a 400 with the
    field's message (a larger one overflowed SQLite's integer: a 500)."""

    field_class = forms.IntegerField

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, min_value=1, max_value=MAX_DB_INT, **kwargs)  # type: ignore[arg-type]


def _refused(text: str) -> forms.ValidationError:
    """A refusal whose text quotes the client's value: django-filter formats every message with
    ``%`` (``message % params``), so the text goes in as a parameter, never as the format (a value
    holding ``%``, ``?state=%25s``, was a 500)."""
    return forms.ValidationError("%(text)s", params={"text": text})


def _known_states(value: str) -> None:
    """A typo (``?state=runing``) listed nothing, as if no workload ran: it is a 400 that names
    the states."""
    unknown = [s.strip() for s in value.split(",") if s.strip() and s.strip() not in Workload.State.values]
    if unknown:
        raise _refused(
            f"No state {', '.join(repr(s) for s in unknown)} (the states are: {', '.join(Workload.State.values)})."
        )


def _known_budget(value: str) -> None:
    if resolve_budget(value) is None:
        raise _refused(f"No budget {value!r}.{budget_hint(value)}")


def _known_cluster(value: str) -> None:
    if not Cluster.objects.filter(name=value).exists():
        raise _refused(f"No cluster {value!r}.")


class WorkloadFilter(django_filters.FilterSet):
    """``state``: one or more states, comma-separated. ``budget``: a path or id; includes the
    budgets under it. ``owner``: a username or ``me``. ``cluster``: a cluster name. ``group``: an
    array group id. An unknown state, budget or cluster is a 400 naming it (the API; the web page
    ignores an invalid filter), as submitting to one is, not an empty list."""

    state = django_filters.CharFilter(method="filter_state", validators=[_known_states])
    budget = django_filters.CharFilter(method="filter_budget", validators=[_known_budget])
    owner = django_filters.CharFilter(method="filter_owner")
    cluster = django_filters.CharFilter(field_name="cluster__name", validators=[_known_cluster])
    group = IdFilter(field_name="group_id")

    class Meta:
        model = Workload
        fields = ["state", "budget", "owner", "cluster", "group"]

    def filter_state(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        states = [s.strip() for s in value.split(",") if s.strip()]
        return queryset.filter(state__in=states)

    def filter_budget(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        budget = resolve_budget(value)
        if budget is None:
            return queryset.none()
        return queryset.filter(budget_id__in=subtree_ids([budget.id]))

    def filter_owner(self, queryset: QuerySet[Workload], name: str, value: str) -> QuerySet[Workload]:
        if value == "me":
            return queryset.filter(owner=self.request.user)
        return queryset.filter(owner__username=value)
