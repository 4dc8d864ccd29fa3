"""Job options on the web (docs/jobs.md): the submit form's fields and errors, the workload page,
the group cancel, and the notifications page."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.models import ArrayGroup, Mount, NotificationSettings, Workload
from tests.conftest import PASSWORD
from tests.web.test_pages import _form


def test_an_array_submitted_from_the_form_shows_its_options_and_cancels_as_a_group(browser, cluster):
    Mount.objects.create(cluster=cluster, name="datasets", host_path="/data", container_path="/datasets")
    response = browser.post(
        "/submit/",
        _form(mounts="datasets", max_runtime="3h", retries="2", array="0-1%1", gpu_count="1"),
    )
    assert response.status_code == 302
    group = ArrayGroup.objects.get()
    first = group.members.order_by("array_index").first()
    page = browser.get(response["Location"]).content.decode()
    for words in ("wall-time limit", "3h", "0 of 2 used", "datasets → /datasets", f"group {group.pk}", "0-1%1"):
        assert words in page, words

    second = _form(after=f"{first.pk}:ok", name="eval")
    response = browser.post("/submit/", second)
    page = browser.get(response["Location"]).content.decode()
    assert f"#{first.pk}</a>:ok" in page

    response = browser.post(f"/groups/{group.pk}/cancel/")
    assert response.status_code == 302 and response["Location"] == f"/workloads/?group={group.pk}"
    assert set(group.members.values_list("state", flat=True)) == {"canceled"}
    listing = browser.get(response["Location"]).content.decode()
    assert "pretrain[0]" in listing and "eval" not in listing


def test_a_foreign_finished_group_is_not_canceled_from_the_web(browser, outsider):
    """tryout: the web said "Canceled 0 workloads" for someone else's finished group."""
    browser.post("/submit/", _form(array="0-1", gpu_count="1"))
    group = ArrayGroup.objects.get()
    Workload.objects.update(state=Workload.State.SUCCEEDED)
    other = Client()
    assert other.login(username="outsider", password=PASSWORD)
    page = other.post(f"/groups/{group.pk}/cancel/", follow=True).content.decode()
    assert "Only the owner" in page and "Canceled 0" not in page


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"max_runtime": "1h"}, "max_runtime", "must be at least the minimum runtime"),
        ({"array": "x"}, "array", "Bad array"),
        ({"mounts": "nope"}, "mounts", "No mount 'nope'"),
        ({"after": "12:maybe"}, "after", "is not ID, ID:ok or ID:any"),
    ],
)
def test_bad_job_options_show_inline(browser, overrides, field, words):
    response = browser.post("/submit/", _form(**overrides))
    assert response.status_code == 400
    assert words in " ".join(response.context["form"].errors[field])
    assert not Workload.objects.exists()


def test_the_notifications_page_saves_choices_and_refuses_local_webhooks(browser, researcher):
    assert browser.get("/notifications/").status_code == 200
    response = browser.post("/notifications/", {"email_kinds": ["failed", "preempted"], "webhook_url": ""})
    assert response.status_code == 302
    assert NotificationSettings.objects.get(user=researcher).email_kinds == ["failed", "preempted"]
    response = browser.post("/notifications/", {"webhook_kinds": ["failed"], "webhook_url": "http://192.168.1.9/x"})
    assert response.status_code == 400 and "private or local" in response.content.decode()


def test_the_notifications_page_refuses_webhook_kinds_without_a_url(browser, researcher):
    """tryout: webhook kinds were saved with no URL to post to (the same rule as the API's)."""
    response = browser.post("/notifications/", {"webhook_kinds": ["failed"], "webhook_url": ""})
    assert response.status_code == 400 and "need a webhook URL" in response.content.decode()
    assert not NotificationSettings.objects.filter(user=researcher).exists()
