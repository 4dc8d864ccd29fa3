"""admin47: a membership of an archived budget was added silently (the memberships admin, a user's
memberships inline, ``accounts.services.do_add_membership``), though the budget takes no new work:
it is refused with ``budgets.rules``' archived-budget words; an existing one still changes role."""

from __future__ import annotations

import html

import pytest
from django.test import Client

from accounts.models import Membership
from accounts.services import AccountError, do_add_membership
from budgets.services import do_archive_budget

WORDS = "Budget vision/sam is archived and takes no new work."


def _admin_client(admin) -> Client:
    client = Client()
    client.force_login(admin)
    return client


def test_the_memberships_admin_refuses_an_archived_budget(admin, researcher, org_tree):
    sam = org_tree["vision/sam"]
    do_archive_budget(sam)
    response = _admin_client(admin).post(
        "/admin/accounts/membership/add/", {"user": researcher.pk, "budget": sam.pk, "role": "member"}
    )
    assert response.status_code == 200  # the form again, with the refusal
    assert WORDS in html.unescape(response.content.decode())
    assert not Membership.objects.filter(user=researcher, budget=sam).exists()


def test_the_users_memberships_inline_refuses_an_archived_budget(admin, researcher, org_tree):
    sam = org_tree["vision/sam"]
    do_archive_budget(sam)
    client = _admin_client(admin)
    url = f"/admin/accounts/user/{researcher.pk}/change/"
    form = client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k not in ("groups", "user_permissions")}
    data.update({"date_joined_0": "2026-01-01", "date_joined_1": "00:00:00", "last_login_0": "", "last_login_1": ""})
    [existing] = Membership.objects.filter(user=researcher)
    data.update(
        {
            "memberships-TOTAL_FORMS": "2",
            "memberships-INITIAL_FORMS": "1",
            "memberships-0-id": existing.pk,
            "memberships-0-user": researcher.pk,
            "memberships-0-budget": existing.budget_id,
            "memberships-0-role": existing.role,
            "memberships-1-user": researcher.pk,
            "memberships-1-budget": sam.pk,
            "memberships-1-role": "member",
            "oidc_identities-TOTAL_FORMS": "0",
            "oidc_identities-INITIAL_FORMS": "0",
        }
    )
    response = client.post(url, data)
    assert response.status_code == 200, response.status_code
    assert WORDS in html.unescape(response.content.decode())
    assert not Membership.objects.filter(user=researcher, budget=sam).exists()


def test_the_service_refuses_a_new_member_but_changes_a_members_role(researcher, outsider, org_tree):
    sam = org_tree["vision/sam"]
    do_archive_budget(sam)
    with pytest.raises(AccountError) as refused:
        do_add_membership(researcher, sam)
    assert (refused.value.code, refused.value.field, refused.value.message) == ("budget_archived", "budget", WORDS)
    assert not Membership.objects.filter(user=researcher, budget=sam).exists()
    # outsider was a member before the archive: a role change adds no one
    assert do_add_membership(outsider, sam, "manager").role == "manager"
