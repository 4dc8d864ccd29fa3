"""The shared fixtures' rows made once per test process and put back in every test that asks.

``org_tree``, the personas and ``host_tokens`` (tests/conftest.py) make their rows through the
services (``do_create_budget``, ``do_add_membership``, ``do_register_host``): ≈ 0.1 s of every API
test's setup on this 2-core box, three quarters of some files' time. :class:`World` runs each
*part* through its services once per test process, inside a transaction it rolls back, and keeps
the rows the part added; a test's fixture then inserts those rows again (one ``bulk_create`` per
table, their primary keys kept, every date and time moved by the time since they were made, as
if they were made now) instead of calling the services.

The services stay the only way the rows are made: the kept rows are what they wrote. A part is
put back only where that is the same as making it again, and otherwise made by its services as
before:

- only inside a test's transaction (the ``db`` fixture): a transactional test (``live_server``,
  ``transactional_db``) commits, and the services' ``on_commit`` work (a tick asked for) would then
  be missing;
- only when every part it builds on was put back in this test (the kept rows name their primary
  keys);
- only when its rows go in (a row of the test's own with the same name, say, refuses them: the
  savepoint is rolled back and the services run, and refuse as before);
- only a part that added rows and changed none made by another part (checked when it is kept).

The kept primary keys are those the parts took when made. PostgreSQL's sequences never go back, so
a test's own rows are numbered past them; SQLite's go back with the rollback, so a row a test made
before asking for a part can hold one of them: that part is then made by its services (above), and
rows made after it are numbered past it. Keys are not moved to a range of their own: a test's ids
stay as small as before (exl61's test read "77" in a workload id of 1,001,779). The memos
whose rows a part writes (the budget tree, the hardware, the API tokens) forget, as a save would
make them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.db import IntegrityError, connection, models, transaction
from django.test.utils import override_settings
from django.utils import timezone


@dataclass
class Part:
    """One fixture's rows, by model in the order they were found, and the value it returns (in
    terms of primary keys and plaintext: rebuilt from the rows put back)."""

    name: str
    needs: tuple[str, ...]
    rows: list[tuple[type[models.Model], list[models.Model]]]
    value: Any
    kept: bool = True  # False: it changed another part's rows, so it is always made by services


@dataclass
class World:
    """The parts (``makers``: name → (the parts it builds on, a function making it through the
    services, given the values of the parts made before it, and returning its value in primary
    keys and plaintext)), made by :meth:`make` once per test process."""

    makers: dict[str, tuple[tuple[str, ...], Callable[[dict[str, Any]], Any]]]
    parts: dict[str, Part] = field(default_factory=dict)
    made_at: datetime | None = None

    def put(self, name: str, done: set[str], made: Callable[[], Any], rebuild: Callable[[Any], Any]) -> Any:
        """Part ``name`` in this test: its kept rows inserted, and ``rebuild(value)`` returned; or
        ``made()`` (the services) where the rows cannot be put back. ``done``: the parts this
        test has put back so far (a set kept for the test); ``name`` is added when put back."""
        if not connection.in_atomic_block:  # a transactional test: its services' on_commit work
            return made()
        part = self.parts[name]
        if not part.kept or not set(part.needs) <= done:
            return made()
        shift = timezone.now() - self.made_at  # type: ignore[operator]
        try:
            with transaction.atomic():
                for model, rows in part.rows:
                    model._default_manager.bulk_create([_moved(row, shift) for row in rows])
        except IntegrityError:
            return made()
        _forget_memos()
        done.add(name)
        return rebuild(part.value)

    def make(self) -> None:
        """Every part through its services, in :attr:`makers`' order, in a transaction rolled
        back; the rows each added are kept."""
        with (
            transaction.atomic(),
            override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]),
        ):
            self.made_at = timezone.now()
            owner: dict[tuple[type[models.Model], Any], str] = {}
            values: dict[str, Any] = {}
            for name, (needs, make) in self.makers.items():
                before = every_row()
                value = values[name] = make(values)
                after = every_row()
                rows, changed = _added_and_changed(before, after)
                kept = all(owner.get(key) == name for key in changed)
                for model, added in rows:
                    owner.update({(model, row.pk): name for row in added})
                self.parts[name] = Part(name, needs, rows, value, kept)
            transaction.set_rollback(True)
        _forget_memos()


def _models() -> Iterable[type[models.Model]]:
    """Every table's model (auto-created many-to-many tables too), proxies and unmanaged left out."""
    for model in apps.get_models(include_auto_created=True):
        if model._meta.managed and not model._meta.proxy:
            yield model


def _values(row: models.Model) -> tuple[Any, ...]:
    return tuple(getattr(row, f.attname) for f in row._meta.concrete_fields)


def every_row() -> dict[type[models.Model], dict[Any, models.Model]]:
    return {model: {row.pk: row for row in model._base_manager.all()} for model in _models()}


def _added_and_changed(
    before: dict[type[models.Model], dict[Any, models.Model]], after: dict[type[models.Model], dict[Any, models.Model]]
) -> tuple[list[tuple[type[models.Model], list[models.Model]]], list[tuple[type[models.Model], Any]]]:
    """The rows added (by model) and the keys of rows changed or deleted between two readings."""
    added: list[tuple[type[models.Model], list[models.Model]]] = []
    changed: list[tuple[type[models.Model], Any]] = []
    for model, now in after.items():
        old = before[model]
        new = [row for pk, row in now.items() if pk not in old]
        if new:
            added.append((model, new))
        changed += [(model, pk) for pk, row in old.items() if pk not in now or _values(now[pk]) != _values(row)]
    return added, changed


def _moved(row: models.Model, shift: timedelta) -> models.Model:
    """A copy of kept ``row`` to insert: its dates and times ``shift`` later."""
    copied = copy.copy(row)
    copied._state = copy.copy(row._state)
    copied._state.adding, copied._state.db = True, None
    for f in row._meta.concrete_fields:
        if isinstance(f, models.DateTimeField):
            value = getattr(row, f.attname)
            if value is not None:
                setattr(copied, f.attname, value + shift)
    return copied


def _forget_memos() -> None:
    from accounts.auth import TOKENS
    from budgets.tree_memo import MEMO as TREE
    from scheduler.hardware_memo import MEMO as HARDWARE

    for memo in (TREE, HARDWARE, TOKENS):
        memo.forget()
