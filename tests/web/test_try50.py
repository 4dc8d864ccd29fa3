"""try50: a new researcher's day by the README, on the web pages; each test names what it met."""

from __future__ import annotations

from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.cli.inprocess import run_cli


def _said(page: str) -> str:
    start = page.index("Stop issued for")
    return page[start : page.index("<", start)]


def test_the_pages_cancel_says_released_once_as_the_cli(start_running, browser):
    """try50: the page said "it ends canceled once its GPUs are released; it is charged until its
    GPUs are released." (the CLI's twice-said release was fixed in try41, the page's was not)."""
    w, _ = start_running(gpu_count=1)
    said = _said(browser.post(f"/workloads/{w.pk}/cancel/", follow=True).content.decode())
    assert said.count("released") == 1, said
    assert said.endswith("it ends canceled once its GPUs are released (charged until then)."), said


def test_the_pages_cancel_of_unfunded_work_says_not_charged_as_the_api(start_running, browser, researcher, monkeypatch):
    """An attempt its budget's cap made unfunded is allocated but not charged: the page said "it is
    charged until its GPUs are released" (it read ``allocated`` alone), the API's ``stop`` and the
    CLI "unfunded: not charged". One rule now (``Attempt.charged_until_release``)."""
    w, attempt = start_running(gpu_count=1)
    Attempt.objects.filter(pk=attempt.pk).update(unfunded=True)
    said = _said(browser.post(f"/workloads/{w.pk}/cancel/", follow=True).content.decode())
    assert said.endswith("(unfunded: not charged)."), said
    w2, attempt2 = start_running(gpu_count=1)
    Attempt.objects.filter(pk=attempt2.pk).update(unfunded=True)
    assert "(unfunded: not charged)" in run_cli(monkeypatch, researcher, "cancel", str(w2.pk))


def test_the_tokens_page_shows_a_cli_login_that_works_when_copied(new_page, live_server, researcher):
    """try50: the new token's hint read ``fairway --server URL login --token 1192c23546b…``: copied,
    the ellipsis is no token ("holds characters no API token has"), and a token on the command line
    is one README tells people not to type (the process list). It shows ``login --token -``, which
    reads the token from the prompt or a file, and the whole token stays in its own box."""
    page = new_page()
    log_in(page, "researcher")
    page.goto("/tokens/")
    page.fill("input[name=name]", "laptop")
    page.get_by_role("button", name="Create token").click()
    page.wait_for_selector("#new-token")
    token = page.inner_text("#new-token").strip()
    hint = page.inner_text("#token-login")
    assert len(token) == 64 and "…" not in token
    assert f"fairway --server {live_server.url} login --token -, then paste it at the prompt" in hint, hint
    assert token[:11] not in hint and "…" not in hint.replace("… login --token - < token.txt", "")


def test_the_pages_update_that_changes_nothing_says_so(browser, researcher, submit_kwargs):
    """try50: "Save changes" with the values as they were said "Changed python (#16): it keeps its
    place in its budget's queue." though nothing changed (no event, no new version)."""
    from scheduler.models import Workload

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=3600))
    same = {"gpu_count": "4", "min_runtime": "1h", "retries": "0", "version": str(w.spec_version)}
    page = browser.post(f"/workloads/{w.pk}/update/", same, follow=True).content.decode()
    assert f"Nothing to change: #{w.pk} already asks that." in page and "Changed " not in page
    page = browser.post(f"/workloads/{w.pk}/update/", {**same, "gpu_count": "2"}, follow=True).content.decode()
    assert f"Changed pretrain (#{w.pk})" in page
    assert Workload.objects.get(pk=w.pk).gpu_count == 2
