"""try42 (a new lab's first day, from the README alone): what the surfaces said unlike each other."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from fairway_cli.numbers import duration_text
from tests.browser import log_in
from web.forms import SubmitForm


def _form_limit(max_minimum_runtime_s: int, settings) -> str:  # noqa: ANN001 -- pytest-django's settings
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_MINIMUM_RUNTIME_S": max_minimum_runtime_s}
    form = SubmitForm(budgets=["nlp/olmo"], clusters=["default"], models=["A100"])
    return str(form.fields["min_runtime"].help_text)


@pytest.mark.parametrize(
    ("limit_s", "words"),
    [(86400, "At most 1d."), (5400, "At most 1h30m."), (1800, "At most 30m."), (7 * 3600, "At most 7h.")],
)
def test_the_submit_forms_limit_of_the_minimum_runtime_reads_as_the_refusal(limit_s, words, settings):
    """The form said "At most 24 h." where the refusal says "at most 1d", and it floored the
    setting to whole hours: FAIRWAY_MAX_MINIMUM_RUNTIME_S=5400 read "At most 1 h." (1h30m is
    taken) and 1800 read "At most 0 h."."""
    assert _form_limit(limit_s, settings).endswith(words)


@hsettings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=2_000_000))
def test_the_forms_limit_is_the_refusals_bound_for_any_setting(limit_s):
    """The form's words are the same duration_text the service's refusal uses (scheduler.services):
    one rule; checked against a slow reading of the words back into seconds."""
    from django.conf import settings as django_settings

    saved = django_settings.FAIRWAY
    try:
        django_settings.FAIRWAY = {**saved, "MAX_MINIMUM_RUNTIME_S": limit_s}
        help_text = str(SubmitForm(budgets=["b"], clusters=["c"], models=[]).fields["min_runtime"].help_text)
    finally:
        django_settings.FAIRWAY = saved
    assert help_text.endswith(f"At most {duration_text(limit_s)}.")
    # the oracle: the words read back, unit by unit, give the setting (seconds dropped from a day on)
    text = help_text.rsplit("At most ", 1)[1].rstrip(".")
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    total, number = 0, ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total += int(number) * units[ch]
            number = ""
    expected = limit_s - limit_s % 60 if limit_s >= 86400 else limit_s
    assert total == expected


def test_the_pyramid_apis_default_range_is_the_metrics_pages(researcher_client, researcher, cluster):
    """`GET /api/v1/metrics/pyramid/` covered the last 24 hours by default while the metrics page
    and `fairway metrics` cover the last 7 days: availability 99.9 % in the API beside 91 % on the
    page for the same cluster and moment (try42, the demo's database)."""
    from scheduler.models import ClusterHourlyMetrics

    now = timezone.now()
    three_days_ago = (now - timedelta(days=3)).replace(minute=0, second=0, microsecond=0)
    for hour in (three_days_ago, three_days_ago + timedelta(days=2)):  # 3 days and 1 day ago
        ClusterHourlyMetrics.objects.create(
            cluster=cluster, hour=hour, registered_gpu_s=20 * 3600.0, available_gpu_s=10 * 3600.0, computed_at=now
        )
    [api] = researcher_client.get("/api/v1/metrics/pyramid/", {"cluster": cluster.name}).json()
    since = datetime.fromisoformat(api["range"]["since"].replace("Z", "+00:00"))
    assert since == three_days_ago  # the hour 3 days ago is in the range; 24 hours left it out
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/metrics/").content.decode()
    assert "the pyramid, last 7 days" in page
    # the page's hours and the API's default hours are the same count
    hours = api["range"]["complete_hours"]
    [seven] = researcher_client.get("/api/v1/metrics/pyramid/", {"cluster": cluster.name, "since": "7d"}).json()
    assert hours == seven["range"]["complete_hours"]
    assert api["range"]["since"] == seven["range"]["since"]


def test_the_budgets_page_names_the_window_as_its_own_header_does(researcher, org_tree, cluster, settings):
    """The page's intro said "the lookback window (7 days)" above "× 7d" in its own header, and a
    one-day window read "(1 days)"."""
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/budgets/").content.decode()
    assert "over the lookback window (7d)" in page
    settings.FAIRWAY = {**settings.FAIRWAY, "LOOKBACK_WINDOW_S": 86400}
    page = browser.get("/budgets/").content.decode()
    assert "over the lookback window (1d)" in page
    assert "1 days" not in page


DANGLING_JS = """() => [...document.querySelectorAll('[aria-describedby]')].flatMap((el) =>
  el.getAttribute('aria-describedby').split(/\\s+/).filter((id) => !document.getElementById(id))
    .map((id) => `${el.name}: no #${id}`))"""


def test_in_a_browser_the_budgets_page_and_the_submit_form_say_the_windows_and_limits_as_elsewhere(
    new_page, researcher, org_tree, cluster, settings
):
    """The pages as a researcher reads them (Playwright, Debian's Chromium, tests/browser.py):
    the budgets page's intro names the window as its header does, the submit form's limit reads
    as the refusal's."""
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_MINIMUM_RUNTIME_S": 5400}
    page = new_page()
    log_in(page, researcher.username)
    page.goto("/budgets/")
    intro = page.inner_text("main p")
    assert "over the lookback window (7d)." in intro
    assert "× 7d =" in page.inner_text("main h2")
    page.goto("/submit/")
    assert page.inner_text("#id_min_runtime_helptext").endswith("At most 1h30m.")
    # each field's aria-describedby (Django's) names its help text: none pointed anywhere
    dangling = page.evaluate(DANGLING_JS)
    assert dangling == [], dangling
    for path in ("/notifications/", "/tokens/", "/workloads/"):
        page.goto(path)
        assert page.evaluate(DANGLING_JS) == [], path


def test_the_admin_index_names_gpus_as_every_page_does(admin):
    """The admin's index (and its breadcrumbs) said "Gpus" where every page says "GPUs"."""
    browser = Client()
    browser.force_login(admin)
    index = browser.get("/admin/").content.decode()
    assert ">GPUs<" in index
    assert "Gpus" not in index
    assert "Gpus" not in browser.get("/admin/scheduler/gpu/").content.decode()
