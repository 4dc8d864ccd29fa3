"""try50: a new researcher's day by the README, on the web pages; each test names what it met."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler import lifecycle
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


@pytest.fixture
def browser(researcher, cluster) -> Client:
    c = Client()
    c.force_login(researcher)
    return c


def _running(researcher, cluster, submit_kwargs, **overrides):
    w = do_submit_workload(researcher, **submit_kwargs(**overrides))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    return w, attempt


def _said(page: str) -> str:
    start = page.index("Stop issued for")
    return page[start : page.index("<", start)]


def test_the_pages_cancel_says_released_once_as_the_cli(browser, researcher, cluster, submit_kwargs):
    """try50: the page said "it ends canceled once its GPUs are released; it is charged until its
    GPUs are released." (the CLI's twice-said release was fixed in try41, the page's was not)."""
    w, _ = _running(researcher, cluster, submit_kwargs, gpu_count=1)
    said = _said(browser.post(f"/workloads/{w.pk}/cancel/", follow=True).content.decode())
    assert said.count("released") == 1, said
    assert said.endswith("it ends canceled once its GPUs are released (charged until then)."), said


def test_the_pages_cancel_of_unfunded_work_says_not_charged_as_the_api(
    browser, researcher, cluster, submit_kwargs, monkeypatch
):
    """An attempt its budget's cap made unfunded is allocated but not charged: the page said "it is
    charged until its GPUs are released" (it read ``allocated`` alone), the API's ``stop`` and the
    CLI "unfunded: not charged". One rule now (``Attempt.charged_until_release``)."""
    w, attempt = _running(researcher, cluster, submit_kwargs, gpu_count=1)
    Attempt.objects.filter(pk=attempt.pk).update(unfunded=True)
    said = _said(browser.post(f"/workloads/{w.pk}/cancel/", follow=True).content.decode())
    assert said.endswith("(unfunded: not charged)."), said
    w2, attempt2 = _running(researcher, cluster, submit_kwargs, gpu_count=1)
    Attempt.objects.filter(pk=attempt2.pk).update(unfunded=True)
    assert "(unfunded: not charged)" in run_cli(monkeypatch, researcher, "cancel", str(w2.pk))
