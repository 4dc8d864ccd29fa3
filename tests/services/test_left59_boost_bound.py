"""left59: a temporary share ends at most 366 days ahead, as a scheduled drain is scheduled
(``budgets.rules.SCHEDULE_AHEAD_MAX``, the one bound): a typed year (2062 for 2026) made it
permanent unsaid."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from budgets import rules
from budgets.models import ShareBoost
from budgets.services import BudgetError, boost_problem, do_schedule_boost
from scheduler import services


def test_the_bound_is_the_drains_one():
    assert services.SCHEDULED_DRAIN_MAX is rules.SCHEDULE_AHEAD_MAX == timedelta(days=366)


def test_a_boost_ending_too_far_ahead_is_refused(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    assert boost_problem(olmo, 3, None, now + timedelta(days=366), now) is None
    with pytest.raises(BudgetError) as refused:
        do_schedule_boost(admin, olmo, 3, now + timedelta(days=367))
    assert refused.value.code == "until_too_far"
    assert refused.value.message.startswith("A temporary share ends at most 366 days ahead: ")
    assert not ShareBoost.objects.exists()


def test_the_admin_refuses_it_with_the_words(admin, org_tree):
    client = Client()
    client.force_login(admin)
    until = timezone.now().replace(year=timezone.now().year + 36)  # 2062 for 2026
    form = {"budget": org_tree["nlp/olmo"].pk, "shares": 3, "starts_at_0": "", "starts_at_1": "", "note": ""}
    form.update({"ends_at_0": until.strftime("%Y-%m-%d"), "ends_at_1": "08:00:00"})
    response = client.post(reverse("admin:budgets_shareboost_add"), form)
    assert response.status_code == 200
    assert "A temporary share ends at most 366 days ahead" in response.content.decode()
    assert not ShareBoost.objects.exists()
