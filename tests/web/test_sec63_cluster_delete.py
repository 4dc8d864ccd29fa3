"""sec63: deleting a cluster in the admin deleted its imported usage (``UsageEntry``) and its hourly
metrics with it (a cascade): budgets' statements and the standing lost their history. A cluster
that holds usage history cannot be deleted now (``PROTECT``); the admin says why, in one line."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import ProtectedError
from django.utils import timezone

from budgets.models import UsageEntry
from scheduler.models import Cluster, ClusterHourlyMetrics


@pytest.fixture
def history(org_tree):
    """A cluster with no hosts left (hosts are protected on their own), its history imported."""
    cluster = Cluster.objects.create(name="retired")
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    UsageEntry.objects.create(budget=org_tree["nlp/olmo"], cluster=cluster, start=now, end=now, gpu_seconds=7200)
    ClusterHourlyMetrics.objects.create(
        cluster=cluster, hour=now - timedelta(hours=1), registered_gpu_s=3600, computed_at=now
    )
    return cluster


def test_the_admin_refuses_to_delete_a_cluster_with_usage_history(admin_client, history):
    page = admin_client.get(f"/admin/scheduler/cluster/{history.pk}/delete/").content.decode()
    assert "Cannot delete" in page
    assert "1 usage entry and 1 hour of metrics" in page
    admin_client.post(f"/admin/scheduler/cluster/{history.pk}/delete/", {"post": "yes"})
    assert Cluster.objects.filter(pk=history.pk).exists()
    assert UsageEntry.objects.filter(cluster=history).count() == 1
    assert ClusterHourlyMetrics.objects.filter(cluster=history).count() == 1


def test_the_admin_list_action_refuses_too(admin_client, history):
    page = admin_client.post(
        "/admin/scheduler/cluster/", {"action": "delete_selected", "_selected_action": [history.pk], "post": "yes"}
    ).content.decode()
    assert "1 usage entry and 1 hour of metrics" in page
    assert Cluster.objects.filter(pk=history.pk).exists() and UsageEntry.objects.count() == 1


def test_any_other_path_is_refused_by_the_database_rule(history):
    with pytest.raises(ProtectedError):
        history.delete()


def test_a_cluster_without_history_is_still_deleted(admin_client, db):
    spare = Cluster.objects.create(name="typo")
    admin_client.post(f"/admin/scheduler/cluster/{spare.pk}/delete/", {"post": "yes"})
    assert not Cluster.objects.filter(pk=spare.pk).exists()
