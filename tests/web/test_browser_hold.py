"""Hold and release from the workload page, and "Submit held" on the form, in a real browser
(Playwright driving Debian's Chromium; docs/jobs.md "Hold and release"). Skipped when
``/usr/bin/chromium`` or the ``playwright`` package is missing."""

from __future__ import annotations

from django.test import Client

from scheduler.models import Workload
from scheduler.services import do_hold_workload, do_submit_workload
from tests.browser import log_in


def test_the_owner_holds_and_releases_from_the_page_and_submits_held(new_page, researcher, submit_kwargs, cluster):
    work = do_submit_workload(researcher, **submit_kwargs())
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{work.pk}/")
    assert page.locator("#release-button").count() == 0
    page.click("#hold-button")
    page.wait_for_selector("#release-button")
    why = page.inner_text("#why-pending")
    fact = page.inner_text("#hold-fact")
    held_page_hold_buttons = page.locator("#hold-button").count()
    events = page.inner_text("body")
    page.click("#release-button")
    page.wait_for_selector("#hold-button")
    released_why = page.inner_text("#why-pending")
    released_events = page.inner_text("body")

    page.goto("/submit/")
    page.fill("#id_command", "python train.py")
    page.fill("#id_gpu_count", "1")
    page.fill("#id_min_runtime", "1h")
    page.select_option("#id_gpu_model", "A100")
    page.check("#id_hold")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_selector("#why-pending")
    submitted_why = page.inner_text("#why-pending")
    submitted_buttons = (page.locator("#release-button").count(), page.locator("#hold-button").count())

    assert "Held by its owner (user hold) since" in why
    assert "Estimated start: Not given" in why
    assert fact.startswith("user hold by researcher since")
    assert held_page_hold_buttons == 0
    assert "held by its owner (user hold)" in events and "released (user hold)" in released_events
    assert "Held by its owner" not in released_why
    work.refresh_from_db()
    assert (work.hold, work.held_at) == ("", None)
    submitted = Workload.objects.exclude(pk=work.pk).get()
    assert (submitted.hold, submitted.held_by) == ("user", researcher)
    assert "Held by its owner (user hold)" in submitted_why
    assert submitted_buttons == (1, 0)


def test_an_admins_hold_shows_no_release_button_to_the_owner(researcher, admin, submit_kwargs):
    work = do_submit_workload(researcher, **submit_kwargs())
    do_hold_workload(admin, work)
    owner = Client()
    owner.force_login(researcher)
    page = owner.get(f"/workloads/{work.pk}/").content.decode()
    assert 'id="release-button"' not in page and 'id="hold-button"' not in page
    assert "admin hold" in page and "Held by an admin (admin hold)" in page
    refused = owner.post(f"/workloads/{work.pk}/release/", follow=True).content.decode()
    assert "only an admin" in refused
    assert Workload.objects.get(pk=work.pk).hold == "admin"
    listing = owner.get("/workloads/").content.decode()
    assert "held by an admin" in listing


def test_the_metrics_page_tells_a_workloads_own_hold_from_its_budgets(
    new_page, researcher, admin, submit_kwargs, cluster
):
    # brk47: "Why work waits" counted every `held` as "budget on hold", a workload's own included.
    do_submit_workload(researcher, **submit_kwargs(), hold=True)
    do_hold_workload(admin, do_submit_workload(researcher, **submit_kwargs()))
    page = new_page()
    log_in(page, "researcher")
    page.goto("/metrics/")
    waits = page.locator("h3", has_text="Why work waits").locator("xpath=..").inner_text()

    assert "budget on hold" not in waits
    assert "held by its owner held\t1" in waits and "held by an admin held\t1" in waits


def test_an_admin_replaces_a_user_hold_from_the_page(new_page, researcher, admin, submit_kwargs):
    # brk47: the page showed an admin no "Hold" on a workload its owner held, though an admin's
    # hold replaces a user hold (which its owner could otherwise release at any time).
    work = do_submit_workload(researcher, **submit_kwargs(), hold=True)
    page = new_page()
    log_in(page, "admin")
    page.goto(f"/workloads/{work.pk}/")
    page.click("#hold-button")
    page.wait_for_selector("#hold-fact:has-text('admin hold')")
    after = (page.locator("#hold-button").count(), page.locator("#release-button").count())

    assert after == (0, 1)
    work.refresh_from_db()
    assert (work.hold, work.held_by) == ("admin", admin)
    owner = Client()
    owner.force_login(researcher)
    page = owner.get(f"/workloads/{work.pk}/").content.decode()
    assert 'id="release-button"' not in page and 'id="hold-button"' not in page


def test_submitting_into_a_held_budget_says_so_at_once(new_page, researcher, org_tree, cluster):
    # tryout47b: the form's message said only "Submitted"; the page said "not considered yet"
    # until the next tick, though leadership's hold on budget nlp was known at submission.
    from budgets.models import Budget

    Budget.objects.filter(pk=org_tree["nlp"].pk).update(hold=True)
    page = new_page()
    log_in(page, "researcher")
    page.goto("/submit/")
    page.fill("#id_command", "python train.py")
    page.fill("#id_gpu_count", "1")
    page.fill("#id_min_runtime", "1h")
    page.select_option("#id_gpu_model", "A100")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_selector("#why-pending")
    notice = page.inner_text(".notice.success")
    why = page.inner_text("#why-pending")

    held = "Budget nlp is on hold: no new work of it starts until leadership releases it."
    w = Workload.objects.get()
    assert notice == f"Submitted {w.name} (#{w.pk}). {held}"
    assert held in why
