"""The PostgreSQL race tests' one set of helpers (left55: each lived in a test module that the
others imported, their autouse fixture with it under ``noqa: F401``, and the fixture that keeps a
test's commits from asking for ticks and host pushes was defined four times). Registered as a
plugin by tests/conftest.py, so a module asks for ``no_tick_pushes`` by name
(``pytest.mark.usefixtures``). Every helper runs its job in a thread of its own, so on a
connection of its own, and closes it after."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

from scheduler import notify
from scheduler.models import Workload

BOUND_S = 20.0
"""A bound on waits that end at once when the code is right (never reached then)."""


@pytest.fixture
def no_tick_pushes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits ask for no tick and push nothing to hosts (``scheduler.notify``)."""
    monkeypatch.setattr(notify, "request_tick_on_commit", lambda cluster_id: None)
    monkeypatch.setattr(notify, "push_hosts_on_commit", lambda host_ids: None)


class Held:
    """``job`` run in a thread of its own (own connection) inside a transaction that stays open
    until :meth:`release`; ``done`` is set once ``job`` returned (its locks still held)."""

    def __init__(self, job: Callable[[], Any]) -> None:
        self.job = job
        self.done = threading.Event()
        self.released = threading.Event()
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.backend_pid: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.backend_pid = int(cursor.fetchone()[0])
            with transaction.atomic():
                self.job()
                self.done.set()
                self.released.wait(BOUND_S)
        except BaseException as exc:  # noqa: BLE001 -- reported by the test
            self.error = exc
        finally:
            connections.close_all()
            self.ended.set()

    def release(self) -> None:
        self.released.set()
        self.thread.join(BOUND_S)


def waits_on_a_lock(pid: int | None) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def until(predicate: Callable[[], bool]) -> bool:
    done = threading.Event()
    for _ in range(int(BOUND_S / 0.05)):
        if predicate():
            return True
        done.wait(0.05)
    return False


class Waiting:
    """``job`` in a thread of its own (own connection); ``pid`` its backend, ``error`` what it raised."""

    def __init__(self, job: Any) -> None:
        self.job, self.pid, self.error, self.result = job, None, None, None
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self.pid = int(cursor.fetchone()[0])
            self.result = self.job()
        except BaseException as exc:  # noqa: BLE001 -- reported by the test
            self.error = exc
        finally:
            connections.close_all()
            self.ended.set()


def wait_until_blocked(seconds: float = 5.0) -> bool:
    """Whether another session of the test database waits on a lock, within ``seconds``."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cur.fetchone()[0]:
                return True
        time.sleep(0.02)
    return False


def in_thread(job: Callable[[], Any], errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 -- a deadlock here is the finding
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def ordered_locker(lo: int, hi: int) -> None:
    """A transaction that takes both rows in the documented order (one statement, id order)."""
    with transaction.atomic():
        list(Workload.objects.select_for_update().filter(pk__in=[lo, hi]).order_by("pk").values_list("pk"))


def with_an_ordered_locker_after(
    monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, lo: int, hi: int, action: Callable[[], Any]
) -> tuple[Any, list[BaseException]]:
    """Run ``action`` (a tick) with ``owner.name`` wrapped: right after it returns, a transaction in
    another thread asks for workload rows ``lo`` and ``hi`` in id order (:func:`ordered_locker`)
    and is blocked by the action's locks, which then goes on. ``action``'s result (None where it
    raised) and the errors of both sides (a deadlock victim among them)."""
    errors: list[BaseException] = []
    threads: list[threading.Thread] = []
    original = getattr(owner, name)

    def then_wait(*args: Any, **kwargs: Any) -> Any:
        done = original(*args, **kwargs)
        threads.append(in_thread(lambda: ordered_locker(lo, hi), errors))
        assert wait_until_blocked(), "the ordered locker never waited"
        return done

    monkeypatch.setattr(owner, name, then_wait)
    result = None
    try:
        result = action()
    except BaseException as exc:  # noqa: BLE001 -- a deadlock here is the finding
        errors.append(exc)
    for t in threads:
        t.join(30)
    return result, errors
