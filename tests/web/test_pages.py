"""The web UI: every page renders for a logged-in researcher; submit, cancel, tokens, host actions."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from knox.models import AuthToken

from scheduler.models import Host, HostEvent, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.conftest import PASSWORD


def _form(**overrides):
    data = {
        "name": "pretrain",
        "image": "ghcr.io/lab/train:1",
        "command": "python train.py --msg 'hello world'",
        "env": "WANDB_PROJECT=olmo\n",
        "secret_env": "HF_TOKEN=hf_secret\n",
        "cluster": "default",
        "gpu_model": "A100",
        "gpu_count": "4",
        "budget": "nlp/olmo",
        "min_runtime": "2h",
    }
    data.update(overrides)
    return data


def test_anonymous_visitors_are_sent_to_the_login_page(db):
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    assert Client().get("/login/").status_code == 200


def test_login_page_logs_in(researcher):
    client = Client()
    response = client.post("/login/", {"username": "researcher", "password": PASSWORD})
    assert response.status_code == 302
    assert client.get("/").status_code == 200


@pytest.mark.parametrize(
    "url", ["/", "/submit/", "/workloads/", "/budgets/", "/clusters/", "/clusters/default/", "/metrics/", "/tokens/"]
)
def test_every_page_renders(browser, researcher, submit_kwargs, url):
    do_submit_workload(researcher, **submit_kwargs())
    response = browser.get(url)
    assert response.status_code == 200
    assert b"Fairway" in response.content


def test_submit_form_creates_the_workload_with_secret_env(browser, researcher):
    response = browser.post("/submit/", _form())

    assert response.status_code == 302
    workload = Workload.objects.get()
    assert response["Location"] == f"/workloads/{workload.pk}/"
    assert workload.command == ["python", "train.py", "--msg", "hello world"]
    assert workload.env == {
        "WANDB_PROJECT": {"value": "olmo", "secret": False},
        "HF_TOKEN": {"value": "hf_secret", "secret": True},
    }
    assert workload.min_runtime_s == 7200
    page = browser.get(response["Location"]).content.decode()
    assert "hf_secret" not in page
    assert "HF_TOKEN=********" in page


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"min_runtime": "25h"}, "min_runtime", "at most 1d"),
        ({"min_runtime": "soon"}, "min_runtime", "duration like 2h30m"),
        ({"gpu_count": "24"}, "gpu_count", "whole 8-GPU A100 hosts"),
        ({"env": "FAIRWAY_X=1"}, "env", "set by Fairway"),
        ({"env": "no equals sign"}, "env", "NAME=value"),
        ({"command": "python 'unclosed"}, "command", "Cannot split"),
    ],
)
def test_submit_form_shows_the_service_errors_inline(browser, overrides, field, words):
    response = browser.post("/submit/", _form(**overrides))

    assert response.status_code == 400
    assert words in " ".join(response.context["form"].errors[field])
    assert f'id="id_{field}-errors"' in response.content.decode()
    assert not Workload.objects.exists()


def test_submit_form_offers_only_my_budgets(browser, outsider):
    budgets = [value for value, _label in browser.get("/submit/").context["form"].fields["budget"].choices]
    assert budgets == ["nlp/olmo"]
    response = browser.post("/submit/", _form(budget="vision/sam"))
    assert response.status_code == 400
    assert not Workload.objects.exists()


def test_a_yaml_spec_can_be_pasted(browser):
    spec = (
        "name: sweep\nbudget: nlp/olmo\ncluster: default\ngpu_model: A100\ngpu_count: 2\n"
        "command: [python, sweep.py]\nmin_runtime: 0\nenv:\n  KEY: {value: s3cret, secret: true}\n"
    )
    response = browser.post("/submit/", {"spec": spec})

    assert response.status_code == 302
    workload = Workload.objects.get()
    assert (workload.name, workload.gpu_count, workload.min_runtime_s) == ("sweep", 2, 0)
    assert workload.env == {"KEY": {"value": "s3cret", "secret": True}}


def test_a_bad_yaml_spec_is_explained(browser):
    response = browser.post("/submit/", {"spec": "name: x\ncommand: [unclosed\n"})
    assert response.status_code == 400
    assert "not valid YAML" in response.content.decode()
    response = browser.post("/submit/", {"spec": "nmae: x\n"})
    # try40: and which fields there are, as the API says
    assert "Unknown fields: nmae (the fields are: name, budget, cluster," in response.content.decode()
    assert not Workload.objects.exists()


def test_workload_page_explains_why_it_is_pending(browser, researcher, teammate, submit_kwargs, cluster):
    for _ in range(2):
        do_submit_workload(teammate, **submit_kwargs(gpu_count=8))
    waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(cluster.pk)
    waiting.refresh_from_db()
    assert waiting.state == "pending"

    page = browser.get(f"/workloads/{waiting.pk}/").content.decode()

    assert "Why it is pending" in page
    assert "Estimated start" in page
    assert "Not enough A100 GPUs are free" in page


def test_workload_live_part_is_served_to_htmx(browser, researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs())
    response = browser.get(f"/workloads/{workload.pk}/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="workload-live")
    assert response.status_code == 200
    assert b"<html" not in response.content
    assert b"Why it is pending" in response.content


def test_cancel_from_the_workload_page(browser, researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs())
    response = browser.post(f"/workloads/{workload.pk}/cancel/")
    assert response.status_code == 302
    workload.refresh_from_db()
    assert workload.state == "canceled"


def test_outsider_cannot_cancel_from_the_page(researcher, outsider, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs())
    client = Client()
    client.force_login(outsider)
    page = client.get(f"/workloads/{workload.pk}/").content.decode()
    assert 'id="cancel-button"' not in page
    assert "visible to its owner and members of nlp/olmo only" in page
    client.post(f"/workloads/{workload.pk}/cancel/")
    workload.refresh_from_db()
    assert workload.state == "pending"


def test_workload_list_filters(browser, researcher, outsider, submit_kwargs, org_tree):
    do_submit_workload(researcher, **submit_kwargs(name="mine"))
    do_submit_workload(outsider, **submit_kwargs(name="theirs", budget=org_tree["vision/sam"]))
    names = lambda url: [w.name for w in browser.get(url).context["page"]]  # noqa: E731
    assert names("/workloads/") == ["theirs", "mine"]
    assert names("/workloads/?owner=me") == ["mine"]
    assert names("/workloads/?budget=vision") == ["theirs"]
    assert names("/workloads/?state=running") == []
    partial = browser.get("/workloads/?owner=me", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="workload-rows")
    assert b"<html" not in partial.content


def test_tokens_page_shows_a_new_token_once_and_revokes(browser, researcher):
    response = browser.post("/tokens/", {"name": "laptop", "expiry_days": "30"})
    token = response.context["created"]
    assert token and token in response.content.decode()
    assert token not in browser.get("/tokens/").content.decode()
    key = AuthToken.objects.get(user=researcher, info__name="laptop").token_key
    browser.post("/tokens/", {"revoke": key})
    assert not AuthToken.objects.filter(token_key=key).exists()


def test_only_admins_operate_hosts_from_the_cluster_page(browser, admin_browser, hosts):
    assert b"Drain now" not in browser.get("/clusters/").content
    refused = browser.post("/hosts/a100-1/drain/", follow=True)  # back to the page, with the reason
    assert b"only admins with the change_host permission cordon, drain or resume hosts" in refused.content
    assert Host.objects.get(name="a100-1").state == "active"

    assert b"Drain now" in admin_browser.get("/clusters/").content
    assert admin_browser.post("/hosts/a100-1/cordon/", {"reason": "fan"}).status_code == 302
    assert Host.objects.get(name="a100-1").state == "cordoned"
    assert HostEvent.objects.filter(kind="cordoned", message="fan").exists()
    # tryout: the reason showed only in the admin; the page says who cordoned it and why
    reason = re.search(
        r'<div class="small muted state-reason">([^<]*)</div>', browser.get("/clusters/").content.decode()
    )
    assert (
        reason is not None and reason.group(1).startswith("cordoned by admin at ") and reason.group(1).endswith(": fan")
    )


def _buttons(client: Client, host: str) -> list[str]:
    """The action buttons of ``host``'s row on the clusters page."""
    page = client.get("/clusters/").content.decode()
    row = re.search(rf'<tr id="host-{host}">(.*?)</tr>', page, re.S)
    assert row is not None
    return re.findall(r"<button[^>]*>([^<]+)</button>", row.group(1))


@pytest.mark.parametrize(
    ("state", "returns_as", "drain_now", "buttons"),
    [
        ("offline", "active", False, ["Cordon", "Drain", "Drain now"]),  # was offered Resume: a no-op "resumed"
        ("offline", "cordoned", False, ["Drain", "Drain now", "Resume"]),
        ("offline", "draining", False, ["Cordon", "Drain now", "Resume"]),  # was offered Drain
        ("active", "active", False, ["Cordon", "Drain", "Drain now"]),
        ("draining", "active", True, ["Cordon", "Resume"]),
        ("drained", "active", False, ["Cordon", "Resume"]),
    ],
)
def test_the_cluster_page_offers_only_the_actions_that_apply(
    admin_browser, hosts, state, returns_as, drain_now, buttons
):
    """left35: an offline host was offered Resume whatever it returned as; resuming one that returns
    as active changed nothing and said "resumed". The buttons are ``host_actions``, one rule."""
    Host.objects.filter(name="a100-1").update(state=state, state_before_offline=returns_as, drain_now=drain_now)
    assert _buttons(admin_browser, "a100-1") == buttons


def test_a_host_awaiting_its_inventory_approval_is_not_offered_resume(admin_browser, hosts):
    """A cordoned host whose agent reported other GPUs was offered Resume, which the service then
    refused (``inventory_pending``): the approval resumes it. The page's rule now says so too."""
    Host.objects.filter(name="a100-1").update(state="cordoned", pending_inventory=[{"index": 0, "uuid": "GPU-x"}])
    assert _buttons(admin_browser, "a100-1") == ["Drain", "Drain now"]
    page = admin_browser.post("/hosts/a100-1/resume/", follow=True).content.decode()
    assert "approve its GPU inventory" in page
    assert Host.objects.filter(name="a100-1", state="cordoned").exists()


def test_an_action_that_does_not_apply_is_refused_with_the_reason(admin_browser, hosts):
    """left35: a posted Resume of an offline host that returns as active was answered "resumed"."""
    Host.objects.filter(name="a100-1").update(state="offline", state_before_offline="active")
    events = HostEvent.objects.count()
    page = admin_browser.post("/hosts/a100-1/resume/", follow=True).content.decode()
    assert "Host a100-1 is offline and returns as active: nothing to resume." in page
    assert "a100-1: resumed." not in page
    assert HostEvent.objects.count() == events
    assert Host.objects.filter(name="a100-1", state="offline", state_before_offline="active").exists()


def test_metrics_page_shows_the_pyramid_of_the_last_week(browser, cluster):
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import ClusterHourlyMetrics
    from scheduler.pyramid import hour_of

    hour = hour_of(timezone.now() - timedelta(hours=2))
    ClusterHourlyMetrics.objects.create(
        cluster=cluster,
        hour=hour,
        registered_gpu_s=3600 * 10,
        available_gpu_s=3600 * 9,
        allocated_gpu_s=3600 * 6,
        unallocated_gpu_s=3600 * 2,
        measured_gpu_s=3600 * 8,
        utilized_gpu_s=3600 * 4,
        computed_at=timezone.now(),
    )
    page = browser.get("/metrics/").content.decode()
    assert "the pyramid, last 7 days" in page
    assert "90%" in page and "80%" in page and "40%" in page and "75%" in page  # avail, occ, util, impact
    assert "<polyline" in page


def test_the_cluster_page_asks_a_reason_for_a_drain_and_records_it(admin_browser, hosts):
    """left36: the web's Cordon, Drain and Drain now buttons had no reason field, so every host
    drained from the page read "no reason given". One optional reason field per host goes with
    whichever button is pressed (each posts to its own action), to ``do_set_host_state``."""
    page = admin_browser.get("/clusters/default/").content.decode()
    row = re.search(r"<tr[^>]*>\s*<td[^>]*>.{0,400}?a100-1.*?</tr>", page, re.S)
    assert row is not None
    form = re.search(r"<form[^>]*>(.*?)</form>", row.group(0), re.S)
    assert form is not None
    assert re.search(r'<input[^>]*name="reason"', form.group(1))
    actions = re.findall(r'formaction="([^"]+)"', form.group(1))
    assert actions == ["/hosts/a100-1/cordon/", "/hosts/a100-1/drain/", "/hosts/a100-1/drain-now/"]
    assert admin_browser.post("/hosts/a100-1/drain/", {"reason": "PSU swap"}).status_code == 302
    assert HostEvent.objects.filter(kind="draining", message="PSU swap").exists()
    state = admin_browser.get("/clusters/default/").content.decode()
    assert "PSU swap" in state and "no reason given" not in state
