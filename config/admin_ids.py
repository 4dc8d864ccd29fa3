"""Ids the admin reads from a POST, refused in words before a query meets them (brk63).

Django's admin passes a changelist action's ``_selected_action`` values to ``pk__in`` and an
autocomplete field's posted value to its widget's ``pk__in`` as they come: ``abc`` was a
ValueError and ``9223372036854775808`` an OverflowError, a 500 either way (nothing changed). A
changelist's filter by a related id past 64 bits (``?cluster__exact=99999999999999999999999``) was
one too, when the list counted its rows (brk46): it is Django's incorrect lookup, as ``abc`` there
is. Every ``ModelAdmin`` of Fairway takes :class:`AdminIdsMixin` first.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin import helpers
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import models
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest

BAD_SELECTION = "The selection names something that is no id of this list: nothing was done."


def is_id_of(model: type[models.Model], raw: Any) -> bool:
    """Whether ``raw`` reads as a primary key of ``model`` that a database query can take (an
    integer key within a signed 64-bit integer)."""
    try:
        value = model._meta.pk.to_python(raw)  # type: ignore[union-attr]
    except (ValidationError, TypeError, ValueError):
        return False
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def _integer_field(model: type[models.Model], lookup: str) -> bool:
    """Whether query parameter ``lookup`` (``cluster__exact``, ``host__cluster``, ``groups``) filters
    ``model`` by an integer column: its longest prefix that is a field path ends at one (a relation:
    at its target's key)."""
    parts = lookup.split(LOOKUP_SEP)
    for n in range(len(parts), 0, -1):
        try:
            field = get_fields_from_path(model, LOOKUP_SEP.join(parts[:n]))[-1]
        except (FieldDoesNotExist, NotRelationField):  # not a field path: a lookup's name follows
            continue
        target = getattr(field, "target_field", field)
        return isinstance(target, models.IntegerField)
    return False


def past_64_bits(model: type[models.Model], params: Any) -> bool:
    """Whether a changelist's query ``params`` filter an integer column of ``model`` by a number no
    query can take (outside a signed 64-bit integer; an ``__in`` list's entries each)."""
    for key, values in params.lists():
        if not _integer_field(model, key):
            continue
        for value in (v.strip() for raw in values for v in raw.split(",")):
            digits = value.removeprefix("-")
            if digits.isascii() and digits.isdigit() and not -(2**63) <= int(value) < 2**63:
                return True
    return False


class _IdChoiceField(forms.ModelChoiceField):
    """An autocomplete field whose posted value is shown back only when it is an id: its widget
    queries the value it renders (the value is refused as "Select a valid choice" all the same)."""

    def bound_data(self, data: Any, initial: Any) -> Any:
        value = super().bound_data(data, initial)
        if value in self.empty_values or is_id_of(self.queryset.model, value):
            return value
        return None


def ascii_digits_only(field: forms.Field) -> None:
    """``field`` reads a number as the API, the CLI and the settings do (``ascii_float``'s rule):
    ``٣`` (an Arabic-Indic 3), ``１６`` and ``1_6`` are refused where Django's ``int()``/``Decimal()``
    took them as 3 and 16 (brk51b: the admin's number fields; brk46: the submit page's)."""
    from fairway_common.numbers import ascii_float

    to_python = field.to_python

    def checked(value: Any) -> Any:
        if isinstance(value, str) and (not value.isascii() or "_" in value):
            try:
                ascii_float(value)
            except ValueError as exc:
                raise ValidationError(str(exc), code="invalid") from None
        return to_python(value)

    field.to_python = checked  # type: ignore[method-assign]


class AdminIdsMixin:
    """A changelist action over a selection holding a value that is no id is refused with
    :data:`BAD_SELECTION` (back to the list); an autocomplete field (of an inline too) shows back no such value."""

    def response_action(self, request: HttpRequest, queryset: Any) -> Any:
        selected = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
        if not all(is_id_of(queryset.model, raw) for raw in selected):
            self.message_user(request, BAD_SELECTION, messages.ERROR)  # type: ignore[attr-defined]
            return None  # the changelist answers a redirect to itself
        return super().response_action(request, queryset)  # type: ignore[misc]

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        formfield = super().formfield_for_dbfield(db_field, request, **kwargs)  # type: ignore[misc]
        if isinstance(formfield, forms.IntegerField):  # FloatField and DecimalField too (its subclasses)
            ascii_digits_only(formfield)
        return formfield

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        if past_64_bits(self.model, request.GET):  # type: ignore[attr-defined]
            raise IncorrectLookupParameters("a filter by a number past 64 bits")  # changelist_view: ?e=1
        return super().get_changelist_instance(request)  # type: ignore[misc]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name in self.get_autocomplete_fields(request):  # type: ignore[attr-defined]
            kwargs.setdefault("form_class", _IdChoiceField)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
