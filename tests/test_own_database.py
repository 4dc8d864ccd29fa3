"""The tests run on their own test database, never on DATABASE_URL's: with the connection pool on,
a pool built before the test database existed kept pointing at DATABASE_URL's database (the
fuzz module's schema, loaded at collection, built it), so a whole run migrated and flushed that
database (tests/conftest.py, ``django_db_modify_db_settings``). Fails in such a run without the fix."""

from __future__ import annotations

import pytest
from django.db import connection


@pytest.mark.django_db
def test_queries_reach_the_test_database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_database()" if connection.vendor == "postgresql" else "PRAGMA database_list")
        row = cursor.fetchone()
    name = row[0] if connection.vendor == "postgresql" else row[2]
    assert name == connection.settings_dict["NAME"] == connection.creation._get_test_db_name()
