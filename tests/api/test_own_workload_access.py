"""A researcher removed from a budget keeps reading the logs and env of the workloads they
submitted, as they keep cancelling them (tryout28: cancel allowed, logs and env refused). Slurm's
rule: a user always sees and controls their own jobs; membership governs new submissions only
(docs/DESIGN.md §3.7, ``scheduler.services.may_read_private``)."""

from __future__ import annotations

from django.test import Client

from accounts.models import Membership
from scheduler.services import can_cancel, do_submit_workload


def test_an_owner_removed_from_the_budget_keeps_logs_env_and_cancel(
    researcher, outsider, researcher_client, outsider_client, submit_kwargs
):
    w = do_submit_workload(researcher, **submit_kwargs(env={"WANDB_PROJECT": "olmo"}))
    Membership.objects.filter(user=researcher).delete()  # removed from nlp/olmo

    detail = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert detail["env_visible"] is True and detail["env"]["WANDB_PROJECT"]["value"] == "olmo"
    logs = researcher_client.get(f"/api/v1/workloads/{w.pk}/logs/")
    assert logs.status_code == 404 and logs.json()["code"] == "no_attempt"  # allowed; nothing ran yet
    assert can_cancel(researcher, w)

    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{w.pk}/").content.decode()
    assert "WANDB_PROJECT=olmo" in page and "visible to its owner" not in page
    part = browser.get(f"/workloads/{w.pk}/logs/").content.decode()
    assert "Logs are visible to" not in part

    # Someone else outside the budget still reads neither.
    other = outsider_client.get(f"/api/v1/workloads/{w.pk}/")
    assert other.json()["env_visible"] is False and other.json()["env"] is None
    assert outsider_client.get(f"/api/v1/workloads/{w.pk}/logs/").status_code == 403
    stranger = Client()
    stranger.force_login(outsider)
    assert (
        "Logs are visible to the workload's owner and members of its budget only."
        in stranger.get(f"/workloads/{w.pk}/logs/").content.decode()
    )
