"""The admin's search boxes find a budget by its path, as every page and picker names it."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest


def budget_ids_by_path(search_term: str) -> list[int]:
    """The ids of the budgets whose path (``nlp/olmo``, from the process's budget tree) contains
    ``search_term``, case aside, with surrounding spaces and slashes ignored; [] for a blank term."""
    from budgets.tree_memo import paths_of, shared_tree

    term = search_term.strip().strip("/").casefold()
    if not term:
        return []
    return [pk for pk, path in paths_of(shared_tree()).items() if term in path.casefold()]


class BudgetPathSearchMixin:
    """A ``ModelAdmin`` whose search box also matches the path of the row's budget
    (``budget_path_lookup``: the field holding the budget's id). The admin names budgets by path,
    which ``search_fields``' ``budget__name`` alone never matched (left39, try40). For the budget
    admin itself this is also what its pickers (``autocomplete_fields`` elsewhere) search."""

    budget_path_lookup = "budget_id"

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        # a mixin: the ModelAdmin after it in the MRO defines get_search_results
        found, may_have_duplicates = super().get_search_results(request, queryset, search_term)  # type: ignore[misc]
        ids = budget_ids_by_path(search_term)
        if ids:
            found = found | queryset.filter(**{f"{self.budget_path_lookup}__in": ids})
        return found, may_have_duplicates
