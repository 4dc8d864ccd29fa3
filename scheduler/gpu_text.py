"""The one rule for text shown as a name: printable characters only (no Django: the scenario
files' parser uses it). A GPU's UUID and model, a host's labels, a workload's name and an API
token's name follow :func:`invisible_problem`; GPU text has its length and blanks rule besides."""

from __future__ import annotations

from collections.abc import Mapping

MAX_GPU_TEXT = 64
"""Longest GPU UUID or model name (the columns' ``max_length``)."""


def gpu_text_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a GPU's UUID or model name, or None: 1-64 printable
    characters (``str.isprintable``: no control, format or other invisible character, so no NUL,
    no lone surrogate, no zero-width space), no blank at either end. The one rule of a join, a
    registration (``services._check_gpus``), an agent's hello (``lifecycle.hello_gpu_problem``), a
    submission's ``gpu_model`` and a scenario file's models: a model that prints like another was
    another model (ops35)."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_GPU_TEXT:
        return f"must be 1-{MAX_GPU_TEXT} characters"
    if problem := invisible_problem(value):
        return problem
    if value != value.strip():
        return "begins or ends with a blank"
    return None


def invisible_problem(value: str) -> str | None:
    """``holds an invisible or control character (U+XXXX); it must be printable text`` naming the
    first character of ``value`` that ``str.isprintable`` refuses (a control character such as an
    escape or NUL; a format character such as the bidirectional overrides U+202A-U+202E and
    isolates U+2066-U+2069 or a zero-width space; a separator other than the plain space), or None.
    Such a name shows as another on a page (``job\u202egnp.exe`` reads ``jobexe.png``)."""
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is None:
        return None
    return f"holds an invisible or control character (U+{ord(bad):04X}); it must be printable text"


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
