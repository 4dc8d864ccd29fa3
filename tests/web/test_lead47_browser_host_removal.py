"""lead47: the admin's "Remove from the cluster for good" confirmation offered "Yes, remove 1 host"
for a host still holding an attempt, saying only "active — not drained"; the removal was then
refused. The page says beforehand, in the refusal's own words (``services.removal_problem``), and
offers no removal when every host chosen would be refused. In a real browser (tests/browser.py)."""

from __future__ import annotations

from scheduler import lifecycle
from scheduler.models import Attempt, Host
from scheduler.services import do_submit_workload, removal_problem
from scheduler.tick import run_tick
from tests.browser import log_in


def _confirmation(new_page, pks):  # noqa: ANN001, ANN202 -- the fixtures' objects
    page = new_page()
    log_in(page, "admin")
    page.goto("/admin/scheduler/host/")
    for pk in pks:
        page.locator(f'input[name="_selected_action"][value="{pk}"]').check()
    page.select_option("select[name=action]", "remove_hosts")
    page.click("button[name=index]")
    return page


def test_the_removal_confirmation_says_which_host_would_be_refused(new_page, admin, researcher, cluster, submit_kwargs):
    busy = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, gpu_model="A100"))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=busy)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    host = attempt.host
    words = removal_problem(host)
    assert words is not None and "still holds 1 attempt(s)" in words

    page = _confirmation(new_page, [host.pk])
    item = page.locator("#content li", has_text=host.name).first.inner_text()
    assert words in item
    assert page.locator("input[type=submit][value^='Yes, remove']").count() == 0  # nothing it could remove
    assert page.get_by_text("No, take me back").is_visible()

    idle = Host.objects.filter(cluster=cluster).exclude(pk=host.pk).first()
    assert idle is not None and removal_problem(idle) is None
    page = _confirmation(new_page, [host.pk, idle.pk])
    assert words in page.locator("#content li", has_text=host.name).first.inner_text()
    assert "refused" not in page.locator("#content li", has_text=idle.name).first.inner_text()
    assert page.locator("input[type=submit]").get_attribute("value") == "Yes, remove 1 host"
    page.click("input[type=submit][value='Yes, remove 1 host']")
    idle.refresh_from_db()
    host.refresh_from_db()
    assert idle.removed_at is not None and host.removed_at is None
