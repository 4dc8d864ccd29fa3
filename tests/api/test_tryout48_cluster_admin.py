"""tryout48: admin → Clusters → Add (deploy.md §6's first step) offered "Estimated at" with date and
time pickers ("Today | Now"): the instant of the cluster's last estimates run, which only the
estimates process writes. An operator who filled it in (or "Now") made every page say that work
pending since then awaits the next run. It is shown, never edited."""

from __future__ import annotations

from datetime import UTC, datetime

from django.urls import reverse

from scheduler.models import Cluster
from tests.conftest import PASSWORD


def test_adding_a_cluster_asks_no_estimates_instant(client, admin):
    client.login(username="admin", password=PASSWORD)

    page = client.get(reverse("admin:scheduler_cluster_add")).content.decode()
    assert 'name="estimated_at_0"' not in page and 'name="estimated_at_1"' not in page

    answer = client.post(
        reverse("admin:scheduler_cluster_add"),
        {"name": "h100", "description": "", "estimated_at_0": "2026-12-07", "estimated_at_1": "12:00:00"},
    )
    assert answer.status_code == 302
    assert Cluster.objects.get(name="h100").estimated_at is None


def test_a_clusters_page_shows_its_last_estimates_run_read_only(client, admin):
    cluster = Cluster.objects.create(name="h100", estimated_at=datetime(2026, 12, 7, 12, 0, tzinfo=UTC))
    client.login(username="admin", password=PASSWORD)

    page = client.get(reverse("admin:scheduler_cluster_change", args=[cluster.pk])).content.decode()
    assert 'name="estimated_at_0"' not in page
    assert "Estimated at" in page
