"""Request parsers of ``/api/v1/``: DRF's JSON parser, made safe for any body.

DRF's ``JSONParser`` turns ``ValueError`` into a 400 ``parse_error`` but lets two inputs
through to a 500: a body nested deeper than Python's recursion limit (``RecursionError``)
and strings holding an unpaired surrogate (``"\\ud800"`` is valid JSON, but no database
can store it and UTF-8 cannot encode it). Both are answered 400 ``parse_error`` here.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


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
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the document is nested too deeply.") from None
        if find_unencodable(data):
            raise ParseError("JSON parse error - a string holds an unpaired surrogate (\\ud800-\\udfff).")
        return data
