"""brk56: faults a breaker found in the scheduled drains, idle GPU alerts and temporary shares."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler.models import Host, HostEvent
from scheduler.services import apply_due_drains, do_schedule_drain, do_set_host_state

# --- a drain never slows a drain now ----------------------------------------------------------


def test_a_scheduled_drain_applied_to_a_host_drained_now_by_hand_keeps_the_drain_now(admin, hosts):
    """A plain drain scheduled at 08:00, the host drained now by hand at 07:00: the tick's drain at
    08:00 turned the drain now into a plain drain (``drain_now`` False: protected attempts kept
    running), which no surface allows by hand ("not a way to slow it")."""
    host = hosts["a100-1"]
    at = timezone.now() + timedelta(hours=1)
    do_schedule_drain(admin, host, at, "PSU swap")
    # a drain now by hand cancels it now (left59); one drained now otherwise (a race) finds it moot
    Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINING, drain_now=True)
    assert apply_due_drains(host.cluster_id, at) == []
    host.refresh_from_db()
    assert (host.state, host.drain_now, host.drain_at) == (Host.State.DRAINING, True, None)
    moot = HostEvent.objects.filter(host=host).latest("id")
    assert (moot.kind, moot.data["why"]) == ("drain_unscheduled", "moot")


def test_a_drain_of_a_host_draining_now_changes_nothing(admin, hosts):
    """The API's and the admin's drain (``do_set_host_state``, idempotent) of a host drained now
    slowed it as well: a repeat there is a no-op, not a plain drain."""
    host = hosts["a100-1"]
    do_set_host_state(admin, host, Host.State.DRAINING, "smoke", drain_now=True)
    do_set_host_state(admin, host, Host.State.DRAINING, "again")
    host.refresh_from_db()
    assert (host.state, host.drain_now) == (Host.State.DRAINING, True)
    assert not HostEvent.objects.filter(host=host, kind="draining").exists()


@pytest.mark.parametrize(
    ("at", "words"),
    [("9999-12-31T23:00-05:00", "days ahead"), ("0001-01-01T00:30+01:00", "is past")],
)
def test_a_drain_time_past_the_calendar_in_utc_is_refused_not_a_500(admin_client_api, hosts, at, words):
    """A time whose offset takes it past year 9999 (or before year 1) in UTC: the API's ``drain/``
    (the page's and the admin's field alike) answered 500, an OverflowError writing it in UTC."""
    response = admin_client_api.post("/api/v1/hosts/a100-1/drain/", {"at": at}, format="json")
    assert response.status_code == 400, response.content[:300]
    assert response.json()["code"] == "invalid_at" and words in str(response.json())
    assert not Host.objects.filter(drain_at__isnull=False).exists()


# --- temporary shares: an admin's stale form, an explicit share equal to the boosted one ---------


def _admin_client(user):
    from django.test import Client

    from tests.conftest import PASSWORD

    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def _shares(budget) -> int:
    from budgets.models import Budget

    return Budget.objects.get(pk=budget.pk).shares


def _shown_form(client, budget) -> dict:
    """The budget's change form as the admin's page shows it now (its inputs and their values)."""
    import re

    from django.urls import reverse

    page = client.get(reverse("admin:budgets_budget_change", args=[budget.pk])).content.decode()
    from tests.services.test_share_audit import _change_form

    data = _change_form(budget)
    for name, value in re.findall(r'<input type="hidden" name="(initial-[a-z_]+)" value="([^"]*)"', page):
        data[name] = value
    return data


def test_a_stale_budget_form_saved_after_a_boost_started_does_not_end_it(admin, org_tree):
    """The page opened at 09:59 (shares 1), the boost (3) started at 10:00, the admin saves a new
    description at 10:01: the form's shares 1 read as an edit of the shares (3 → 1) and ended the
    boost at once. What the page showed is what the admin changed (the hidden initial value)."""
    from django.urls import reverse

    from budgets.models import ShareBoost
    from budgets.services import apply_due_boosts, do_schedule_boost

    olmo = org_tree["nlp/olmo"]
    client = _admin_client(admin)
    now = timezone.now()
    boost = do_schedule_boost(admin, olmo, 3, now + timedelta(days=1), now + timedelta(minutes=1))
    form = _shown_form(client, olmo)  # shares 1 shown
    assert form.get("initial-shares") == "1"
    assert apply_due_boosts(now + timedelta(minutes=1)) == 1 and _shares(olmo) == 3
    form["description"] = "ACL push"
    response = client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form)
    assert response.status_code == 302
    boost = ShareBoost.objects.get(pk=boost.pk)
    assert (boost.state, _shares(olmo)) == ("active", 3)


def test_an_explicit_share_equal_to_the_boosted_one_is_what_stays(admin, org_tree):
    """The page opened before the boost (shares 1), the admin raises the shares to 3 for good, the
    boost (3) started meanwhile: nothing changed, the boost stayed, and at its end the shares fell
    back to 1, losing the admin's edit. An explicit edit ends an active boost, equal or not."""
    from django.urls import reverse

    from budgets.models import ShareBoost
    from budgets.services import apply_due_boosts, do_schedule_boost

    olmo = org_tree["nlp/olmo"]
    client = _admin_client(admin)
    now = timezone.now()
    boost = do_schedule_boost(admin, olmo, 3, now + timedelta(days=1), now + timedelta(minutes=1))
    form = _shown_form(client, olmo)
    apply_due_boosts(now + timedelta(minutes=1))
    form["shares"] = 3
    response = client.post(reverse("admin:budgets_budget_change", args=[olmo.pk]), form)
    assert response.status_code == 302
    boost = ShareBoost.objects.get(pk=boost.pk)
    assert (boost.state, boost.base_shares) == ("ended", 3)
    apply_due_boosts(now + timedelta(days=2))
    assert _shares(olmo) == 3


def test_a_boost_deleted_as_the_clock_starts_it_is_not_deleted(admin, org_tree, monkeypatch):
    """The admin's delete of a scheduled boost read it not started, then the clock started it (the
    budget at 3, to return to 1 at its end), then the delete removed the row: nothing ever
    returned the budget to 1. The delete reads it again under the budget's lock and refuses."""
    from django.urls import reverse

    from budgets.admin import ShareBoostAdmin
    from budgets.models import ShareBoost
    from budgets.services import apply_due_boosts, do_schedule_boost

    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    boost = do_schedule_boost(admin, olmo, 3, now + timedelta(days=1), now + timedelta(minutes=1))
    checked = ShareBoostAdmin.has_delete_permission

    def then_the_clock(self, request, obj=None):  # the check passes, then the clock's start commits
        allowed = checked(self, request, obj)
        if obj is not None and request.method == "POST":
            apply_due_boosts(now + timedelta(minutes=1))
        return allowed

    monkeypatch.setattr(ShareBoostAdmin, "has_delete_permission", then_the_clock)
    response = _admin_client(admin).post(reverse("admin:budgets_shareboost_delete", args=[boost.pk]), {"post": "yes"})
    assert response.status_code == 403
    assert ShareBoost.objects.filter(pk=boost.pk).exists()  # (the start here rolled back with the request)
    apply_due_boosts(now + timedelta(minutes=1))
    assert _shares(olmo) == 3
    apply_due_boosts(now + timedelta(days=1))
    assert _shares(olmo) == 1  # returned at its end


def test_a_boost_deleted_before_the_clock_read_it_again_does_not_stop_the_clock(admin, org_tree, monkeypatch):
    """The clock listed a due boost, then its delete committed: ``_step_boost`` raised DoesNotExist
    and the sweep stopped there, the boosts after it left for the next sweep."""
    from budgets import services
    from budgets.models import ShareBoost
    from budgets.services import apply_due_boosts, do_schedule_boost

    now = timezone.now()
    gone = do_schedule_boost(admin, org_tree["nlp/olmo"], 3, now + timedelta(days=1), now + timedelta(minutes=1))
    sam = do_schedule_boost(admin, org_tree["vision/sam"], 4, now + timedelta(days=1), now + timedelta(minutes=2))
    step = services._step_boost

    def deleted_meanwhile(pk, at):
        if pk == gone.pk:
            real = ShareBoost.objects.select_for_update

            def select_for_update(*a, **k):  # the row's delete commits as the clock waits for the budget
                ShareBoost.objects.filter(pk=gone.pk).delete()
                return real(*a, **k)

            monkeypatch.setattr(ShareBoost.objects, "select_for_update", select_for_update)
            try:
                return step(pk, at)
            finally:
                monkeypatch.setattr(ShareBoost.objects, "select_for_update", real)
        return step(pk, at)

    monkeypatch.setattr(services, "_step_boost", deleted_meanwhile)
    assert apply_due_boosts(now + timedelta(minutes=2)) == 1
    assert ShareBoost.objects.get(pk=sam.pk).state == "active"


# --- states in any case: fairway hosts --state too ------------------------------------------------


def test_hosts_state_filter_takes_any_case_as_ls(monkeypatch, admin, hosts):
    """try55 made ``fairway ls --state RUNNING`` read any case; ``fairway hosts --state DRAINED``
    (``sinfo -t DRAINED``) still exited on the server's "No host state 'DRAINED'"."""
    from tests.cli.inprocess import run_cli

    do_set_host_state(admin, hosts["a100-1"], Host.State.CORDONED)
    out = run_cli(monkeypatch, admin, "hosts", "--state", "CORDONED")
    assert "a100-1" in out and "a100-2" not in out


# --- fairway cancel 3 8: an id given twice -------------------------------------------------------


def test_an_id_given_twice_is_acted_on_once(monkeypatch, researcher, submit_kwargs):
    """``fairway cancel 3 3`` (or ``3 #3``, ids pasted from two lists) canceled #3, then exited 1 on
    its own "already ended (canceled)"; ``release 3 3`` alike on "not held"; ``wait`` took each
    once already and ``scancel 3 3`` says nothing."""
    from scheduler.models import Workload
    from scheduler.services import do_submit_workload
    from tests.cli.inprocess import run_cli

    a = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    b = do_submit_workload(researcher, **submit_kwargs(name="w1"))
    assert run_cli(monkeypatch, researcher, "hold", str(b.pk), f"#{b.pk}").count("held") == 1
    assert run_cli(monkeypatch, researcher, "release", str(b.pk), str(b.pk)).count("released") == 1
    out = run_cli(monkeypatch, researcher, "cancel", str(a.pk), f"#{a.pk}", str(a.pk))
    assert out == f"#{a.pk} w0 canceled\n"
    assert Workload.objects.get(pk=a.pk).state == "canceled"


def test_an_in_past_the_furthest_time_names_the_time_it_asked_for(admin_client_api, hosts):
    """``{"in": "400d"}`` was refused naming 367 days from now ("Dec 8 2027 … is later"), a time
    nobody asked for: it names the time 400 days from now."""
    from fairway_cli.numbers import instant_text

    response = admin_client_api.post("/api/v1/hosts/a100-1/drain/", {"in": "400d"}, format="json")
    assert response.status_code == 400
    asked = instant_text(timezone.now() + timedelta(days=400), absolute=True)
    assert asked[:11] in response.json()["in"][0], response.json()
