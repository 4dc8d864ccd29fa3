"""try38: leadership's and program managers' tryout of budgets, caps and metrics (failing-first cases)."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from budgets.models import Budget, UsageEntry


def test_a_caps_usage_in_its_period_shows_beside_it_on_the_page_and_the_api(admin, cluster, org_tree):
    """A cap read ``10.0 GPU-h / 7 d, then unfunded`` with no word of how much of it was used
    (the 7-day window's usage is another period and one cluster): leadership could not tell how
    near a program was to it. What the tick compares with the cap now leads it, the same on
    the page, ``GET budgets/tree/`` (and so ``fairway budgets``)."""
    Budget.objects.filter(pk=org_tree["nlp"].pk).update(cap_gpu_hours=10, cap_period_days=7)
    now = timezone.now()
    UsageEntry.objects.create(
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        start=now - timedelta(hours=3),
        end=now - timedelta(hours=1),
        gpus=2,
    )
    UsageEntry.objects.create(  # before the cap's period: not counted
        budget=org_tree["nlp/olmo"], cluster=cluster, start=now - timedelta(days=9), end=now - timedelta(days=8), gpus=8
    )
    words = "4 of 10.0 GPU-h / 7 d, then unfunded"

    web = Client()
    web.force_login(admin)
    assert f"cap {words}" in web.get("/budgets/").content.decode()

    api = APIClient()
    api.force_authenticate(admin)
    tree = api.get("/api/v1/budgets/tree/", {"cluster": cluster.name}).json()
    rows = {b["path"]: b for s in tree for b in s["budgets"]}
    assert rows["nlp"]["cap_used_gpu_hours"] == 4.0
    assert rows["nlp"]["cap_text"] == words
    assert rows["nlp/olmo"]["cap_used_gpu_hours"] is None and rows["nlp/olmo"]["cap_text"] == ""


def test_a_cap_is_a_number_in_the_budget_list_as_in_the_tree(admin, cluster, org_tree):
    """``GET budgets/`` sent ``cap_gpu_hours`` as the string ``"700.00"`` (DRF's decimal) and
    ``budgets/tree/`` the number ``700.0`` (try38): one value, one type."""
    Budget.objects.filter(pk=org_tree["nlp"].pk).update(cap_gpu_hours=700, cap_period_days=3)
    api = APIClient()
    api.force_authenticate(admin)
    body = api.get("/api/v1/budgets/").json()
    rows = {b["path"]: b for b in (body["results"] if isinstance(body, dict) else body)}
    tree = api.get("/api/v1/budgets/tree/", {"cluster": cluster.name}).json()
    in_tree = {b["path"]: b for s in tree for b in s["budgets"]}
    assert rows["nlp"]["cap_gpu_hours"] == in_tree["nlp"]["cap_gpu_hours"] == 700.0
    assert rows["nlp/olmo"]["cap_gpu_hours"] is None
