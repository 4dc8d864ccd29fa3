"""brk51b: a workload named with markup and script, on its page in a real browser (Playwright,
Debian's Chromium): nothing runs, the cancel button's confirmation quotes the name as typed, and
dismissing it cancels nothing. Skipped when ``/usr/bin/chromium`` or ``playwright`` is missing."""

from __future__ import annotations

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in

P = "</script><script>alert(1)</script>\"'><img src=x onerror=alert(2)>');alert(3);//"


def test_a_hostile_workload_name_runs_nothing_on_its_page(new_page, researcher, submit_kwargs, cluster):
    work = do_submit_workload(researcher, **submit_kwargs(name=P))
    page = new_page()
    dialogs: list[tuple[str, str]] = []

    def answer(dialog) -> None:  # type: ignore[no-untyped-def]
        dialogs.append((dialog.type, dialog.message))
        dialog.dismiss()

    page.on("dialog", answer)
    log_in(page, "researcher")
    for url in (f"/workloads/{work.pk}/", "/workloads/", "/", f"/submit/?again={work.pk}"):
        page.goto(url)
        page.wait_for_load_state()
    page.goto(f"/workloads/{work.pk}/")
    assert P in page.inner_text("body")
    page.locator(f"form[action='/workloads/{work.pk}/cancel/'] button").first.click()
    page.wait_for_timeout(300)
    assert dialogs == [("confirm", f"Cancel {P}?")]
    assert Workload.objects.get(pk=work.pk).state == Workload.State.PENDING
