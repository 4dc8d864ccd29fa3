"""The shared fixtures' kept rows (tests/fixture_rows.py) are the rows their services make: the
same tables, the same values but for primary keys (compared by position) and times (moved to
now), and a part whose parts below were not put back is made by its services."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import models, transaction
from django.utils import timezone

from budgets.models import Budget
from tests.fixture_rows import World, every_row


def _shape(rows: dict[type[models.Model], dict[Any, models.Model]]) -> dict[str, list[tuple[Any, ...]]]:
    """Every non-empty table's rows as values, keys named by position (the n-th row of a model)
    and times left out."""
    position = {(model, pk): n for model, by_pk in rows.items() for n, pk in enumerate(sorted(by_pk))}
    shaped: dict[str, list[tuple[Any, ...]]] = {}
    for model, by_pk in rows.items():
        if not by_pk:
            continue
        table = []
        for pk in sorted(by_pk):
            row = by_pk[pk]
            values: list[Any] = []
            for f in model._meta.concrete_fields:
                value = getattr(row, f.attname)
                if isinstance(f, models.DateTimeField):
                    values.append(value is not None)
                elif f.primary_key:
                    values.append(position[(model, value)])
                elif f.is_relation and value is not None:
                    values.append((f.related_model.__name__, position.get((f.related_model, value))))
                elif f.name == "password":  # salted
                    values.append(value.split("$")[0])
                elif f.name in ("token_hash", "token_key", "digest", "salt"):  # random per host token
                    values.append(len(value))
                else:
                    values.append(value)
            table.append(tuple(values))
        shaped[model._meta.label] = table
    return shaped


def _every_part(world: World) -> None:
    done: set[str] = set()
    for name in world.makers:
        world.put(name, done, _not_put_back, lambda value: value)
        assert name in done, f"{name} was not put back"


def _not_put_back() -> None:
    return None


def test_the_rows_put_back_are_the_rows_the_services_make(db: None, fixture_rows: World) -> None:
    with transaction.atomic():
        _every_part(fixture_rows)
        put_back = every_row()
        transaction.set_rollback(True)
    with transaction.atomic():
        values: dict[str, Any] = {}
        for name, (_needs, make) in fixture_rows.makers.items():
            values[name] = make(values)
        made = every_row()
        transaction.set_rollback(True)
    assert _shape(put_back) == _shape(made)
    assert sum(len(rows) for rows in put_back.values()) >= 40  # budgets, users, memberships, hosts, GPUs…


def test_kept_times_are_moved_to_now(db: None, fixture_rows: World) -> None:
    before = timezone.now()
    _every_part(fixture_rows)
    created = Budget.objects.get(name="org").created_at
    assert before - timedelta(seconds=5) <= created <= timezone.now()


def test_a_part_whose_parts_below_were_made_again_is_made_again(db: None, fixture_rows: World) -> None:
    calls = []
    value = fixture_rows.put("researcher", set(), lambda: calls.append("services") or "made", lambda v: "put back")
    assert (value, calls) == ("made", ["services"])  # the tree was not put back in this test
    done: set[str] = set()
    fixture_rows.put("org_tree", done, lambda: "made", lambda v: "put back")
    assert fixture_rows.put("researcher", done, lambda: "made", lambda v: "put back") == "put back"


def test_rows_that_cannot_go_in_are_made_by_the_services(db: None, fixture_rows: World) -> None:
    Budget.objects.create(name="org", parent=None)  # the root's name taken: the kept root refused
    done: set[str] = set()
    assert fixture_rows.put("org_tree", done, lambda: "made", lambda v: "put back") == "made"
    assert "org_tree" not in done
