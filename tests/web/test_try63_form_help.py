"""try63: the submit form and a pending workload's "Change this pending workload" form explain
the same fields in the same words. They read "Per host. Empty: per-GPU share." against "empty:
the host's per-GPU share", "Size of /dev/shm, e.g. 8G." against "e.g. 8G; empty: the runtime's",
"Seconds or a duration like 2h30m" against "e.g. 2h, 30m" (one statement each in web/forms.py).
In a real browser (Playwright driving Debian's Chromium); skipped without ``/usr/bin/chromium``
or Playwright."""

from __future__ import annotations

from scheduler.services import do_submit_workload
from tests.browser import log_in

FIELDS = ("min_runtime", "max_runtime", "cpus", "memory", "shared_memory")


def _help(page, prefix: str) -> dict[str, str]:
    return {f: page.locator(f"#{prefix}{f}_helptext").text_content().strip() for f in FIELDS}


def test_the_change_form_explains_its_fields_as_the_submit_form(new_page, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, hold=True))
    page = new_page()
    log_in(page, "researcher")
    page.goto("/submit/")
    submit = _help(page, "id_")
    page.goto(f"/workloads/{w.pk}/")
    page.locator("#edit_cpus").wait_for(state="attached")
    change = _help(page, "edit_")

    # the submit form adds the quote's ladder and the longest minimum runtime to its own
    assert submit["min_runtime"].startswith(change["min_runtime"]), (submit, change)
    assert {f: submit[f] for f in FIELDS[1:]} == {f: change[f] for f in FIELDS[1:]}, (submit, change)
