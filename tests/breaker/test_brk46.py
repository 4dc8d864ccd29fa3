"""brk46: breaking the update of a pending workload (upd44; docs/jobs.md, "Changing a pending
workload")."""

from __future__ import annotations

from django.utils import timezone

from accounts.services import do_add_membership
from scheduler.models import ArrayGroup, Attempt, Workload, WorkloadEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


def test_a_group_budget_move_refused_for_one_member_changes_no_member(
    researcher, researcher_client, org_tree, submit_kwargs
) -> None:
    """A group's budget move refused ``budget_charged`` for a member that has run (requeued, pending
    again) left the members before it moved: a 409 after a partial change."""
    do_add_membership(researcher, org_tree["nlp/tulu"])
    first = do_submit_workload(researcher, **submit_kwargs(array="0-2", gpu_count=1))
    group = ArrayGroup.objects.get(pk=first.group_id)
    members = list(Workload.objects.filter(group=group).order_by("pk"))
    run_tick(first.cluster_id)
    ran = members[1]  # the second member ran and was requeued: its attempt is charged to nlp/olmo
    now = timezone.now()
    Attempt.objects.filter(workload=ran).update(started_at=now, ended_at=now, end_reason="lost")
    Attempt.objects.filter(workload__in=[members[0], members[2]]).delete()
    Workload.objects.filter(group=group).update(state=Workload.State.PENDING)

    r = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"budget": "nlp/tulu"}, format="json")

    assert (r.status_code, r.json()["code"]) == (409, "budget_charged"), r.json()
    assert set(Workload.objects.filter(group=group).values_list("budget__name", flat=True)) == {"olmo"}
    assert not WorkloadEvent.objects.filter(workload__group=group, kind="updated").exists()
    # the other fields still change for every member
    r = researcher_client.patch(f"/api/v1/groups/{group.pk}/", {"gpu_count": 2}, format="json")
    assert (r.status_code, r.json()["updated"]) == (200, 3), r.json()


def _form_values(html: str) -> dict[str, str]:
    """The edit form's inputs as the browser posts them (name → value)."""
    import re

    form = html[html.index('id="edit-form"') :]
    form = form[: form.index("</form>")]
    values = {}
    for tag in re.findall(r"<input[^>]*>", form):
        name = re.search(r'name="([^"]*)"', tag)
        value = re.search(r'value="([^"]*)"', tag)
        if name:
            values[name.group(1)] = value.group(1) if value else ""
    return values


def test_a_stale_edit_form_does_not_undo_a_change_made_since_it_was_shown(
    client, researcher, manager, submit_kwargs, monkeypatch
) -> None:
    """The page's form posts every field: one shown before another update committed wrote its old
    values back over that update (a lost update: the manager's 4 → 8 GPUs silently undone)."""
    from scheduler import services
    from scheduler.services import do_update_workload
    from tests.conftest import PASSWORD

    monkeypatch.setattr(services, "request_tick_on_commit", lambda cluster_id: None)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=7200))
    client.login(username="researcher", password=PASSWORD)
    shown = _form_values(client.get(f"/workloads/{w.pk}/").content.decode())
    assert shown["gpu_count"] == "4"
    do_update_workload(manager, Workload.objects.get(pk=w.pk), {"gpu_count": 8})

    r = client.post(f"/workloads/{w.pk}/update/", {**shown, "min_runtime": "30m"})

    row = Workload.objects.get(pk=w.pk)
    assert (row.gpu_count, row.min_runtime_s, row.spec_version) == (8, 7200, 1)
    assert r.status_code == 409
    page = r.content.decode()
    assert "changed since this page was shown" in page
    assert _form_values(page)["gpu_count"] == "8"  # the form shows the request as it is now
    # posted again from the page as it is now, the change applies
    r = client.post(f"/workloads/{w.pk}/update/", {**_form_values(page), "min_runtime": "30m"})
    assert r.status_code == 302
    row = Workload.objects.get(pk=w.pk)
    assert (row.gpu_count, row.min_runtime_s, row.spec_version) == (8, 1800, 2)


def test_a_stale_edit_form_in_a_browser_is_refused_and_shows_the_request_as_it_is(
    new_page, researcher, manager, submit_kwargs, monkeypatch
) -> None:
    from scheduler import services
    from scheduler.services import do_update_workload
    from tests.browser import log_in

    monkeypatch.setattr(services, "request_tick_on_commit", lambda cluster_id: None)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=7200))
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{w.pk}/")
    page.click("#edit-workload summary")
    do_update_workload(manager, Workload.objects.get(pk=w.pk), {"gpu_count": 8})  # meanwhile
    page.fill("#edit_min_runtime", "30m")
    page.click("#edit-save")
    page.wait_for_selector("text=changed since this page was shown")
    page.click("#edit-workload summary")
    shown = page.input_value("#edit_gpu_count")
    page.fill("#edit_min_runtime", "30m")
    page.click("#edit-save")
    page.wait_for_url(f"/workloads/{w.pk}/")
    page.wait_for_selector("text=it keeps its place")

    assert shown == "8"
    row = Workload.objects.get(pk=w.pk)
    assert (row.gpu_count, row.min_runtime_s, row.spec_version) == (8, 1800, 2)


def test_an_estimate_move_of_the_old_request_is_not_told(
    monkeypatch, researcher, outsider, cluster, org_tree, submit_kwargs
) -> None:
    """An estimates run read the workload's stored estimate and simulated its old request; an update
    committed before its write. The write is skipped (the update's "no estimate yet" stays), but its
    ``estimate_moved`` event and notification, judged on the old request, were still made."""
    from datetime import timedelta

    import scheduler.estimates as estimates
    import scheduler.sim.estimate as sim_estimate
    from scheduler.services import do_update_workload
    from tests.api.fair_share_setup import olmo_waits_for_visions_protection

    waiting = olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs)
    real = sim_estimate.forward_found
    told: list[int] = []
    real_notify = estimates._notify_moved

    def forward_then_update(*args, **kwargs):
        found = real(*args, **kwargs)
        do_update_workload(researcher, Workload.objects.get(pk=waiting.pk), {"gpu_count": 4})
        return found

    def notify(moved):
        told.extend(w.pk for w, _old, _new in moved)
        return real_notify(moved)

    monkeypatch.setattr(sim_estimate, "forward_found", forward_then_update)
    monkeypatch.setattr(estimates, "_notify_moved", notify)
    far = timezone.now() + timedelta(days=3)  # the stored estimate the run moves by more than an hour
    Workload.objects.filter(pk=waiting.pk).update(estimated_start=far)
    estimates.store_estimates(cluster.pk, timezone.now())

    row = Workload.objects.get(pk=waiting.pk)
    assert (row.gpu_count, row.estimated_start) == (4, None)
    assert waiting.pk not in told
    assert not WorkloadEvent.objects.filter(workload=waiting, kind="estimate_moved").exists()


def test_two_updates_at_once_both_apply_and_are_checked_together(researcher, manager, submit_kwargs, monkeypatch):
    """Update B read the workload, then update A committed before B's lock: B reads it again and
    checks the merged request (A's wall-time limit of 1h against B's minimum runtime of 2h: refused),
    while B's change of another field applies on A's, each bumping the version once."""
    from scheduler import services
    from scheduler.services import SubmissionError, do_update_workload

    monkeypatch.setattr(services, "request_tick_on_commit", lambda cluster_id: None)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=1800))
    real = services.do_submit_workload
    once = []

    def then_a(*args, **kwargs):
        checked = real(*args, **kwargs)
        if not once:
            once.append(1)
            do_update_workload(manager, Workload.objects.get(pk=w.pk), {"max_runtime_s": 3600})
        return checked

    monkeypatch.setattr(services, "do_submit_workload", then_a)
    done = do_update_workload(researcher, Workload.objects.get(pk=w.pk), {"gpu_count": 2})
    assert (done.gpu_count, done.max_runtime_s, done.spec_version) == (2, 3600, 2)

    monkeypatch.setattr(services, "do_submit_workload", real)
    do_update_workload(researcher, Workload.objects.get(pk=w.pk), {"max_runtime_s": None})
    once.clear()

    def then_limit(*args, **kwargs):
        checked = real(*args, **kwargs)
        if not once:
            once.append(1)
            do_update_workload(manager, Workload.objects.get(pk=w.pk), {"max_runtime_s": 3600 * 2 - 1})
        return checked

    monkeypatch.setattr(services, "do_submit_workload", then_limit)
    try:
        do_update_workload(researcher, Workload.objects.get(pk=w.pk), {"min_runtime_s": 7200})
    except SubmissionError as exc:
        assert exc.code == "max_runtime_below_min_runtime"
    else:
        raise AssertionError("a minimum runtime above the limit committed meanwhile was accepted")
    row = Workload.objects.get(pk=w.pk)
    assert (row.min_runtime_s, row.max_runtime_s, row.spec_version) == (1800, 7199, 4)


def test_an_estimates_run_writes_nothing_on_a_workload_its_simulation_did_not_read(
    monkeypatch, researcher, outsider, cluster, org_tree, submit_kwargs
) -> None:
    """A workload submitted between the run's snapshot and its read of the pending rows was written
    "no start found within a window" (``no_start_found``): an answer about a request the simulation
    never read (``_as_read`` had no version to hold the write to)."""
    import scheduler.estimates as estimates
    import scheduler.snapshot as snapshot
    from tests.api.fair_share_setup import olmo_waits_for_visions_protection

    olmo_waits_for_visions_protection(researcher, outsider, cluster, org_tree, submit_kwargs)
    real = snapshot.load_snapshot
    late = []

    def then_submit(*args, **kwargs):
        read = real(*args, **kwargs)
        late.append(do_submit_workload(researcher, **submit_kwargs(gpu_count=1)))
        return read

    monkeypatch.setattr(snapshot, "load_snapshot", then_submit)
    estimates.store_estimates(cluster.pk, timezone.now())

    row = Workload.objects.get(pk=late[0].pk)
    assert (row.estimated_start, row.no_start_found) == (None, False)
