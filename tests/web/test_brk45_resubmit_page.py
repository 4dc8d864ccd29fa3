"""brk45: the "Submit again" form holds what the workload ran with, or says what it cannot hold.

A GPU model no longer offered, or a budget the person may no longer submit to, was dropped from
its select, which then showed (and submitted) another one: the page put the copy on A100s, or in
another budget, where the API refuses it (``unknown_model``, ``not_a_member``). The values the
form's env lines cannot carry back are found by the form's own parser (a trailing blank, a
Unicode line separator went unnamed and changed, or split into another variable), and a secret,
which the form never holds, is never named there (its line breaks told another member about it)."""

from __future__ import annotations

from accounts.models import Membership
from accounts.services import do_add_membership
from scheduler.models import GPU, Workload
from scheduler.services import do_submit_workload
from tests.web.test_resubmit_page import _client, _form_of


def test_a_gpu_model_no_longer_offered_stays_chosen_and_is_refused(researcher, submit_kwargs, cluster):
    old = do_submit_workload(researcher, **submit_kwargs(gpu_model="H100", gpu_count=1))
    GPU.objects.filter(model="H100").update(removed_at="2026-01-01T00:00:00Z")
    client = _client(researcher)
    data = _form_of(client.get(f"/submit/?again={old.pk}").content.decode())
    assert data["gpu_model"] == "H100"
    refused = client.post("/submit/", data)
    assert refused.status_code == 400 and "has no H100 GPUs" in refused.content.decode()
    assert Workload.objects.count() == 1


def test_a_budget_left_stays_chosen_and_is_refused(researcher, submit_kwargs, org_tree):
    old = do_submit_workload(researcher, **submit_kwargs())
    Membership.objects.filter(user=researcher).delete()
    do_add_membership(researcher, org_tree["vision/sam"])
    client = _client(researcher)
    data = _form_of(client.get(f"/submit/?again={old.pk}").content.decode())
    assert data["budget"] == "nlp/olmo"
    refused = client.post("/submit/", data)
    assert refused.status_code == 400 and "not a member of budget nlp/olmo" in refused.content.decode()
    assert Workload.objects.count() == 1
    moved = client.post("/submit/", {**data, "budget": "vision/sam"})  # chosen on purpose: taken
    assert moved.status_code == 302
    assert Workload.objects.exclude(pk=old.pk).get().budget == org_tree["vision/sam"]


def test_every_value_the_env_lines_cannot_carry_is_named_and_no_secret(researcher, teammate, submit_kwargs):
    env = {
        "PAD": "x ",
        "SEP": "a\u2028B=b",
        "OK": "  fine",
        "TOKEN": {"value": "two\nlines", "secret": True},
    }
    old = do_submit_workload(researcher, **submit_kwargs(env=env))
    for user in (researcher, teammate):
        page = _client(user).get(f"/submit/?again={old.pk}").content.decode()
        assert "The value of PAD, SEP cannot pass through this form unchanged" in page
        assert "TOKEN cannot" not in page and "OK," not in page


def test_whoever_may_not_read_it_is_sent_back_with_the_reason(researcher, outsider, submit_kwargs, caplog):
    """The API and the CLI say why (``RESUBMIT_FORBIDDEN``); the page answered a bare "403
    Forbidden" and Django logged the refusal's traceback (brk42's rule for a page's refusal)."""
    old = do_submit_workload(researcher, **submit_kwargs())
    client = _client(outsider)
    for response in (
        client.get(f"/submit/?again={old.pk}", follow=True),
        client.post("/submit/", {"again": str(old.pk), "command": "x", "keep_secrets": "1"}, follow=True),
    ):
        assert response.redirect_chain == [(f"/workloads/{old.pk}/", 302)]
        assert "may read its spec or submit it again" in response.content.decode()
    assert Workload.objects.count() == 1
    assert not [r for r in caplog.records if r.exc_info]
