"""lim42: a staff member's rights over other people's work come from Django permissions, as host
actions do (brk42): cancelling needs ``scheduler.change_workload``, reading logs and env values
``scheduler.view_workload`` (or change). A view-only staff member could cancel anyone's work."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from accounts.models import User
from accounts.services import accessible_budget_ids
from scheduler.models import Workload
from scheduler.services import CancelError, can_cancel, do_cancel_workload, do_submit_workload, may_read_private
from tests.cli.inprocess import run_cli


def _staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username=username, password="x", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="scheduler", codename=codename))
    return User.objects.get(pk=user.pk)  # no permission cache


@pytest.fixture
def work(researcher, submit_kwargs) -> Workload:
    return do_submit_workload(
        researcher, **submit_kwargs(env={"A": "1", "TOKEN": {"value": "s3cret", "secret": False}})
    )


def test_view_only_staff_may_read_but_not_cancel(work):
    viewer = _staff("viewer", "view_workload")
    assert may_read_private(viewer, work, set())
    assert not can_cancel(viewer, work)
    with pytest.raises(CancelError) as refused:
        do_cancel_workload(viewer, work)
    assert refused.value.status == 403
    work.refresh_from_db()
    assert work.state == Workload.State.PENDING


def test_staff_without_permissions_may_neither(work):
    bare = _staff("bare")
    assert not may_read_private(bare, work, set())
    assert not can_cancel(bare, work)


def test_staff_with_change_workload_may_both(work):
    operator = _staff("operator", "change_workload")
    assert may_read_private(operator, work, set())
    assert can_cancel(operator, work)
    do_cancel_workload(operator, work)
    work.refresh_from_db()
    assert work.state == Workload.State.CANCELED


def test_owners_members_and_managers_keep_their_rights_as_staff_without_permissions(
    researcher, teammate, manager, work
):
    for user in (researcher, teammate, manager):
        User.objects.filter(pk=user.pk).update(is_staff=True)
        user.refresh_from_db()
    assert may_read_private(researcher, work, set()) and can_cancel(researcher, work)
    assert may_read_private(teammate, work, accessible_budget_ids(teammate))
    assert can_cancel(manager, work)


def test_the_api_masks_env_refuses_logs_and_cancel_to_bare_staff(work, api_client_for):
    bare = api_client_for(_staff("bare"))
    detail = bare.get(f"/api/v1/workloads/{work.pk}/").json()
    assert detail["can_cancel"] is False
    assert "s3cret" not in str(detail)
    logs = bare.get(f"/api/v1/workloads/{work.pk}/logs/")
    assert logs.status_code == 403 and "view_workload" in logs.json()["detail"]
    cancel = bare.post(f"/api/v1/workloads/{work.pk}/cancel/")
    assert cancel.status_code == 403 and "change_workload" in cancel.json()["detail"]
    viewer = api_client_for(_staff("viewer", "view_workload"))
    shown = viewer.get(f"/api/v1/workloads/{work.pk}/").json()
    assert "s3cret" in str(shown) and shown["can_cancel"] is False
    assert viewer.post(f"/api/v1/workloads/{work.pk}/cancel/").status_code == 403


def test_the_page_and_the_cli_refuse_alike(work, monkeypatch):
    viewer = _staff("viewer", "view_workload")
    browser = Client()
    browser.force_login(viewer)
    page = browser.get(f"/workloads/{work.pk}/")
    assert page.status_code == 200 and page.context["can_cancel"] is False
    browser.post(f"/workloads/{work.pk}/cancel/")
    work.refresh_from_db()
    assert work.state == Workload.State.PENDING
    err = run_cli(monkeypatch, viewer, "cancel", str(work.pk), expect=1)
    assert "change_workload" in err
    bare = _staff("bare")
    assert "view_workload" in run_cli(monkeypatch, bare, "logs", str(work.pk), expect=1)
    work.refresh_from_db()
    assert work.state == Workload.State.PENDING


PERMS = ("view_workload", "change_workload")


@hsettings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    staff=st.booleans(),
    superuser=st.booleans(),
    perms=st.sets(st.sampled_from(PERMS)),
    owner=st.booleans(),
    member=st.booleans(),
)
def test_the_rule_against_a_readable_table(work, researcher, staff, superuser, perms, owner, member):
    """Oracle: the rule written out as a table of who may do what (docs/DESIGN.md)."""
    if owner:
        actor = researcher
    else:
        User.objects.filter(username="actor").delete()
        actor = User.objects.create_user(username="actor", password="x", is_staff=staff, is_superuser=superuser)
        for codename in perms:
            actor.user_permissions.add(Permission.objects.get(content_type__app_label="scheduler", codename=codename))
        actor = User.objects.get(pk=actor.pk)
    accessible = {work.budget_id} if member else set()
    if owner:
        read = cancel = True
    else:
        read = superuser or member or (staff and bool(perms))
        cancel = superuser or (staff and "change_workload" in perms)
    assert may_read_private(actor, work, accessible) is read
    assert can_cancel(actor, work) is cancel
