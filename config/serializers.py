"""Serializer helpers shared by the apps' APIs."""

from __future__ import annotations

import copy
from typing import Any

from rest_framework import serializers


class RefusesUnknownFieldsMixin:
    """A serializer whose input may hold only its own fields: any other key (a typo such as
    ``max_runtme``, or ``email`` for ``email_kinds``) is a 400 ``unknown_field`` naming it,
    rather than silently dropped."""

    fields: Any

    def unknown_fields(self, data: Any) -> list[str]:
        """The keys of ``data`` that are none of the fields, sorted (the API and the web's spec
        alike refuse them)."""
        if not hasattr(data, "keys"):
            return []
        return sorted(set(map(str, data.keys())) - set(self.fields))

    def known_fields_text(self) -> str:
        """The fields, as a refusal of an unknown one lists them (the API's and the web spec's)."""
        return ", ".join(self.fields)

    def to_internal_value(self, data: Any) -> Any:
        unknown = self.unknown_fields(data)
        if unknown:
            known = self.known_fields_text()
            raise serializers.ValidationError(
                {name[:40]: [f"Unknown field (the fields are: {known})."] for name in unknown[:10]},
                code="unknown_field",
            )
        return super().to_internal_value(data)  # type: ignore[misc]


class FieldsOnceMixin:
    """Build a serializer class's fields once, not once per instance.

    DRF's ``ModelSerializer.get_fields`` introspects the model and builds every field again for
    each serializer instance (each response: the detail's, its attempts', its events'), a large
    part of a small request's CPU. Here the fields are built on the class's first use and each
    instance gets copies of those unbound templates: a plain field is copied shallowly (it is
    then bound, and only read), a nested serializer deeply (it has fields and a context of its
    own). ``Meta`` and the declared fields of a class never change at run time.
    """

    def get_fields(self) -> dict[str, serializers.Field]:
        cls = type(self)
        template = cls.__dict__.get("_fields_template")
        if template is None:
            template = super().get_fields()  # type: ignore[misc]
            cls._fields_template = template  # type: ignore[attr-defined]  # a race builds it twice: harmless
        fields = {}
        for name, field in template.items():
            if isinstance(field, serializers.BaseSerializer):
                fields[name] = copy.deepcopy(field)
            else:
                clone = object.__new__(type(field))
                clone.__dict__.update(field.__dict__)
                fields[name] = clone
        return fields
