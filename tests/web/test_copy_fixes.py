"""Copy and small faults of issue 13, point 8: one test each."""

from __future__ import annotations

import math
import shlex

from django.conf import settings

from fairway_cli.numbers import instant_text
from scheduler import lifecycle
from scheduler.models import Attempt, Workload, WorkloadEvent
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli
from tests.web.test_pages import _form
from web.templatetags.fairway import gpu_time_text, shell_join


def test_cancelling_unallocated_work_never_says_charged(start_running, browser, researcher, monkeypatch):
    w, _ = start_running(min_runtime_s=0)
    page = browser.post(f"/workloads/{w.pk}/cancel/", follow=True).content.decode()
    assert "never charged" in page and "it is charged" not in page
    w2, _ = start_running(min_runtime_s=0, gpu_count=1)
    out = run_cli(monkeypatch, researcher, "cancel", str(w2.pk))
    assert "never charged" in out and "charged until" not in out


def test_charged_gpu_time_says_gpu_minutes_or_hours():
    assert gpu_time_text(240) == "4.0 GPU-min"
    assert gpu_time_text(1800) == "30 GPU-min"
    assert gpu_time_text(7200) == "2.00 GPU-h"
    assert gpu_time_text(0) == "0 GPU-h"


def test_events_name_attempt_numbers_and_the_preempting_workload(start_running, researcher, cluster, submit_kwargs):
    # Given unallocated work on every A100, allocated work preempts one of them.
    free = [start_running(min_runtime_s=0, gpu_count=8)[0] for _ in range(2)]
    taker = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    stop = WorkloadEvent.objects.get(workload__in=free, kind="preempted")
    assert stop.message == f"attempt 1 stopping: preempted for workload #{taker.pk}"
    assert stop.data["attempt_number"] == 1


def test_cancel_of_running_work_answers_the_stop_and_the_state_to_expect(start_running, researcher_client):
    w, _ = start_running()
    response = researcher_client.post(f"/api/v1/workloads/{w.pk}/cancel/")
    assert response.status_code == 202
    body = response.json()
    assert body["stop"]["reason"] == "canceled" and body["stop"]["ends_as"] == "canceled"
    assert body["stop"]["attempt"] == 1 and body["stop"]["charged_until_release"] is True


def test_already_final_is_grammatical(researcher, cluster, submit_kwargs, researcher_client):
    w = do_submit_workload(researcher, **submit_kwargs())
    assert researcher_client.post(f"/api/v1/workloads/{w.pk}/cancel/").status_code == 200
    again = researcher_client.post(f"/api/v1/workloads/{w.pk}/cancel/")
    assert again.status_code == 409
    assert "The workload has already ended (canceled)." in str(again.json())


def test_already_final_reads_well_for_every_final_state(researcher, cluster, submit_kwargs, researcher_client):
    w = do_submit_workload(researcher, **submit_kwargs())
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.SUCCEEDED)
    again = researcher_client.post(f"/api/v1/workloads/{w.pk}/cancel/")
    assert again.status_code == 409
    assert again.json()["detail"] == "The workload has already ended (succeeded)."  # was "it is succeeded"


def test_submit_form_shows_every_error_at_once(browser):
    response = browser.post("/submit/", _form(command="", min_runtime="soon", gpu_count="0"))
    assert response.status_code == 400
    form = response.context["form"]
    assert {"command", "min_runtime", "gpu_count"} <= set(form.errors)


def test_budget_and_workload_tables_scroll_inside_their_card(browser, researcher, submit_kwargs):
    do_submit_workload(researcher, **submit_kwargs())
    for url in ("/budgets/", "/workloads/"):
        assert '<div class="table-scroll">' in browser.get(url).content.decode(), url
    css = browser.get("/static/fairway/fairway.css")
    assert b".table-scroll { overflow-x: auto" in b"".join(css.streaming_content if css.streaming else [css.content])


def test_redoc_loads_nothing_from_the_internet(browser):
    html = browser.get("/api/redoc/").content.decode()
    assert "https://" not in html and "fonts.googleapis" not in html
    assert '<script src="/static/drf_spectacular_sidecar/redoc/' in html


def test_a_favicon_is_served(browser):
    assert 'rel="icon"' in browser.get("/").content.decode()
    answer = browser.get("/favicon.ico")
    assert answer.status_code == 302 and answer["Location"].endswith("favicon.svg")


def test_commands_are_shown_shell_quoted(browser, researcher, submit_kwargs, monkeypatch):
    argv = ["python", "train.py", "--msg", "hello world"]
    w = do_submit_workload(researcher, **submit_kwargs(command=argv))
    assert shell_join(argv) == "python train.py --msg 'hello world'" == shlex.join(argv)
    assert "python train.py --msg &#x27;hello world&#x27;" in browser.get(f"/workloads/{w.pk}/").content.decode()
    assert "command:         python train.py --msg 'hello world'" in run_cli(monkeypatch, researcher, "show", str(w.pk))


def test_a_waiting_workloads_page_names_its_bounds_to_the_second_and_its_blocking_work_once(
    browser, researcher, outsider, submit_kwargs, org_tree, cluster
):
    # Given: vision/sam holds both A100 hosts, protected for 10 more minutes; nlp/olmo's 8-GPU
    # workload waits for that protection to end and holds a reservation for then.
    from datetime import UTC, datetime, timedelta

    from django.utils import timezone

    from scheduler.estimates import store_estimates

    now = timezone.now()
    for _ in range(2):
        do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], gpu_count=8))
    run_tick(cluster.pk)
    for a in Attempt.objects.select_related("host"):
        assert lifecycle.attempt_started(a.host, a.pk, now=now - timedelta(minutes=50, seconds=17))
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    store_estimates(cluster.pk, timezone.now())
    waiting.refresh_from_db()
    assert waiting.pending_reason == "protected_work"
    # The latest start: the reservation's start plus the grace of its victims' release (§3.5).
    reserved = datetime.fromtimestamp(
        waiting.pending_detail["reserved_start"] + settings.FAIRWAY["GRACE_PERIOD_S"], tz=UTC
    )
    blocker = Attempt.objects.filter(ended_at__isnull=True).order_by("protected_until").first()
    assert blocker is not None and blocker.protected_until is not None

    page = browser.get(f"/workloads/{waiting.pk}/").content.decode()

    # Then: the reservation and the estimate name the reserved instant with its seconds...
    assert f"GPUs are reserved for it: it starts by {instant_text(reserved)} at the latest." in page
    assert f"Estimated start: By {instant_text(reserved)} at the latest (GPUs are reserved for it)." in page
    # ...the blocking work is listed once, linked, with its protection end to the second: the
    # policy's second (rounded up), the reservation's start, not the one before (tryout22).
    assert page.count("In the way:") == 1
    end = datetime.fromtimestamp(math.ceil(blocker.protected_until.timestamp()), tz=UTC)
    assert end + timedelta(seconds=settings.FAIRWAY["GRACE_PERIOD_S"]) == reserved  # the release
    assert f", protected until {instant_text(end)})" in page


def test_a_workload_without_an_estimate_says_how_often_estimates_are_refreshed(
    researcher, cluster, submit_kwargs, settings
):
    # The demo refreshes every 10 s, the default every 60 s: the words follow the setting.
    from scheduler.reports import estimate_words

    settings.FAIRWAY = {**settings.FAIRWAY, "ESTIMATE_INTERVAL_S": 10.0}
    w = do_submit_workload(researcher, **submit_kwargs())
    assert w.estimated_start is None
    assert estimate_words(w) == (
        "Not known yet: estimates are refreshed every 10 s and after ticks that start or stop "
        "work, and give no time when no start is found within one window without other work ending."
    )


def test_the_form_and_the_api_refuse_a_too_small_number_in_one_wording(browser, researcher_client):
    """tryout: 0 GPUs read "Ensure this value is greater than or equal to 1." on the submit page
    (Django's form) and "gpu_count is an integer >= 1." from the API (the service's rule): the form
    parses, the service's rule speaks (as for every other field); so for CPUs and retries."""
    bad = {"gpu_count": "0", "cpus": "0", "retries": "-1"}
    page = browser.post("/submit/", _form(**bad)).context["form"].errors
    api = researcher_client.post(
        "/api/v1/workloads/",
        {"budget": "nlp/olmo", "cluster": "default", "gpu_count": 0, "cpus": 0, "retries": -1,
         "min_runtime": "2h", "image": "ghcr.io/lab/train:1", "command": ["python"]},
        format="json",
    ).json()  # fmt: skip
    for field in bad:
        assert page[field] == api[field], field


def test_the_tokens_page_and_the_api_refuse_a_bad_expiry_in_one_wording(browser, researcher_client):
    """The same for a token's expiry: DRF's "Ensure this value is greater than or equal to 1."
    against the service's "A token lives 1 to 3650 days (or forever).", which both now show."""
    api = researcher_client.post("/api/v1/tokens/", {"name": "ci", "expiry_days": 0}, format="json").json()
    page = browser.post("/tokens/", {"name": "ci", "expiry_days": "0"}).content.decode()
    assert api["expiry_days"] == ["A token lives 1 to 3650 days (or forever)."]
    assert "A token lives 1 to 3650 days (or forever)." in page


def test_gpu_hours_read_the_same_on_every_surface():
    """tryout: the page wrote 0.004 GPU-h as "0", the CLI as "0.0" and the why-pending sentence as
    "0.004"; 12.345 as "12.3" (page), "12.3" (CLI); 2.345 as "2.35", "2.3" and "2.35". One function
    (``fairway_cli.numbers.gpu_hours_text``) is the page's filter, the CLI's cell and the sentence's."""
    from fairway_cli import cli
    from fairway_cli.numbers import gpu_hours_text
    from scheduler import reports
    from web.templatetags import fairway

    for value, text in [
        (0, "0"),
        (0.004, "0.004"),
        (0.25, "0.25"),
        (2.345, "2.35"),
        (12.345, "12.3"),
        (1234.5, "1,234"),
    ]:
        assert gpu_hours_text(value) == text
    assert fairway.hours is not None and fairway.hours(0.004) == "0.004"
    assert reports.gpu_hours_text is gpu_hours_text and cli.gpu_hours_text is gpu_hours_text
