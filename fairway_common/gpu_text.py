"""The one rule of a GPU's UUID and model name, and of text shown as a name (printable characters
only): the server's (:mod:`scheduler.gpu_text` holds its other name rules) and the agent's, which
checks its simulated GPUs' ``model`` when its config is loaded (brk46b)."""

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
