"""Serializer helpers shared by the apps' APIs."""

from __future__ import annotations

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

    def to_internal_value(self, data: Any) -> Any:
        unknown = self.unknown_fields(data)
        if unknown:
            known = ", ".join(self.fields)
            raise serializers.ValidationError(
                {name[:40]: [f"Unknown field (the fields are: {known})."] for name in unknown[:10]},
                code="unknown_field",
            )
        return super().to_internal_value(data)  # type: ignore[misc]
