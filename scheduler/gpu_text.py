"""The one rule for a GPU's UUID and model text (no Django: the scenario files' parser uses it)."""

from __future__ import annotations

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
    bad = next((c for c in value if not c.isprintable()), None)
    if bad is not None:
        return f"holds an invisible or control character (U+{ord(bad):04X}); it must be printable text"
    if value != value.strip():
        return "begins or ends with a blank"
    return None
