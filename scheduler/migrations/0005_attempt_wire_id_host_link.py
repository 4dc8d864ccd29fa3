"""Attempt.wire_id (the attempt's identity on the agent link, random: fenced across restores),
Host.link_generation (one live agent connection per host), Host.pending_inventory (a hello's
GPU inventory that differs from the registered one, awaiting approval)."""

from django.db import migrations, models

import scheduler.models


def fill_wire_ids(apps, schema_editor):
    Attempt = apps.get_model("scheduler", "Attempt")
    seen: set[int] = set()
    batch = []
    for attempt in Attempt.objects.only("pk").iterator():
        wire = scheduler.models.new_wire_id()
        while wire in seen:
            wire = scheduler.models.new_wire_id()
        seen.add(wire)
        attempt.wire_id = wire
        batch.append(attempt)
        if len(batch) >= 1000:
            Attempt.objects.bulk_update(batch, ["wire_id"])
            batch = []
    if batch:
        Attempt.objects.bulk_update(batch, ["wire_id"])


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0004_cluster_hourly_metrics"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="wire_id",
            field=models.BigIntegerField(null=True, editable=False),
        ),
        migrations.RunPython(fill_wire_ids, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="attempt",
            name="wire_id",
            field=models.BigIntegerField(default=scheduler.models.new_wire_id, editable=False, unique=True),
        ),
        migrations.AddField(
            model_name="host",
            name="link_generation",
            field=models.BigIntegerField(default=0, editable=False),
        ),
        migrations.AddField(
            model_name="host",
            name="pending_inventory",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
    ]
