"""The one rule for text shown as a name: printable characters only (no Django: the scenario
files' parser uses it). A GPU's UUID and model, a host's labels, a workload's name and an API
token's name follow :func:`invisible_problem`; GPU text has its length and blanks rule besides
(:func:`gpu_text_problem`). Those two live in :mod:`fairway_common.gpu_text`, which the agent
applies too, and are imported here."""

from __future__ import annotations

from collections.abc import Mapping

from fairway_common.gpu_text import MAX_GPU_TEXT as MAX_GPU_TEXT
from fairway_common.gpu_text import gpu_text_problem as gpu_text_problem
from fairway_common.gpu_text import invisible_problem as invisible_problem

MAX_LABEL_KEY, MAX_LABEL_VALUE = 64, 256
"""Longest host label key and value (characters)."""


def storable_text(value: object, *, nul: bool = False) -> bool:
    """A str that PostgreSQL can store and UTF-8 can encode: no lone surrogate, no NUL (unless ``nul``)."""
    if not isinstance(value, str) or (not nul and "\x00" in value):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def labels_problem(labels: object) -> str | None:
    """What is wrong with ``labels`` as a host's labels, as a sentence, or None: a mapping of short
    printable strings (keys 1-64 characters, not blanks only; values at most 256) to strings. The
    one rule of a join, a registration, the admin's edit (``services.check_labels``) and a
    scenario file's hosts (``scenarios.spec``). A control or invisible character (an escape
    sequence, a zero-width space) made a label that prints like another, or rewrites the terminal
    showing it (as :func:`gpu_text_problem`)."""
    if not isinstance(labels, Mapping) or not all(
        storable_text(k) and storable_text(v) and len(k) <= MAX_LABEL_KEY and len(v) <= MAX_LABEL_VALUE
        for k, v in labels.items()
    ):
        return "Labels map short strings to strings (no NUL), e.g. {'rack': 'r1'}."
    if any(not k.strip() for k in labels):  # {"": "r1"} was stored, a label no one can name (ops35)
        return "A label key is not empty (nor blanks only), e.g. {'rack': 'r1'}."
    problem = next((p for kv in labels.items() for text in kv if (p := invisible_problem(text))), None)
    if problem is not None:
        return f"A label key or value {problem}."
    return None
