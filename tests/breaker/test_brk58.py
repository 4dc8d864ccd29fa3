"""brk58: faults a breaker found in the newest features (scheduled drains, temporary shares,
efficiency, the CLI's several ids). Each test failed before its fix."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse

from scheduler.models import Host


def _messages(page: str) -> list[str]:
    listed = page.split('class="messagelist"', 1)[1].split("</ul>")[0]
    return [m.strip() for m in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)]


@pytest.mark.parametrize("at", ["9999-12-31T23:00-05:00", "0001-01-01T00:30+01:00"])
def test_the_hosts_admins_schedule_action_refuses_a_time_past_the_calendar(admin, hosts, at):
    """The hosts admin's "Schedule a drain" wrote its success words from the raw time before any
    host was tried: a time whose offset takes it past year 9999 (or before year 1) in UTC was a 500
    (OverflowError) where the API and the page say ``invalid_at`` (brk56 fixed those)."""
    client = Client()
    client.force_login(admin)
    pk = hosts["a100-1"].pk
    response = client.post(
        reverse("admin:scheduler_host_changelist"),
        {"action": "schedule_drain", "_selected_action": [pk], "confirm": "yes", "at": at},
        follow=True,
    )
    assert response.status_code == 200
    said = _messages(response.content.decode())
    assert len(said) == 1 and said[0].startswith("a100-1: A drain") and at in said[0], said
    assert Host.objects.get(pk=pk).drain_at is None


def test_seff_of_a_workload_canceled_before_it_started_says_it_never_ran(monkeypatch, researcher, submit_kwargs):
    """``fairway seff`` said "Attempts: none yet: nothing held" of a workload canceled before it
    started, as ``fairway logs`` did before try55: there never will be one (the API's words)."""
    from scheduler.services import do_cancel_workload, do_submit_workload
    from tests.cli.inprocess import run_cli

    w = do_submit_workload(researcher, **submit_kwargs())
    assert "This workload has no attempt yet." in run_cli(monkeypatch, researcher, "seff", str(w.pk))
    do_cancel_workload(researcher, w)
    out = run_cli(monkeypatch, researcher, "seff", str(w.pk))
    assert "yet" not in out and "This workload ended canceled without an attempt: it never ran." in out


def test_efficiency_of_an_attempt_on_an_offline_host_holds_to_its_last_heartbeat(
    researcher, researcher_client, submission, cluster, monkeypatch
):
    """4 H100s placed and started 200 s ago, the host silent for the last 140 s (offline, not yet
    lost): the workload's charge and elapsed stop at the last heartbeat on every surface (try37,
    docs/standing.md), while its efficiency (the API's ``efficiency``, ``fairway seff``/``show``)
    held the GPUs up to now (4 × 200 GPU-s, the rest "not measured"), and fell back to 4 × 60 when
    it ended lost."""
    from django.utils import timezone

    from scheduler.models import Attempt, Workload
    from scheduler.tick import run_tick

    wid = researcher_client.post(
        "/api/v1/workloads/", submission(gpu_model="H100", min_runtime="1h"), format="json"
    ).json()["id"]
    run_tick(cluster.pk)
    now = timezone.now().replace(microsecond=0)
    began = now - timedelta(seconds=200)
    Attempt.objects.filter(workload_id=wid).update(placed_at=began, started_at=began)
    Workload.objects.filter(pk=wid).update(state=Workload.State.RUNNING)
    Host.objects.filter(name="h100-1").update(state=Host.State.OFFLINE, last_heartbeat=now - timedelta(seconds=140))
    detail = researcher_client.get(f"/api/v1/workloads/{wid}/").json()
    assert detail["accounting"]["charged_gpu_hours"] == round(4 * 60 / 3600, 4)
    assert detail["efficiency"]["gpu_hours"] == round(4 * 60 / 3600, 4)
    assert detail["attempts"][0]["efficiency"]["gpu_hours"] == round(4 * 60 / 3600, 4)


def test_a_temporary_share_until_the_calendars_last_second_is_no_500(admin, org_tree):
    """A leadership member schedules a temporary share "for ever": until 9999-12-31 23:59:59.5.
    The admin's add answered 500 (an OverflowError: every instant is shown rounded up to the
    second, and there is no second after it); its list and the budgets page alike."""
    from budgets.models import ShareBoost

    client = Client()
    client.force_login(admin)
    olmo = org_tree["nlp/olmo"]
    form = {"budget": olmo.pk, "shares": 3, "starts_at_0": "", "starts_at_1": "", "note": "for ever"}
    form.update({"ends_at_0": "9999-12-31", "ends_at_1": "23:59:59.5"})
    response = client.post(reverse("admin:budgets_shareboost_add"), form)
    # refused since left59 (at most 366 days ahead), its words naming the calendar's last second
    assert response.status_code == 200, response.content[:500]
    assert "ends at most 366 days ahead: Dec 31 9999 23:59:59 UTC is later" in response.content.decode()
    assert not ShareBoost.objects.exists()


def test_a_temporary_share_of_the_root_budget_is_refused(admin, org_tree):
    """The organisation's (the root's) shares count for nothing: ``s(root) = 1`` whatever they are
    (DESIGN.md §1). A temporary share of it was scheduled, applied and shown ("share 3 until …")
    while changing no one's entitlement, as an archived budget's would (refused since boost55)."""
    from django.utils import timezone

    from budgets.models import ShareBoost
    from budgets.services import BudgetError, boost_problem, do_schedule_boost

    root = org_tree["org"]
    until = timezone.now() + timedelta(days=1)
    with pytest.raises(BudgetError) as refused:
        do_schedule_boost(admin, root, 3, until)
    assert refused.value.code == "budget_root" and "org" in refused.value.message
    assert not ShareBoost.objects.exists()
    assert boost_problem(org_tree["nlp"], 3, None, until) is None  # its children's shares do count


@pytest.mark.parametrize("verb", ["cordon", "resume", "cancel-drain"])
def test_the_clusters_page_refuses_a_time_with_an_action_it_does_not_schedule(admin, hosts, verb):
    """The clusters page's row is one form: its time field and every action's button. A time typed
    and Enter pressed submits the first button, Cordon: the host was cordoned now, the time dropped
    unsaid (Cordon or Resume clicked with a time alike). A time goes with Drain or Drain now only,
    as the API (``unknown_field``) and ``fairway hosts`` (``--at``) refuse it; nothing changes."""
    from django.utils import timezone

    from scheduler.models import HostEvent
    from scheduler.services import do_schedule_drain, do_set_host_state

    host = hosts["a100-1"]
    if verb == "resume":
        do_set_host_state(admin, host, Host.State.CORDONED)
    if verb == "cancel-drain":
        do_schedule_drain(admin, host, timezone.now() + timedelta(hours=2))
    before = (Host.objects.get(pk=host.pk).state, Host.objects.get(pk=host.pk).drain_at, HostEvent.objects.count())
    client = Client()
    client.force_login(admin)
    at = (timezone.now() + timedelta(hours=5)).strftime("%Y-%m-%dT%H:%MZ")
    response = client.post(f"/hosts/a100-1/{verb}/", {"at": at, "reason": "BIOS"}, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert "a time schedules a drain or a drain now" in page.lower(), page[:2000]
    host = Host.objects.get(pk=host.pk)
    assert (host.state, host.drain_at, HostEvent.objects.count()) == before


@pytest.mark.parametrize(
    "argv",
    [
        ["hosts", "a100-1", "--at", "2099-01-01T00:00Z"],  # "drain" forgotten: the host shown, nothing said
        ["hosts", "--in", "2h"],  # the list, nothing said
        ["hosts", "a100-1", "--in", "2h"],
    ],
)
def test_fairway_hosts_refuses_a_time_without_a_drain(monkeypatch, admin, hosts, argv):
    """``fairway hosts gpu-07 --at …`` (the action forgotten) showed the host and exited 0, the
    time dropped unsaid, where ``fairway hosts cordon gpu-07 --at …`` is a usage error: a time goes
    with drain or drain-now only."""
    from fairway_cli.cli import EXIT_USAGE
    from tests.cli.inprocess import run_cli

    err = run_cli(monkeypatch, admin, *argv, expect=EXIT_USAGE)
    assert "--at and --in schedule a drain or drain-now" in err
    assert Host.objects.get(name="a100-1").drain_at is None
