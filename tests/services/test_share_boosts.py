"""Temporary shares ("deadline boosts", docs/standing.md): scheduled by leadership, started and
ended by the clock through ``do_set_shares``, the admin edit's path, with the same history."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from budgets.models import Budget, ShareBoost, ShareChange
from budgets.services import (
    BudgetError,
    apply_due_boosts,
    do_archive_budget,
    do_schedule_boost,
    do_set_shares,
)
from scheduler import clock, tasks
from tests.conftest import PASSWORD

DAY = timedelta(days=1)


def _shares(budget: Budget) -> int:
    return Budget.objects.get(pk=budget.pk).shares


def _history(budget: Budget) -> list[tuple[int, int, str]]:
    changes = ShareChange.objects.filter(budget=budget, kind="shares").order_by("at", "id")
    return [(c.old_shares, c.new_shares, c.actor_name) for c in changes]


def test_a_boost_starts_and_ends_through_the_share_edit_with_its_history(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    boost = do_schedule_boost(admin, olmo, 3, now + 2 * DAY, now + DAY, note="ACL deadline")
    assert apply_due_boosts(now) == 0 and _shares(olmo) == 1  # not yet

    assert apply_due_boosts(now + DAY) == 1
    assert _shares(olmo) == 3
    boost.refresh_from_db()
    assert (boost.state, boost.base_shares) == ("active", 1)
    assert apply_due_boosts(now + DAY + timedelta(minutes=1)) == 0  # twice: applied once

    assert apply_due_boosts(now + 2 * DAY) == 1
    assert _shares(olmo) == 1
    assert apply_due_boosts(now + 3 * DAY) == 0  # twice: undone once
    boost.refresh_from_db()
    assert boost.state == "ended"
    # The records an admin edit makes, in the scheduler's name, the reason kept.
    assert _history(olmo) == [(1, 3, "admin"), (3, 1, "admin")]
    start = ShareChange.objects.filter(budget=olmo).order_by("at", "id").first()
    assert start is not None and "ACL deadline" in start.note and "then 1" in start.note


def test_an_edit_during_a_boost_replaces_the_value_it_returns_to(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    do_set_shares(admin, olmo, 2)
    boost = do_schedule_boost(admin, olmo, 5, now + DAY)  # from now
    apply_due_boosts()
    assert _shares(olmo) == 5
    do_set_shares(admin, olmo, 4, "rebalanced")  # the explicit edit wins now and after
    boost.refresh_from_db()
    assert (boost.state, boost.base_shares, _shares(olmo)) == ("ended", 4, 4)
    assert apply_due_boosts(now + 2 * DAY) == 0
    assert _shares(olmo) == 4
    assert _history(olmo)[-2:] == [(2, 5, "admin"), (5, 4, "admin")]


def test_an_edit_before_a_boost_starts_is_what_it_returns_to(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    do_schedule_boost(admin, olmo, 5, now + 2 * DAY, now + DAY)
    do_set_shares(admin, olmo, 2)
    apply_due_boosts(now + DAY)
    apply_due_boosts(now + 2 * DAY)
    assert _shares(olmo) == 2


def test_back_to_back_boosts_hand_over_in_order_even_when_the_clock_was_late(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    do_schedule_boost(admin, olmo, 3, now + DAY, now)
    do_schedule_boost(admin, olmo, 6, now + 2 * DAY, now + DAY)  # adjacent: no overlap
    apply_due_boosts(now)
    assert _shares(olmo) == 3
    apply_due_boosts(now + DAY + timedelta(hours=1))  # the first ends, then the second starts
    assert _shares(olmo) == 6
    apply_due_boosts(now + 2 * DAY)
    assert _shares(olmo) == 1


@pytest.mark.parametrize(
    ("shares", "start", "end", "code"),
    [
        (3, None, -DAY, "until_past"),
        (3, 2 * DAY, DAY, "from_after_until"),
        (3, DAY, DAY, "from_after_until"),
        (0, None, DAY, "invalid_shares"),
        (-2, None, DAY, "invalid_shares"),
        (3, None, None, "until_required"),
        (3, DAY / 2, 3 * DAY, "overlap"),
    ],
)
def test_a_bad_boost_is_refused_and_changes_nothing(admin, org_tree, shares, start, end, code):
    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    do_schedule_boost(admin, org_tree["nlp/olmo"], 2, now + 2 * DAY, now + DAY)  # the one to overlap
    before = ShareBoost.objects.count()
    with pytest.raises(BudgetError) as refused:
        do_schedule_boost(
            admin, olmo, shares, now + end if end is not None else None, now + start if start is not None else None
        )
    assert refused.value.code == code
    assert ShareBoost.objects.count() == before and _shares(olmo) == 1


def test_an_archived_budget_gets_no_boost(admin, org_tree):
    tulu = org_tree["nlp/tulu"]
    now = timezone.now()
    boost = do_schedule_boost(admin, tulu, 3, now + 2 * DAY, now + DAY)
    do_archive_budget(tulu)
    with pytest.raises(BudgetError) as refused:
        do_schedule_boost(admin, tulu, 3, now + 5 * DAY, now + 4 * DAY)
    assert refused.value.code == "budget_archived" and "archived" in refused.value.message
    apply_due_boosts(now + DAY)  # archived since it was scheduled: it ends, nothing raised
    boost.refresh_from_db()
    assert boost.state == "ended" and _shares(tulu) == 1


def test_the_clock_sends_the_boosts_with_its_sweeps(db, monkeypatch):
    sent: list[int] = []
    for name in ("sweep_hosts", "start_timeouts", "prune_gpu_metrics", "resend_stale_notifications", "rollup_pyramid"):
        monkeypatch.setattr(getattr(tasks, name), "send", lambda: None)
    monkeypatch.setattr(tasks.apply_share_boosts, "send", lambda: sent.append(1))
    c = clock.Clock(interval=1.0)
    c.beat(sweep=False)
    assert sent == []
    c.beat(sweep=True)
    assert sent == [1]


def test_the_task_applies_what_is_due(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    do_schedule_boost(admin, olmo, 3, timezone.now() + DAY)
    tasks.apply_share_boosts()
    assert _shares(olmo) == 3


# --- the admin ----------------------------------------------------------------------------------


def _client(user: User) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _form(budget: Budget, **overrides: Any) -> dict[str, Any]:
    until = timezone.now() + 3 * DAY
    data: dict[str, Any] = {
        "budget": budget.pk,
        "shares": 3,
        "starts_at_0": "",
        "starts_at_1": "",
        "ends_at_0": until.strftime("%Y-%m-%d"),
        "ends_at_1": until.strftime("%H:%M:%S"),
        "note": "NeurIPS",
        "_save": "Save",
    }
    data.update(overrides)
    return data


def test_the_admin_schedules_a_boost_that_starts_now(admin, org_tree, django_capture_on_commit_callbacks):
    olmo = org_tree["nlp/olmo"]
    with django_capture_on_commit_callbacks(execute=True):
        response = _client(admin).post(reverse("admin:budgets_shareboost_add"), _form(olmo))
    assert response.status_code == 302, response.content.decode()[:3000]
    boost = ShareBoost.objects.get()
    assert (boost.shares, boost.actor, boost.note, boost.state) == (3, admin, "NeurIPS", "active")
    assert _shares(olmo) == 3
    listing = _client(admin).get(reverse("admin:budgets_shareboost_changelist")).content.decode()
    assert "share 3 until" in listing and "(then 1)" in listing
    page = _client(admin).get(reverse("admin:budgets_budget_change", args=[olmo.pk])).content.decode()
    assert "NeurIPS" in page


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"ends_at_0": "2020-01-01", "ends_at_1": "00:00:00"}, "is not in the future"),
        ({"starts_at_0": "2099-01-02", "starts_at_1": "00:00:00", "ends_at_0": "2099-01-01"}, "From is after until"),
        ({"shares": "0"}, "Shares are an integer &gt;= 1."),
        ({"ends_at_0": "", "ends_at_1": ""}, "This field is required"),
    ],
)
def test_the_admin_refuses_a_bad_boost_and_changes_nothing(admin, org_tree, overrides, words):
    olmo = org_tree["nlp/olmo"]
    response = _client(admin).post(reverse("admin:budgets_shareboost_add"), _form(olmo, **overrides))
    assert response.status_code == 200
    assert words in response.content.decode()
    assert not ShareBoost.objects.exists() and _shares(olmo) == 1


def test_the_admin_refuses_an_overlap_and_an_archived_budget(admin, org_tree):
    olmo, tulu = org_tree["nlp/olmo"], org_tree["nlp/tulu"]
    do_schedule_boost(admin, olmo, 2, timezone.now() + 5 * DAY, timezone.now() + DAY)
    do_archive_budget(tulu)
    overlap = _client(admin).post(reverse("admin:budgets_shareboost_add"), _form(olmo)).content.decode()
    assert "has a temporary share then already" in overlap
    archived = _client(admin).post(reverse("admin:budgets_shareboost_add"), _form(tulu)).content.decode()
    assert "is archived" in archived
    assert ShareBoost.objects.count() == 1


def test_only_who_may_change_budgets_schedules_and_only_before_it_starts_may_delete(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    staff = User.objects.create_user(username="staffer", password=PASSWORD, is_staff=True)
    from django.contrib.auth.models import Permission

    staff.user_permissions.add(*Permission.objects.filter(codename__in=["add_shareboost", "view_shareboost"]))
    assert _client(staff).post(reverse("admin:budgets_shareboost_add"), _form(olmo)).status_code == 403
    assert not ShareBoost.objects.exists()
    later = do_schedule_boost(admin, olmo, 2, timezone.now() + 5 * DAY, timezone.now() + DAY)
    now = do_schedule_boost(admin, org_tree["vision/sam"], 2, timezone.now() + DAY)
    apply_due_boosts()
    client = _client(admin)
    assert client.get(reverse("admin:budgets_shareboost_delete", args=[now.pk])).status_code == 403
    assert client.post(reverse("admin:budgets_shareboost_delete", args=[later.pk]), {"post": "yes"}).status_code == 302
    assert list(ShareBoost.objects.values_list("pk", flat=True)) == [now.pk]


def test_an_edit_in_the_admin_during_a_boost_is_what_stays(admin, org_tree):
    from tests.services.test_share_audit import _change_form

    olmo = org_tree["nlp/olmo"]
    later = timezone.now() + DAY
    boost = do_schedule_boost(admin, olmo, 3, timezone.now() + 2 * DAY)
    apply_due_boosts()
    olmo.refresh_from_db()
    url = reverse("admin:budgets_budget_change", args=[olmo.pk])
    page = _client(admin).get(url).content.decode()
    assert "share 3 until" in page and "(then 1)" in page
    response = _client(admin).post(url, _change_form(olmo, shares=2, change_note="rebalanced"))
    assert response.status_code == 302
    boost.refresh_from_db()
    assert (boost.state, boost.base_shares, _shares(olmo)) == ("ended", 2, 2)
    apply_due_boosts(later + 2 * DAY)
    assert _shares(olmo) == 2
    assert _history(olmo) == [(1, 3, "admin"), (3, 2, "admin")]


def test_the_budget_page_lists_a_scheduled_boost_from_when(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    do_schedule_boost(admin, olmo, 4, timezone.now() + 3 * DAY, timezone.now() + DAY)
    page = _client(admin).get(reverse("admin:budgets_budget_change", args=[olmo.pk])).content.decode()
    assert "share 4 from " in page


def test_the_budgets_admin_list_says_a_share_is_temporary(admin, org_tree):
    """try56: during a boost the budgets admin's list showed vision's shares as a plain "9" (the
    budgets page: "share 9 until … (then 1)"), so leadership could take it for a lasting share."""
    olmo = org_tree["nlp/olmo"]
    do_schedule_boost(admin, olmo, 3, timezone.now() + DAY, None, note="ACL")
    apply_due_boosts(timezone.now())

    listing = _client(admin).get(reverse("admin:budgets_budget_changelist")).content.decode()

    row = listing[listing.index(">nlp/olmo<") :]
    row = row[: row.index("</tr>")]
    assert "3 (share 3 until " in row and "(then 1))" in row, row


def test_the_what_if_shares_say_which_share_is_temporary(admin, org_tree, db):
    """try56: during a boost the what-if page's shares read "nlp/olmo: 3", as if lasting, so a
    replay "of today's shares" kept a deadline's boost for the whole window: the line says so in a
    comment, which the shares file reads past."""
    import yaml

    from budgets.admin import current_shares_yaml

    olmo = org_tree["nlp/olmo"]
    do_schedule_boost(admin, olmo, 3, timezone.now() + DAY, None, note="ACL")
    apply_due_boosts(timezone.now())

    text = current_shares_yaml()

    line = next(line for line in text.splitlines() if line.strip().startswith("nlp/olmo:"))
    assert line.startswith("  nlp/olmo: 3  # temporary: share 3 until "), line
    assert line.endswith("(then 1)"), line
    assert yaml.safe_load(text)["shares"]["nlp/olmo"] == 3  # the comment is read past


# try58: a temporary share of vision/det, the only project of vision, was "added successfully" and
# changed nothing: shares weigh a budget against its live siblings only (DESIGN.md §1), so the
# boosted budget kept 25.0%. The admin says so beside its success message (budgets.rules).
LONE = "has no live sibling"


@pytest.mark.parametrize(
    ("path", "archive", "lone"), [("vision/sam", None, True), ("nlp/olmo", None, False), ("nlp/olmo", "nlp/tulu", True)]
)
def test_a_boost_of_a_budget_without_live_siblings_says_it_changes_no_share(admin, org_tree, path, archive, lone):
    if archive:
        do_archive_budget(org_tree[archive])
    response = _client(admin).post(reverse("admin:budgets_shareboost_add"), _form(org_tree[path]), follow=True)
    page = response.content.decode()
    assert "was added successfully" in page
    assert (LONE in page) is lone, page[:3000]
    if lone:
        assert f"Budget {path} {LONE}" in page


def test_a_share_edit_of_a_budget_without_live_siblings_says_so(admin, org_tree):
    from tests.services.test_share_audit import _change_form

    client = _client(admin)
    for path, said in (
        ("vision/sam", f"Budget vision/sam {LONE}"),
        ("nlp/olmo", None),
        ("org", "Budget org is the root"),
    ):
        budget = org_tree[path]
        url = reverse("admin:budgets_budget_change", args=[budget.pk])
        page = client.post(url, _change_form(budget, shares=4), follow=True).content.decode()
        assert _shares(budget) == 4
        assert (said in page) if said else ("change no share of a cluster" not in page), (path, page[:3000])
    sam = org_tree["vision/sam"]  # a save that leaves the shares alone says nothing
    page = client.post(
        reverse("admin:budgets_budget_change", args=[sam.pk]), _change_form(sam, shares=4, description="x"), follow=True
    )
    assert LONE not in page.content.decode()


# lead47: a temporary share of 1 for a budget that has 1 share, from now, was "added successfully"
# and changed nothing; the budgets page and `fairway budgets` then showed "1 → 1 @18:00".
def test_a_boost_from_now_of_the_shares_the_budget_has_is_refused(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    with pytest.raises(BudgetError) as refused:
        do_schedule_boost(admin, olmo, 1, timezone.now() + DAY)
    assert refused.value.code == "same_shares"
    assert "changes nothing" in str(refused.value)
    assert not ShareBoost.objects.exists() and _shares(olmo) == 1
    # a later start may meet other shares then (an edit before it is what it returns to): kept
    assert do_schedule_boost(admin, olmo, 1, timezone.now() + 2 * DAY, timezone.now() + DAY).shares == 1


def test_the_admin_refuses_a_boost_that_changes_nothing(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    response = _client(admin).post(reverse("admin:budgets_shareboost_add"), _form(olmo, shares="1"))
    assert response.status_code == 200
    assert "has 1 share now: a temporary share of 1 from now changes nothing" in response.content.decode()
    assert not ShareBoost.objects.exists() and _shares(olmo) == 1
