"""The workload page's "Submit again" button and the submit form it opens, prefilled with the
workload's spec (docs/jobs.md "Submit again"): secret values blank, the owner's "keep" honoured
server-side for the owner only; a Playwright browser test of the button and the form."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in


@pytest.fixture
def old(researcher: Any, submit_kwargs: Any) -> Workload:
    env = {"WANDB_PROJECT": "olmo", "HF_TOKEN": {"value": "hf_owner_secret", "secret": True}}
    return do_submit_workload(researcher, **submit_kwargs(env=env, retries=2, memory_bytes=64 << 30))


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _form_of(page: str) -> dict[str, str]:
    """The submit form's posted fields as the prefilled page holds them (the test posts what a
    browser would, untouched)."""
    import html
    import re

    form = page[page.index('id="submit-form"') : page.index("</form>", page.index('id="submit-form"'))]
    data = {
        m[0]: html.unescape(m[1])
        for m in re.findall(r'<input type="(?:text|number|hidden)" name="(\w+)" value="([^"]*)"', form)
    }
    data |= {
        m[0]: html.unescape(m[1])
        for m in re.findall(r'<input[^>]*name="(\w+)"[^>]*value="([^"]*)"', form)
        if m[0] not in data and m[0] != "keep_secrets"
    }
    data |= {
        m[0]: html.unescape(m[1]).lstrip("\n")
        for m in re.findall(r'<textarea name="(\w+)"[^>]*>(.*?)</textarea>', form, re.S)
    }
    for name, block in re.findall(r'<select name="(\w+)"[^>]*>(.*?)</select>', form, re.S):
        chosen = re.search(r'<option value="([^"]*)"[^>]*selected', block)
        data[name] = html.unescape(chosen[1]) if chosen else ""
    return data


def test_the_button_is_offered_to_whoever_may_read_the_spec(old, researcher, teammate, outsider):
    assert 'id="resubmit-button"' in _client(researcher).get(f"/workloads/{old.pk}/").content.decode()
    assert 'id="resubmit-button"' in _client(teammate).get(f"/workloads/{old.pk}/").content.decode()
    assert 'id="resubmit-button"' not in _client(outsider).get(f"/workloads/{old.pk}/").content.decode()
    refused = _client(outsider).get(f"/submit/?again={old.pk}")  # sent back with the reason (brk45)
    assert (refused.status_code, refused.url) == (302, f"/workloads/{old.pk}/")
    assert _client(researcher).get("/submit/?again=999999").status_code == 404
    assert _client(researcher).get("/submit/?again=x").status_code == 404


def test_the_form_is_prefilled_and_never_shows_a_secret(old, researcher, teammate):
    page = _client(researcher).get(f"/submit/?again={old.pk}").content.decode()
    assert "hf_owner_secret" not in page
    data = _form_of(page)
    assert (data["name"], data["command"], data["gpu_count"], data["retries"]) == (
        "pretrain",
        "python train.py",
        "4",
        "2",
    )
    assert (data["env"], data["secret_env"], data["memory"], data["again"]) == (
        "WANDB_PROJECT=olmo",
        "HF_TOKEN=",
        "64G",
        str(old.pk),
    )
    assert (data["budget"], data["gpu_model"], data["min_runtime"]) == ("nlp/olmo", "A100", "1h")
    assert 'id="keep-secrets"' in page and "HF_TOKEN is blank" in page
    other = _client(teammate).get(f"/submit/?again={old.pk}").content.decode()
    assert 'id="keep-secrets"' not in other and "never copied from another user" in other


def test_the_owner_keeps_the_secret_server_side(old, researcher):
    client = _client(researcher)
    data = _form_of(client.get(f"/submit/?again={old.pk}").content.decode())
    refused = client.post("/submit/", data)  # not ticked, not typed: refused, nothing created
    assert refused.status_code == 400 and "HF_TOKEN" in refused.content.decode()
    assert Workload.objects.count() == 1
    response = client.post("/submit/", {**data, "keep_secrets": "1", "gpu_count": "2"})
    assert response.status_code == 302, response.content.decode()[:2000]
    new = Workload.objects.exclude(pk=old.pk).get()
    assert (new.gpu_count, new.retries, new.resubmitted_from) == (2, 2, old)
    assert new.env["HF_TOKEN"] == {"value": "hf_owner_secret", "secret": True}
    page = client.get(f"/workloads/{new.pk}/").content.decode()
    assert f'id="resubmitted-from">#{old.pk}</a>' in page and f"resubmitted from #{old.pk}" in page
    assert f'href="/workloads/{new.pk}/">#{new.pk}</a>' in client.get(f"/workloads/{old.pk}/").content.decode()


def test_another_member_cannot_obtain_the_owners_secret_through_the_form(old, teammate):
    client = _client(teammate)
    data = _form_of(client.get(f"/submit/?again={old.pk}").content.decode())
    refused = client.post("/submit/", {**data, "keep_secrets": "1"})  # a forged tick is not honoured
    assert refused.status_code == 400 and "HF_TOKEN" in refused.content.decode()
    assert "hf_owner_secret" not in refused.content.decode()
    quoted = client.post("/submit/", {**data, "keep_secrets": "1", "quote": "1"})
    assert quoted.status_code == 400 and Workload.objects.count() == 1
    response = client.post("/submit/", {**data, "secret_env": "HF_TOKEN=hf_teammate"})
    assert response.status_code == 302
    new = Workload.objects.exclude(pk=old.pk).get()
    assert (new.owner, new.env["HF_TOKEN"]["value"]) == (teammate, "hf_teammate")


def test_the_submission_limit_refuses_it_on_the_page(old, researcher, settings):
    client = _client(researcher)
    data = _form_of(client.get(f"/submit/?again={old.pk}").content.decode())
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": 1}
    refused = client.post("/submit/", {**data, "keep_secrets": "1"})
    assert "one user may have at most 1" in refused.content.decode()
    assert Workload.objects.count() == 1


def test_the_button_opens_the_prefilled_form_in_a_browser(new_page, old, researcher):
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{old.pk}/")
    page.click("#resubmit-button")
    page.wait_for_selector("#again-note")
    assert page.input_value("#id_name") == "pretrain"
    assert page.input_value("#id_command") == "python train.py"
    assert page.input_value("#id_secret_env") == "HF_TOKEN="
    assert "hf_owner_secret" not in page.content()
    page.fill("#id_gpu_count", "2")
    page.check("#keep-secrets")
    page.click("#submit-form button[type=submit]:not([name])")
    page.wait_for_selector("#resubmitted-from")
    link = page.inner_text("#resubmitted-from")
    new_url = page.url
    new = Workload.objects.exclude(pk=old.pk).get()
    assert link == f"#{old.pk}" and new_url.endswith(f"/workloads/{new.pk}/")
    assert (new.gpu_count, new.env["HF_TOKEN"]["value"]) == (2, "hf_owner_secret")


def test_a_value_the_form_cannot_hold_is_named(researcher, submit_kwargs):
    old = do_submit_workload(researcher, **submit_kwargs(env={"CONFIG": "a: 1\nb: 2"}))
    page = _client(researcher).get(f"/submit/?again={old.pk}").content.decode()
    assert 'id="again-multiline"' in page and "CONFIG cannot pass through this form unchanged" in page
