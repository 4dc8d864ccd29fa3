"""Audit history of shares (ShareChange) and the what-if of changed shares from the Django admin."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from budgets.models import Budget, ShareChange
from budgets.services import BudgetError, do_archive_budget, do_set_hold, do_set_shares
from scheduler.models import Attempt, Cluster, Host, Workload
from tests.conftest import PASSWORD


def _change_form(budget: Budget, **overrides: Any) -> dict[str, Any]:
    """The Budget change form as the admin posts it (no history yet: an empty inline formset)."""
    data: dict[str, Any] = {
        "name": budget.name,
        "parent": budget.parent_id or "",
        "shares": budget.shares,
        "cap_gpu_hours": "",
        "cap_period_days": budget.cap_period_days,
        "on_cap": budget.on_cap,
        "max_submitted_per_user": "" if budget.max_submitted_per_user is None else budget.max_submitted_per_user,
        "description": budget.description,
        "change_note": "",
        "share_changes-TOTAL_FORMS": "0",
        "share_changes-INITIAL_FORMS": "0",
        "share_changes-MIN_NUM_FORMS": "0",
        "share_changes-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    if budget.hold:
        data["hold"] = "on"
    data.update(overrides)
    return data


def _client(user: User) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def test_admin_change_of_shares_records_who_changed_what(admin: User, org_tree: dict[str, Budget]) -> None:
    olmo = org_tree["nlp/olmo"]
    url = reverse("admin:budgets_budget_change", args=[olmo.pk])
    response = _client(admin).post(url, _change_form(olmo, shares=5, change_note="olmo pretraining push"))
    assert response.status_code == 302, response.content.decode()[:2000]
    olmo.refresh_from_db()
    assert olmo.shares == 5
    (change,) = ShareChange.objects.all()
    assert (change.budget_id, change.kind, change.old_shares, change.new_shares) == (olmo.pk, "shares", 1, 5)
    assert change.actor == admin and change.actor_name == "admin"
    assert change.note == "olmo pretraining push"
    # The change page shows the history inline; the audit admin lists it and is read-only.
    page = _client(admin).get(url).content.decode()
    assert "olmo pretraining push" in page
    listing = _client(admin).get(reverse("admin:budgets_sharechange_changelist"), {"actor__id__exact": admin.pk})
    assert listing.status_code == 200 and "olmo pretraining push" in listing.content.decode()
    assert _client(admin).get(reverse("admin:budgets_sharechange_add")).status_code == 403


def test_saving_without_changing_shares_records_nothing(admin: User, org_tree: dict[str, Budget]) -> None:
    olmo = org_tree["nlp/olmo"]
    url = reverse("admin:budgets_budget_change", args=[olmo.pk])
    response = _client(admin).post(url, _change_form(olmo, description="the OLMo project"))
    assert response.status_code == 302
    assert not ShareChange.objects.exists()


def test_non_staff_user_cannot_change_shares(researcher: User, org_tree: dict[str, Budget]) -> None:
    olmo = org_tree["nlp/olmo"]
    url = reverse("admin:budgets_budget_change", args=[olmo.pk])
    response = _client(researcher).post(url, _change_form(olmo, shares=9))
    assert response.status_code == 302 and "/login/" in response["Location"]
    olmo.refresh_from_db()
    assert olmo.shares == 1
    assert not ShareChange.objects.exists()


def test_zero_shares_are_refused_and_record_nothing(admin: User, org_tree: dict[str, Budget]) -> None:
    olmo = org_tree["nlp/olmo"]
    url = reverse("admin:budgets_budget_change", args=[olmo.pk])
    response = _client(admin).post(url, _change_form(olmo, shares=0))
    assert response.status_code == 200  # the form again, with the error
    assert "errornote" in response.content.decode()
    olmo.refresh_from_db()
    assert olmo.shares == 1
    assert not ShareChange.objects.exists()
    with pytest.raises(BudgetError):
        do_set_shares(admin, olmo, 0)
    assert not ShareChange.objects.exists()


def test_hold_and_archive_are_recorded(admin: User, org_tree: dict[str, Budget]) -> None:
    do_set_hold(org_tree["nlp/olmo"], True, actor=admin)
    do_set_hold(org_tree["nlp/olmo"], True, actor=admin)  # no change, no record
    do_archive_budget(org_tree["vision"], actor=admin)
    kinds = sorted((c.budget.name, c.kind) for c in ShareChange.objects.select_related("budget"))
    assert kinds == [("olmo", "hold"), ("sam", "archive"), ("vision", "archive")]


# --- what-if from the admin -------------------------------------------------------------------


@pytest.fixture
def recorded(org_tree: dict[str, Budget], cluster: Cluster, hosts: dict[str, Host], researcher: User) -> None:
    """A day of tiny demand: olmo ran two 8-GPU jobs, sam waited for one."""
    now = timezone.now()
    h = timedelta(hours=1)
    for n, (budget, submitted, start, end) in enumerate(
        [
            ("nlp/olmo", 20 * h, 20 * h, 12 * h),
            ("nlp/olmo", 12 * h, 12 * h, 4 * h),
            ("vision/sam", 18 * h, 4 * h, 2 * h),
        ]
    ):
        w = Workload.objects.create(
            name=f"job-{n}",
            owner=researcher,
            budget=org_tree[budget],
            cluster=cluster,
            gpu_model="A100",
            gpu_count=8,
            command=["true"],
            min_runtime_s=3600,
            submitted_at=now - submitted,
            state="succeeded",
            finished_at=now - end,
        )
        Attempt.objects.create(
            workload=w,
            number=1,
            host=hosts["a100-1"],
            allocated=True,
            placed_at=now - start,
            started_at=now - start,
            ended_at=now - end,
            end_reason="succeeded",
        )


def test_what_if_page_renders_prefilled_and_is_linked(admin: User, recorded: None) -> None:
    client = _client(admin)
    changelist = client.get(reverse("admin:budgets_budget_changelist")).content.decode()
    url = reverse("admin:budgets_budget_what_if")
    assert url in changelist
    page = client.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert "nlp/olmo: 1" in text and "vision/sam: 1" in text and "nlp: 2" in text
    prefilled = page.context["form"].initial["shares"]
    again = client.post(url, {"shares": prefilled, "window": "7d", "cluster": "default"})
    assert again.context["error"] == "" and len(again.context["result"]["budgets"]) == 3


def test_what_if_shows_a_row_per_budget(admin: User, recorded: None) -> None:
    url = reverse("admin:budgets_budget_what_if")
    shares = "shares:\n  vision: 2\n  vision/sam: 1\n"
    response = _client(admin).post(url, {"shares": shares, "window": "1d", "cluster": "default"})
    assert response.status_code == 200
    result = response.context["result"]
    assert response.context["error"] == ""
    assert [r["budget"] for r in result["budgets"]] == ["nlp/olmo", "nlp/tulu", "vision/sam"]
    assert result["jobs"] == 3
    text = response.content.decode()
    assert text.count('class="whatif-row"') == 3
    assert "whatif-result" in text


def test_what_if_bad_input_shows_the_line_and_changes_nothing(admin: User, recorded: None) -> None:
    url = reverse("admin:budgets_budget_what_if")
    before = list(Budget.objects.order_by("pk").values_list("pk", "shares"))
    shares = "shares:\n  nlp: 3\n  nlp/gpt: 2\n"
    response = _client(admin).post(url, {"shares": shares, "window": "1d", "cluster": "default"})
    assert response.status_code == 200
    assert response.context["result"] is None
    assert "line 3" in response.context["error"] and "nlp/gpt" in response.context["error"]
    assert "line 3" in response.content.decode()
    bad_window = _client(admin).post(url, {"shares": "shares:\n  nlp: 3\n", "window": "soon", "cluster": "default"})
    assert bad_window.context["error"] and bad_window.context["result"] is None
    assert list(Budget.objects.order_by("pk").values_list("pk", "shares")) == before
    assert not ShareChange.objects.exists()


def test_what_if_needs_staff(researcher: User, recorded: None) -> None:
    response = _client(researcher).get(reverse("admin:budgets_budget_what_if"))
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_by_actor_filter_lists_only_users_who_made_share_changes(
    admin: User, researcher: User, manager: User, org_tree: dict[str, Budget]
) -> None:
    """left38 tryout: the "By actor" filter listed every user of the instance (a long list of
    people who never changed a share, each giving an empty page)."""
    do_set_shares(admin, org_tree["nlp/olmo"], 5)
    listing = _client(admin).get(reverse("admin:budgets_sharechange_changelist"))
    (actor,) = [f for f in listing.context["cl"].filter_specs if getattr(f, "field_path", None) == "actor"]
    assert [pk for pk, _name in actor.lookup_choices] == [admin.pk]
    assert f"actor__id__exact={researcher.pk}" not in listing.content.decode()


def _budget_filter(listing: Any) -> Any:
    (spec,) = [f for f in listing.context["cl"].filter_specs if getattr(f, "field_path", None) == "budget"]
    return spec


def test_the_by_budget_filter_lists_live_budgets_with_share_changes_by_path(
    admin: User, org_tree: dict[str, Budget]
) -> None:
    """left39: the "By budget" filter listed every budget of the instance, archived ones and those
    never changed included, by name alone (``olmo``, not ``nlp/olmo``): hundreds in a big lab."""
    # Given share changes of two live budgets and of one archived since, and budgets never changed
    do_set_shares(admin, org_tree["vision/sam"], 3)
    do_set_shares(admin, org_tree["nlp/olmo"], 5)
    gone = org_tree["nlp/tulu"]
    do_set_shares(admin, gone, 2)
    do_archive_budget(gone, actor=admin)
    # When staff open the share changes
    listing = _client(admin).get(reverse("admin:budgets_sharechange_changelist"))
    # Then the filter lists the live budgets with changes, by path in tree order
    assert _budget_filter(listing).lookup_choices == [
        (org_tree["nlp/olmo"].pk, "nlp/olmo"),
        (org_tree["vision/sam"].pk, "vision/sam"),
    ]
    # and the archived budget's changes are one filter away
    archived = _client(admin).get(reverse("admin:budgets_sharechange_changelist"), {"budget_state": "archived"})
    assert {c.budget_id for c in archived.context["cl"].result_list} == {gone.pk}
    live = _client(admin).get(reverse("admin:budgets_sharechange_changelist"), {"budget_state": "live"})
    assert {c.budget_id for c in live.context["cl"].result_list} == {org_tree["nlp/olmo"].pk, org_tree["vision/sam"].pk}


@pytest.mark.parametrize("term", ["nlp/olmo", "NLP/OLMO", "olmo"])
def test_share_changes_are_found_by_budget_path(admin: User, org_tree: dict[str, Budget], term: str) -> None:
    """left39: the search box matched a budget's name only, so the path the admin shows
    (``nlp/olmo``) found nothing."""
    do_set_shares(admin, org_tree["nlp/olmo"], 5)
    do_set_shares(admin, org_tree["vision/sam"], 3)
    listing = _client(admin).get(reverse("admin:budgets_sharechange_changelist"), {"q": term})
    assert [c.budget_id for c in listing.context["cl"].result_list] == [org_tree["nlp/olmo"].pk]


def test_the_share_changes_page_reads_the_same_queries_for_ten_budgets_as_for_two(
    admin: User, org_tree: dict[str, Budget]
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from budgets.services import do_create_budget

    client = _client(admin)
    url = reverse("admin:budgets_sharechange_changelist")
    do_set_shares(admin, org_tree["nlp/olmo"], 5)
    do_set_shares(admin, org_tree["vision/sam"], 3)
    client.get(url)
    with CaptureQueriesContext(connection) as two:
        client.get(url)
    for i in range(8):
        b = do_create_budget(name=f"t{i}", parent=org_tree["vision"])
        do_set_shares(admin, b, 2)
    client.get(url)
    with CaptureQueriesContext(connection) as ten:
        assert len(_budget_filter(client.get(url)).lookup_choices) == 10
    assert len(ten.captured_queries) == len(two.captured_queries)


def test_a_move_and_a_cap_change_in_the_admin_are_recorded(admin: User, org_tree: dict[str, Budget]) -> None:
    """try38: moving ``olmo`` from ``nlp`` to ``vision`` (both programs' entitlements change) and
    capping it were saved with no trace in the audit history, which recorded shares, holds and
    archives only; each is a ``ShareChange`` saying what changed, with the reason."""
    olmo = org_tree["nlp/olmo"]
    url = reverse("admin:budgets_budget_change", args=[olmo.pk])
    form = _change_form(
        olmo, parent=org_tree["vision"].pk, cap_gpu_hours="100", on_cap="hold", change_note="OLMo joins vision"
    )
    response = _client(admin).post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    changes = {c.kind: c for c in ShareChange.objects.all()}
    assert set(changes) == {"move", "cap"}
    assert changes["move"].note == "moved from nlp to vision: OLMo joins vision"
    assert changes["cap"].note == "cap none → 100 GPU-h / 30 d, then held: OLMo joins vision"
    assert changes["move"].actor_name == "admin" and changes["move"].budget_id == olmo.pk
    # Saving it again unchanged records nothing more.
    olmo.refresh_from_db()
    again = _change_form(olmo, cap_gpu_hours="100.00")
    assert _client(admin).post(url, again).status_code == 302
    assert ShareChange.objects.count() == 2


@pytest.mark.parametrize("term", ["nlp/olmo", "NLP/OLMO", "p/olm"])
def test_budgets_and_their_pickers_find_a_budget_by_its_path(
    admin: User, org_tree: dict[str, Budget], term: str
) -> None:
    """try40: the budget list's search box and the budget pickers (a membership's, a sub-budget's
    parent: the admin's autocomplete, which asks the budget list's search) matched names only, so
    the path every page and the pickers themselves show (``nlp/olmo``) found nothing."""
    client = _client(admin)
    olmo = org_tree["nlp/olmo"]
    listing = client.get(reverse("admin:budgets_budget_changelist"), {"q": term})
    assert [b.pk for b in listing.context["cl"].result_list] == [olmo.pk]
    picked = client.get(
        reverse("admin:autocomplete"),
        {"term": term, "app_label": "accounts", "model_name": "membership", "field_name": "budget"},
    )
    assert picked.status_code == 200
    assert [r["text"] for r in picked.json()["results"]] == ["nlp/olmo"]


def test_memberships_are_found_by_budget_path(admin: User, researcher: User, org_tree: dict[str, Budget]) -> None:
    """try40: the memberships' search matched the budget's name only (``olmo``), not its path."""
    listing = _client(admin).get(reverse("admin:accounts_membership_changelist"), {"q": "nlp/olmo"})
    found = {(m.user.username, m.budget_id) for m in listing.context["cl"].result_list}
    assert found == {(m.user.username, m.budget_id) for m in researcher.memberships.filter(budget=org_tree["nlp/olmo"])}
    assert found


def test_the_audit_lists_what_changed_in_words_and_utc(admin: User, org_tree: dict[str, Budget]) -> None:
    """try41: the audit listed a hold as "hold | 1 | 1 | admin action" (old and new shares beside a
    change of no shares; "release hold" alike) and its time as "Dec. 6, 2026, 12:33 p.m.", where
    every other page writes "12:33:44 UTC". It now says what changed, at the instant pages use."""
    from fairway_cli.numbers import instant_text

    olmo = org_tree["nlp/olmo"]
    do_set_shares(admin, olmo, 3, note="push")
    do_set_hold(olmo, True, actor=admin, note="admin action")
    do_set_hold(olmo, False, actor=admin, note="admin action")
    listing = _client(admin).get(reverse("admin:budgets_sharechange_changelist")).content.decode()
    assert "shares 1 → 3" in listing and "hold on" in listing and "hold off" in listing
    for change in ShareChange.objects.all():
        assert instant_text(change.at) in listing
    assert "p.m." not in listing and "a.m." not in listing
    page = _client(admin).get(reverse("admin:budgets_budget_change", args=[olmo.pk])).content.decode()
    assert "shares 1 → 3" in page and "hold off" in page
