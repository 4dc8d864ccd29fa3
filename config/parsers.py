"""Request parsers of ``/api/v1/``: DRF's JSON parser, made safe for any body.

DRF's ``JSONParser`` turns ``ValueError`` into a 400 ``parse_error`` but lets two inputs
through to a 500: a body nested deeper than Python's recursion limit (``RecursionError``)
and strings holding an unpaired surrogate (``"\\ud800"`` is valid JSON, but no database
can store it and UTF-8 cannot encode it). Both are answered 400 ``parse_error`` here, and so is a
key given twice in one object (JSON keeps the last one: ``{"gpu_count": 1, ..., "gpu_count": 8}``
ran with 8, silently, where a spec's YAML refuses it; brk30).
"""

from __future__ import annotations

import codecs
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding
from rest_framework.utils import json


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def find_unencodable(data: Any) -> bool:
    """True if any string (key or value) of a parsed JSON document holds an unpaired surrogate.

    Iterative, so a document as deep as the parser allowed cannot overflow the stack here.
    """
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _has_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class FairwayJSONParser(JSONParser):
    """``JSONParser`` answering over-deep nesting and unpaired surrogates with ``parse_error``."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict | None = None) -> Any:
        try:
            data = self._parse(stream, parser_context or {})
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply.") from None
        if find_unencodable(data):
            raise ParseError("JSON parse error - a string holds an unpaired surrogate (\\ud800-\\udfff).")
        return data

    def _parse(self, stream: Any, parser_context: dict) -> Any:
        """``JSONParser.parse`` (DRF 3) with a key given twice refused."""
        try:
            decoded = codecs.getreader(get_encoding(parser_context))(stream)
            parse_constant = json.strict_constant if self.strict else None
            return json.load(decoded, parse_constant=parse_constant, object_pairs_hook=_once_each)
        except ValueError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


def _once_each(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"{key[:40]!r} is given twice in one object")
        out[key] = value
    return out
