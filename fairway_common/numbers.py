"""Numbers read from text by the server, the CLI and the agent alike."""

from __future__ import annotations


def ascii_float(text: str) -> float:
    """``float(text)`` for ASCII text only; ``ValueError`` otherwise. ``float()`` also reads any
    script's digits (``"١"``, ``"٠.٥"``, fullwidth ``"１"``) and ``"1_0"``, which a person meant as
    something else or not at all (brk35, brk47, left47): every reader of a decimal number from a
    setting, a command line or a rule goes through here. Blanks around it are allowed, as
    ``float()`` allows them."""
    if not text.isascii() or "_" in text:
        raise ValueError(f"{text!r} is not a number (ASCII digits 0-9)")
    return float(text)
