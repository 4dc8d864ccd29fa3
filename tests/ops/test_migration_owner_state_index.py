"""Migration ``scheduler.0017_workload_owner_state`` (docs/deploy.md, "Upgrading: the (owner, state)
index"): on PostgreSQL the index is built ``CONCURRENTLY`` (writes to a big workloads table go on
during the upgrade), on SQLite as before; applied again where the index is already there (an
upgraded database) it changes nothing; an invalid index left by an interrupted build is built anew."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

BEFORE = [("scheduler", "0016_gpu_verbose_name")]
AFTER = [("scheduler", "0017_workload_owner_state")]
INDEX = "workload_owner_state"

on_postgresql = pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL only")


def _executor() -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    return executor


def _indexes() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.get_constraints(cursor, "scheduler_workload"))


@pytest.fixture
def at_0016(transactional_db):
    """The database at scheduler 0016 (no index); back to the latest migrations after."""
    _executor().migrate(BEFORE)
    yield
    executor = _executor()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_index_is_built_by_the_migration(at_0016):
    assert INDEX not in _indexes()
    with CaptureQueriesContext(connection) as queries:
        _executor().migrate(AFTER)
    assert INDEX in _indexes()
    built = [q["sql"] for q in queries.captured_queries if "CREATE INDEX" in q["sql"].upper()]
    assert len(built) == 1, built
    if connection.vendor == "postgresql":
        # No write lock on the workloads table while it is built.
        assert built[0].upper().startswith("CREATE INDEX CONCURRENTLY"), built


def _apply_0017_again() -> list[str]:
    """Run 0017's operation as ``migrate`` would on a database that already has the index (the
    migration unrecorded, as after ``migrate --fake scheduler 0016``); the SQL it ran."""
    executor = _executor()
    migration = executor.loader.get_migration(*AFTER[0])
    with CaptureQueriesContext(connection) as queries, connection.schema_editor(atomic=migration.atomic) as editor:
        migration.apply(executor.loader.project_state(BEFORE), editor)
    return [q["sql"] for q in queries.captured_queries if q["sql"].upper().startswith(("CREATE ", "DROP "))]


def test_rerun_on_an_upgraded_database_changes_nothing(transactional_db):
    assert INDEX in _indexes()
    ran = _apply_0017_again()
    assert ran == []
    assert INDEX in _indexes()


@on_postgresql
def test_an_invalid_index_left_by_an_interrupted_build_is_built_again(transactional_db):
    # What a cancelled CREATE INDEX CONCURRENTLY leaves behind: the index, marked invalid.
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pg_index SET indisvalid = false WHERE indexrelid = %s::regclass", [INDEX])
    ran = [sql.upper().split(" ON ")[0] for sql in _apply_0017_again()]
    assert ran == [
        f'DROP INDEX CONCURRENTLY IF EXISTS "{INDEX.upper()}"',
        f'CREATE INDEX CONCURRENTLY "{INDEX.upper()}"',
    ]
    with connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass", [INDEX])
        assert cursor.fetchone() == (True,)
