"""left51: the bulk actions' cap is a setting, ``FAIRWAY_BULK_MAX`` (default 10,000), read as the
other settings are (a bad value stops the process naming it), and every surface reads it there:
the service's refusal, the API's ``ids`` list (docs/jobs.md "Bulk actions")."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from scheduler import bulk
from scheduler.bulk import BulkError, do_bulk_action
from scheduler.models import Workload
from tests.breaker.test_break26 import load_settings


def test_the_default_and_a_value_from_the_environment(monkeypatch):
    assert load_settings(monkeypatch)["FAIRWAY"]["BULK_MAX"] == 10_000  # type: ignore[index]
    assert load_settings(monkeypatch, FAIRWAY_BULK_MAX="50")["FAIRWAY"]["BULK_MAX"] == 50  # type: ignore[index]


@pytest.mark.parametrize(("value", "words"), [("0", "must be >= 1"), ("ten", "not an integer"), ("10000001", "<=")])
def test_a_bad_value_stops_the_process_naming_it(monkeypatch, value, words):
    with pytest.raises(ImproperlyConfigured) as error:
        load_settings(monkeypatch, FAIRWAY_BULK_MAX=value)
    assert str(error.value).startswith("FAIRWAY_BULK_MAX=") and words in str(error.value)


def test_the_service_reads_the_setting(settings, researcher, mine):
    settings.FAIRWAY = {**settings.FAIRWAY, "BULK_MAX": 2}
    assert bulk.bulk_max() == 2
    with pytest.raises(BulkError) as refused:
        do_bulk_action(researcher, "cancel", Workload.objects.all(), dry_run=True)
    assert refused.value.code == "too_many_matched" and "more than 2 workloads" in refused.value.message
    settings.FAIRWAY = {**settings.FAIRWAY, "BULK_MAX": 3}
    assert do_bulk_action(researcher, "cancel", Workload.objects.all(), dry_run=True).matched == 3


def test_the_apis_ids_list_reads_it_too(settings, researcher_client, mine):
    settings.FAIRWAY = {**settings.FAIRWAY, "BULK_MAX": 2}
    ids = [w.pk for w in mine]
    response = researcher_client.post("/api/v1/workloads/bulk/?owner=me", {"action": "hold", "ids": ids}, format="json")
    assert response.status_code == 400, response.json()
    assert "ids" in response.json() and "no more than 2" in response.json()["ids"][0]
    assert set(Workload.objects.values_list("hold", flat=True)) == {""}
