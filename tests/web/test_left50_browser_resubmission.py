"""left50: a resubmission's page and its original's, in a real browser: "resubmitted from #N" and
"resubmitted as #M" (``fairway_cli.words``, the words of every surface), each a link to the other."""

from __future__ import annotations

from fairway_cli.words import resubmitted_as_text, resubmitted_from_text
from scheduler.services import do_submit_workload
from tests.browser import log_in


def test_the_pages_word_and_link_the_origin_and_the_copy(new_page, live_server, researcher, submit_kwargs):
    old = do_submit_workload(researcher, **submit_kwargs())
    new = do_submit_workload(researcher, **submit_kwargs(), resubmitted_from=old)
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{new.pk}/")
    copy_facts = page.inner_text(".facts")
    page.click("#resubmitted-from")
    page.wait_for_url(f"{live_server.url}/workloads/{old.pk}/")
    old_facts = page.inner_text(".facts")
    page.click(f"#resubmissions a[href='/workloads/{new.pk}/']")
    page.wait_for_url(f"{live_server.url}/workloads/{new.pk}/")

    assert resubmitted_from_text(old.pk) in " ".join(copy_facts.split())
    assert resubmitted_as_text([new.pk]) in " ".join(old_facts.split())
