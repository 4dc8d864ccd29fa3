"""``POST /api/v1/workloads/{id}/hold/`` and ``/release/``, ``hold: true`` at submission, the
groups' actions and the list rows (docs/jobs.md "Hold and release")."""

from __future__ import annotations

import pytest
import yaml
from rest_framework.test import APIClient

from scheduler.models import ArrayGroup, Workload, WorkloadEvent
from scheduler.services import do_submit_workload

URL = "/api/v1/workloads/"


@pytest.fixture
def work(researcher, submit_kwargs) -> Workload:
    return do_submit_workload(researcher, **submit_kwargs())


def test_the_owner_holds_and_releases(researcher_client, work, researcher):
    held = researcher_client.post(f"{URL}{work.pk}/hold/")
    assert held.status_code == 200, held.json()
    body = held.json()
    assert (body["hold"], body["held_by"], body["pending_reason"]) == ("user", "researcher", "held")
    assert body["held_at"] is not None and body["estimated_start"] is None
    assert body["pending_explanation"]["sentences"][0].startswith("Held by its owner (user hold) since ")
    assert [e["kind"] for e in body["events"]] == ["submitted", "held"]
    row = researcher_client.get(URL).json()["results"][0]
    assert (row["hold"], row["pending_reason"]) == ("user", "held")

    released = researcher_client.post(f"{URL}{work.pk}/release/")
    assert released.status_code == 200
    body = released.json()
    assert (body["hold"], body["held_by"], body["held_at"], body["pending_reason"]) == ("", None, None, "")
    assert body["submitted_at"] == researcher_client.get(f"{URL}{work.pk}/").json()["submitted_at"]
    assert body["events"][-1]["kind"] == "released" and body["events"][-1]["actor"] == "researcher"


def test_an_outsider_may_not_hold_and_nothing_changes(outsider_client, work):
    response = outsider_client.post(f"{URL}{work.pk}/hold/")
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"
    work.refresh_from_db()
    assert (work.hold, work.pending_reason) == ("", "")
    assert not WorkloadEvent.objects.filter(workload=work, kind="held").exists()


def test_an_admins_hold_is_not_the_owners_to_release(admin_client_api, researcher_client, work):
    assert admin_client_api.post(f"{URL}{work.pk}/hold/").json()["hold"] == "admin"
    response = researcher_client.post(f"{URL}{work.pk}/release/")
    assert response.status_code == 403
    assert "only an admin" in response.json()["detail"]
    assert Workload.objects.get(pk=work.pk).hold == "admin"
    assert admin_client_api.post(f"{URL}{work.pk}/release/").json()["hold"] == ""


def test_a_running_workload_is_not_held(researcher_client, work):
    Workload.objects.filter(pk=work.pk).update(state=Workload.State.RUNNING)
    response = researcher_client.post(f"{URL}{work.pk}/hold/")
    assert response.status_code == 409
    assert response.json()["code"] == "not_pending"
    response = researcher_client.post(f"{URL}{work.pk}/release/")
    assert (response.status_code, response.json()["code"]) == (409, "not_pending")


def test_a_release_of_a_workload_not_held_is_a_conflict(researcher_client, work):
    response = researcher_client.post(f"{URL}{work.pk}/release/")
    assert (response.status_code, response.json()["code"]) == (409, "not_held")


def test_submitted_held(researcher_client, submission, cluster):
    response = researcher_client.post(URL, submission(hold=True), format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["hold"], body["pending_reason"]) == ("user", "held")
    assert Workload.objects.get(pk=body["id"]).hold == "user"


def test_a_hold_that_is_no_boolean_is_refused(researcher_client, submission):
    response = researcher_client.post(URL, submission(hold="maybe"), format="json")
    assert response.status_code == 400
    assert "hold" in response.json()
    assert not Workload.objects.exists()


def test_a_group_is_held_and_released(researcher_client, outsider_client, researcher, submit_kwargs):
    do_submit_workload(researcher, **submit_kwargs(), array="0-2")
    group = ArrayGroup.objects.get()
    assert outsider_client.post(f"/api/v1/groups/{group.pk}/hold/").status_code == 403
    ids = list(group.members.order_by("pk").values_list("pk", flat=True))
    held = researcher_client.post(f"/api/v1/groups/{group.pk}/hold/").json()
    assert held == {"group": group.pk, "held": 3, "members": ids, "changed": True}
    assert set(group.members.values_list("hold", flat=True)) == {"user"}
    released = researcher_client.post(f"/api/v1/groups/{group.pk}/release/").json()
    assert released == {"group": group.pk, "released": 3, "members": ids, "changed": True}
    assert set(group.members.values_list("hold", flat=True)) == {""}


def test_the_schema_lists_hold_and_release(db):
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    for path in (
        "/api/v1/workloads/{id}/hold/",
        "/api/v1/workloads/{id}/release/",
        "/api/v1/groups/{id}/hold/",
        "/api/v1/groups/{id}/release/",
    ):
        post = schema["paths"][path]["post"]
        assert "requestBody" not in post, path
        assert {"200", "403", "409"} <= set(post["responses"]), path
    assert "hold" in schema["components"]["schemas"]["WorkloadSubmitRequest"]["properties"]


@pytest.mark.parametrize("verb", ["hold", "release", "cancel"])
def test_a_body_the_action_does_not_read_is_refused(researcher_client, researcher, submit_kwargs, verb):
    """api48: ``{"reason": "x"}`` was accepted and ignored (the reason never recorded); a body is
    a 400 ``unknown_field`` naming its keys, nothing done; an empty body (the CLI's ``{}``) acts."""
    one = do_submit_workload(researcher, **submit_kwargs())
    do_submit_workload(researcher, **submit_kwargs(), array="0-1")
    group = ArrayGroup.objects.get()
    for url in (f"{URL}{one.pk}/{verb}/", f"/api/v1/groups/{group.pk}/{verb}/"):
        r = researcher_client.post(url, {"reason": "x"}, format="json")
        assert (r.status_code, r.json()["code"]) == (400, "unknown_field"), url
        assert "reason" in r.json()
        r = researcher_client.post(url, [1], format="json")
        assert r.status_code == 400, url
    assert set(Workload.objects.values_list("hold", "state")) == {("", Workload.State.PENDING)}
    assert not WorkloadEvent.objects.exclude(kind="submitted").exists()
    for url in (f"{URL}{one.pk}/{verb}/", f"/api/v1/groups/{group.pk}/{verb}/"):
        assert researcher_client.post(url, {}, format="json").status_code in (200, 202, 409), url  # 409: not held
        assert researcher_client.post(url).status_code in (200, 202, 409), url
    if verb == "hold":
        assert set(Workload.objects.values_list("hold", flat=True)) == {"user"}


def test_the_schema_says_the_actions_take_no_body(db):
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    for path in ("/api/v1/workloads/{id}/cancel/", "/api/v1/groups/{id}/cancel/"):
        assert "requestBody" not in schema["paths"][path]["post"], path
