"""try63: a workload's CPU and memory requests read one way on every surface. Its page said
"4 CPUs, 8G per host" where ``fairway show`` said "4 CPUs, 8G memory per host", and a 1.5 GiB
request read "1536M" on the page and "1.5G" in the CLI (two size rules). One statement now,
``scheduler.reports.requests_text``: the page prints it, the API sends it (``requests_text``) and
``fairway show`` prints the server's words. The page in a real browser (Playwright driving Debian's
Chromium); skipped without ``/usr/bin/chromium`` or Playwright."""

from __future__ import annotations

from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.cli.inprocess import run_cli

G = 1 << 30
SAID = "4 CPUs, 1536M memory, 1G /dev/shm per host"


def _workload(researcher, submit_kwargs):
    return do_submit_workload(
        researcher, **submit_kwargs(gpu_count=1, cpus=4, memory_bytes=3 * G // 2, shared_memory_bytes=G)
    )


def test_the_page_says_the_requests_as_the_cli_and_the_api(new_page, researcher, submit_kwargs):
    w = _workload(researcher, submit_kwargs)
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{w.pk}/")
    assert page.locator("#requests").inner_text().strip() == SAID


def test_the_api_and_fairway_show_say_the_same(researcher, researcher_client, submit_kwargs, monkeypatch):
    w = _workload(researcher, submit_kwargs)
    assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["requests_text"] == SAID
    assert f"resources:       {SAID}\n" in run_cli(monkeypatch, researcher, "show", str(w.pk))


def test_requests_not_given_read_as_the_per_gpu_share(researcher, researcher_client, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    said = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["requests_text"]
    assert said == "per-GPU share of CPUs, per-GPU share of memory per host"
