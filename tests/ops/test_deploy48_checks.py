"""deploy48: ``manage.py check --deploy`` (docs/deploy.md §3) with a wrong ``DATABASE_URL`` ran
for minutes: drf-spectacular's deploy check builds the API schema, and every serializer's context
read the budget tree from the database, each read waiting ``FAIRWAY_DB_POOL_TIMEOUT_S`` for a
connection that never came. Building the schema reads nothing from the database."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from drf_spectacular.generators import SchemaGenerator

from budgets import tree_memo


@pytest.mark.django_db
def test_building_the_api_schema_reads_nothing_from_the_database():
    tree_memo.forget()  # a process that has read no tree yet
    with CaptureQueriesContext(connection) as queries:
        schema = SchemaGenerator().get_schema(request=None, public=True)
    assert schema["paths"]
    assert [q["sql"] for q in queries] == []


@pytest.mark.parametrize("url", ["mysql://fairway:pw@db.example.org/fairway", "oracle://u:pw@h/db"])
def test_a_database_url_of_another_database_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """``DATABASE_URL=mysql://…`` (dj-database-url reads it) failed at the first query with "Error
    loading MySQLdb module. Did you install mysqlclient?": Fairway runs on PostgreSQL or SQLite."""
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured, match=r"DATABASE_URL names a database Fairway does not run on") as no:
        load_settings(monkeypatch, DATABASE_URL=url)
    assert "pw" not in str(no.value) and "postgres://" in str(no.value)
