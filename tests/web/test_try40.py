"""try40: a researcher's and leadership's tryout (failing-first cases)."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.urls import reverse
from django.utils import timezone

from budgets.models import Budget, UsageEntry


def test_the_admins_budget_list_shows_a_caps_use_as_the_budgets_page(admin, cluster, org_tree):
    """The budget list, where leadership sets caps, read ``10.0 GPU-h / 7 d, then unfunded`` for a
    cap the budgets page and ``fairway budgets`` showed as ``12.0 of 10.0 GPU-h / 7 d, then unfunded
    (reached)``: one cap, one text."""
    Budget.objects.filter(pk=org_tree["nlp"].pk).update(cap_gpu_hours=10, cap_period_days=7)
    Budget.objects.filter(pk=org_tree["vision"].pk).update(cap_gpu_hours=100, cap_period_days=7)
    now = timezone.now()
    UsageEntry.objects.create(
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        start=now - timedelta(hours=4),
        end=now - timedelta(hours=1),
        gpus=4,
    )
    web = Client()
    web.force_login(admin)
    listing = web.get(reverse("admin:budgets_budget_changelist")).content.decode()
    page = web.get("/budgets/").content.decode()
    for words in ("12.0 of 10.0 GPU-h / 7 d, then unfunded (reached)", "0 of 100 GPU-h / 7 d, then unfunded"):
        assert words in page, re.findall(r"cap [^<]*", page)
        assert f">{words}<" in listing
