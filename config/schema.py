"""OpenAPI post-processing: every operation documents the one error format (``config.api``).

``Error`` is ``{"detail": "message", "code": "..."}``; a 400 adds ``{"<field>": ["message"]}``.
Anonymous operations (login) get no 401/403; every operation may answer 429 (throttling).
"""

from __future__ import annotations

from typing import Any

ERROR_SCHEMA = {
    "type": "object",
    "description": 'One error format: {"detail": "...", "code": "..."}; a 400 lists problems by field '
    'as {"<field>": ["message"], "code": "..."} ("non_field_errors" when not one field).',
    "properties": {"code": {"type": "string"}, "detail": {"type": "string"}},
    "required": ["code"],
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
}

_DESCRIPTIONS = {
    "400": "invalid input (problems by field)",
    "401": "not authenticated",
    "403": "not allowed",
    "404": "not found",
    "405": "method not allowed",
    "409": "conflict with the current state",
    "429": "throttled",
}


def add_error_responses(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular POSTPROCESSING_HOOK: add the error responses to every operation."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path, operations in result.get("paths", {}).items():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            codes = ["400", "404", "405", "409", "429"]
            if operation.get("security") != [{}] and "login" not in path:
                codes += ["401", "403"]
            for code in codes:
                operation["responses"].setdefault(code, {**ref, "description": _DESCRIPTIONS[code]})
    return result
