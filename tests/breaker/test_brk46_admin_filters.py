"""brk46: an admin changelist filtered by a related id past 64 bits
(``/admin/scheduler/workload/?cluster__exact=99999999999999999999999``) was a 500: the filter was
built, and the query failed when the list counted its rows (SQLite's OverflowError, PostgreSQL's
out-of-range error). It is what a filter value that is no number already is (``?cluster__exact=abc``):
Django's "incorrect lookup" answer, a redirect to the list with ``?e=1`` (config/admin_ids.py)."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.services import do_submit_workload

HUGE = "99999999999999999999999"


@pytest.mark.parametrize(
    ("url", "param", "value"),
    [
        ("/admin/scheduler/workload/", "cluster__exact", HUGE),
        ("/admin/scheduler/workload/", "cluster__exact", f"-{HUGE}"),
        ("/admin/scheduler/host/", "cluster", HUGE),
        ("/admin/scheduler/gpu/", "host__cluster", HUGE),
        ("/admin/scheduler/attempt/", "host__cluster__exact", HUGE),
        ("/admin/budgets/usageentry/", "cluster__exact", HUGE),
        ("/admin/accounts/user/", "groups", HUGE),
        ("/admin/scheduler/workload/", "cluster__id__in", f"1,{HUGE}"),
        ("/admin/scheduler/mount/", "cluster__exact", f" {HUGE} "),
    ],
)
def test_a_filter_by_an_id_past_64_bits_is_an_incorrect_lookup(admin, cluster, url, param, value) -> None:
    client = Client(raise_request_exception=False)
    client.force_login(admin)
    response = client.get(url, {param: value})
    assert response.status_code == 302, response.status_code
    assert response["Location"] == f"{url}?e=1"
    assert client.get(url, {param: "abc"})["Location"] == f"{url}?e=1"  # as a value that is no number


def test_a_filter_by_an_id_in_range_still_filters(admin, researcher, cluster, submit_kwargs) -> None:
    w = do_submit_workload(researcher, **submit_kwargs(hold=True))
    client = Client()
    client.force_login(admin)
    shown = client.get("/admin/scheduler/workload/", {"cluster__exact": str(cluster.pk)})
    assert shown.status_code == 200 and f"/admin/scheduler/workload/{w.pk}/change/" in shown.content.decode()
    none = client.get("/admin/scheduler/workload/", {"cluster__exact": str(2**63 - 1)})
    assert none.status_code == 200 and f"/admin/scheduler/workload/{w.pk}/change/" not in none.content.decode()
