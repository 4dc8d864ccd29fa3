"""The clock, the workers and the web processes refuse to start in production without their shared services.

Without ``REDIS_URL`` the broker is dramatiq's stub broker, in each process's own memory: a clock
or worker started so runs, logs nothing wrong, and no tick ever happens (its requests go to a
queue no other process reads). On SQLite each process would hold its own file locks against the
web processes'. The embedded mode (no ``FAIRWAY_ENV=production``: ``manage.py serve``, the demo,
the tests) runs its worker and clock inside the web process and is not affected. A production web
process (``uvicorn config.asgi:application``, ``manage.py serve``) without Redis sent its tick
requests and notifications to its own memory, where nothing read them (mend31): ``config/asgi.py``
and ``serve`` ask the same :func:`refusal`.
"""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import CommandError


def missing_shared_services() -> list[str]:
    """What production lacks for a separate clock or worker process (empty outside production)."""
    if not settings.PRODUCTION:
        return []
    missing = []
    if not settings.REDIS_URL:
        missing.append(
            "REDIS_URL is not set (redis://host:6379/0): without it the broker lives in this "
            "process's memory alone and no tick would ever reach a worker"
        )
    if settings.DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
        missing.append(
            "DATABASE_URL is SQLite (or not set): production's processes share one PostgreSQL "
            "database (postgres://user:password@host:5432/fairway)"
        )
    return missing


def refusal(process: str) -> str | None:
    """Why ``process`` refuses to start (production lacks its shared services), or None."""
    missing = missing_shared_services()
    if not missing:
        return None
    return f"FAIRWAY_ENV=production: {process} refuses to start: {'; '.join(missing)} (docs/deploy.md)"


def refuse_without_shared_services(process: str) -> None:
    """Raise ``CommandError`` (exit status 1, the message on stderr) when production lacks them."""
    why = refusal(process)
    if why:
        raise CommandError(why)


def embedded_warning(process: str) -> str | None:
    """What a separate ``process`` (the clock, a worker) says at start outside production without
    ``REDIS_URL``: it runs, on a broker in its own memory, and reaches no other process (try50: an
    operator trying the README's process list on one box saw three processes run and no tick).
    None with Redis, or in production (refused there: :func:`refusal`)."""
    if settings.PRODUCTION or settings.REDIS_URL:
        return None
    return (
        f"REDIS_URL is not set: this {process} runs on a broker in its own memory and reaches no other "
        "process (no tick reaches a worker). Without Redis, `manage.py serve` runs the worker and the "
        "clock itself; set REDIS_URL to run them apart (docs/deploy.md §4)."
    )
