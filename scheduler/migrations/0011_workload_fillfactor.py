"""Workload rows keep a fifth of each page free (PostgreSQL ``fillfactor`` 80): the tick rewrites
thousands of pending reasons (``pending_reason``, ``pending_detail``, ``estimated_start``: no
index reads them), and with room on the page PostgreSQL updates them in place (HOT) instead of
adding an entry to each of the table's ten indexes per row. New pages only; a ``VACUUM FULL``
rewrites the old ones (docs/deploy.md). Nothing on SQLite."""

from django.db import migrations


def fillfactor(value: int):  # noqa: ANN201
    def apply(apps, schema_editor):  # noqa: ANN001, ANN202, ARG001
        if schema_editor.connection.vendor == "postgresql":
            table = apps.get_model("scheduler", "Workload")._meta.db_table
            schema_editor.execute(f"ALTER TABLE {schema_editor.quote_name(table)} SET (fillfactor = {int(value)})")

    return apply


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0010_notification_settings_plural")]

    operations = [migrations.RunPython(fillfactor(80), fillfactor(100))]
