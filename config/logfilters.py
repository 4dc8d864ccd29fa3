"""Logging filters named in ``settings.LOGGING``."""

from __future__ import annotations

import logging


def client_errors_one_line(record: logging.LogRecord) -> bool:
    """Drop the traceback of a client error (4xx) that ``django.request`` logs: a
    ``PermissionDenied`` raised in the admin was a full traceback at WARNING on every refused
    click (brk30), where the one line ``Forbidden (Permission denied): PATH`` says all. Server
    errors (5xx) keep theirs. Always keeps the record (returns True)."""
    status = getattr(record, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500:
        record.exc_info = None
        record.exc_text = None
    return True
