"""Migration ``budgets.0005_one_root`` on a database that already has two root budgets
(docs/deploy.md, "Upgrading: one root budget"): it refuses before the index, names the roots and
what to do, changes nothing; once the operator has moved a root under the other it applies."""

from __future__ import annotations

import pytest
from django.core.management.base import CommandError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("budgets", "0004_cap_period_at_most_ten_years")]
AFTER = [("budgets", "0005_one_root")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.fixture
def at_0004(transactional_db):
    """The database at budgets 0004 (before the index); back to the latest migrations after."""
    apps = _migrate(BEFORE)
    yield apps
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_two_roots_stop_the_migration_with_their_names_and_the_fix(at_0004):
    Budget = at_0004.get_model("budgets", "Budget")
    org = Budget.objects.create(name="org", shares=1)
    Budget.objects.create(name="nlp", parent=org, shares=3)
    lab = Budget.objects.create(name="lab", shares=1)

    with pytest.raises(CommandError) as refused:
        _migrate(AFTER)

    message = str(refused.value)
    assert f"#{org.pk} 'org', 1 sub-budget" in message and f"#{lab.pk} 'lab', 0 sub-budgets" in message
    assert f"UPDATE budgets_budget SET parent_id = {org.pk} WHERE id IN ({lab.pk});" in message  # noqa: S608 -- the expected text, not a query
    assert "Nothing was changed" in message
    # Nothing changed: both roots are still there, and the index is not.
    assert sorted(Budget.objects.filter(parent__isnull=True).values_list("name", flat=True)) == ["lab", "org"]
    recorder = MigrationExecutor(connection).recorder
    assert ("budgets", "0005_one_root") not in recorder.applied_migrations()

    # The operator's fix, as the message says; then the migration applies.
    Budget.objects.filter(pk=lab.pk).update(parent_id=org.pk)
    apps = _migrate(AFTER)
    assert apps.get_model("budgets", "Budget").objects.filter(parent__isnull=True).count() == 1
    assert ("budgets", "0005_one_root") in MigrationExecutor(connection).recorder.applied_migrations()


def test_one_root_migrates_as_before(at_0004):
    Budget = at_0004.get_model("budgets", "Budget")
    org = Budget.objects.create(name="org", shares=1)
    Budget.objects.create(name="nlp", parent=org, shares=3)
    _migrate(AFTER)
    assert ("budgets", "0005_one_root") in MigrationExecutor(connection).recorder.applied_migrations()
