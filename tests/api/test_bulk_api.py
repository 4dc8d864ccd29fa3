"""``POST /api/v1/workloads/bulk/?<the list's filters>``: cancel, hold or release every workload
the workload list shows with the same query (docs/jobs.md "Bulk actions")."""

from __future__ import annotations

import pytest

from scheduler.models import ArrayGroup, Workload, WorkloadEvent
from scheduler.services import do_submit_workload

URL = "/api/v1/workloads/bulk/"


def _rows() -> list[tuple[int, str, str]]:
    return list(Workload.objects.order_by("pk").values_list("pk", "state", "hold"))


def test_cancel_my_pending_work_answers_counts_ids_and_skips(researcher_client, mine, theirs):
    before = _rows()
    response = researcher_client.post(f"{URL}?state=pending", {"action": "cancel"}, format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["action"] == "cancel" and body["dry_run"] is False
    assert (body["matched"], body["changed"], body["skipped"]) == (5, 3, 2)
    assert body["ids"] == [w.pk for w in mine] and body["stopping"] == []
    assert body["skips"] == [{"id": w.pk, "code": "forbidden"} for w in theirs]
    assert "owner" in body["reasons"]["forbidden"]
    after = {pk: (state, hold) for pk, state, hold in _rows()}
    assert {after[w.pk][0] for w in mine} == {"canceled"}
    others = {w.pk for w in theirs}
    assert [r for r in before if r[0] in others] == [r for r in _rows() if r[0] in others]


def test_the_preview_names_exactly_what_the_list_shows_and_changes_nothing(researcher_client, mine, theirs):
    query = "?owner=me&state=pending"
    listed = sorted(w["id"] for w in researcher_client.get(f"/api/v1/workloads/{query}").json()["results"])
    before, events = _rows(), WorkloadEvent.objects.count()
    body = researcher_client.post(URL + query, {"action": "hold", "dry_run": True}, format="json").json()
    assert (body["dry_run"], body["matched"], body["ids"]) == (True, len(listed), listed)
    assert _rows() == before and WorkloadEvent.objects.count() == events


def test_an_empty_filter_is_refused_and_nothing_changes(researcher_client, mine):
    for query in ("", "?state=", "?limit=5"):
        response = researcher_client.post(URL + query, {"action": "cancel"}, format="json")
        assert response.status_code == 400, query
        if query != "?limit=5":
            assert response.json()["code"] == "filter_required"
    assert {state for _, state, _ in _rows()} == {"pending"}


@pytest.mark.parametrize(
    ("query", "body", "field", "code"),
    [
        ("?state=runing", {"action": "cancel"}, "state", None),
        ("?user=researcher", {"action": "cancel"}, "user", "unknown_parameter"),
        ("?budget=nope", {"action": "hold"}, "budget", None),
        ("?owner=me", {"action": "requeue"}, "action", None),
        ("?owner=me", {}, "action", None),
        ("?owner=me", {"action": "hold", "dry_run": "yes"}, "dry_run", None),
        ("?owner=me", {"action": "hold", "reason": "x"}, "reason", "unknown_field"),
        ("?owner=me", {"action": "hold", "ids": "1,2"}, "ids", None),
    ],
)
def test_a_bad_input_is_a_400_naming_it_and_nothing_changes(researcher_client, mine, query, body, field, code):
    before = _rows()
    response = researcher_client.post(URL + query, body, format="json")
    assert response.status_code == 400
    assert field in response.json(), response.json()
    if code:
        assert response.json()["code"] == code
    assert _rows() == before


def test_more_matches_than_the_cap_are_refused(settings, researcher_client, mine):
    settings.FAIRWAY = {**settings.FAIRWAY, "BULK_MAX": 2}
    response = researcher_client.post(f"{URL}?owner=me", {"action": "cancel", "dry_run": True}, format="json")
    assert (response.status_code, response.json()["code"]) == (400, "too_many_matched")
    assert "more than 2 workloads" in response.json()["non_field_errors"][0]
    assert {state for _, state, _ in _rows()} == {"pending"}


def test_a_filter_matching_nothing_answers_zero(researcher_client, mine):
    body = researcher_client.post(f"{URL}?state=running", {"action": "cancel"}, format="json").json()
    assert (body["matched"], body["changed"], body["ids"], body["skips"]) == (0, 0, [], [])


def test_an_outsider_touches_nobodys_work(outsider_client, mine, theirs):
    before = _rows()
    body = outsider_client.post(f"{URL}?state=pending", {"action": "cancel"}, format="json").json()
    assert (body["changed"], body["skipped"]) == (0, 5)
    assert _rows() == before


def test_ids_confine_the_action_to_those_previewed(researcher_client, mine, researcher, submit_kwargs):
    preview = researcher_client.post(f"{URL}?owner=me", {"action": "cancel", "dry_run": True}, format="json").json()
    late = do_submit_workload(researcher, **submit_kwargs(name="late"))  # submitted after the preview
    body = researcher_client.post(f"{URL}?owner=me", {"action": "cancel", "ids": preview["ids"]}, format="json").json()
    assert body["ids"] == preview["ids"] == [w.pk for w in mine]
    assert Workload.objects.get(pk=late.pk).state == "pending"


def test_a_group_filter_holds_its_members_and_the_group_endpoints_still_work(
    researcher_client, researcher, submit_kwargs
):
    do_submit_workload(researcher, **submit_kwargs(), array="0-2")
    group = ArrayGroup.objects.get()
    ids = list(group.members.order_by("pk").values_list("pk", flat=True))
    held = researcher_client.post(f"{URL}?group={group.pk}", {"action": "hold"}, format="json").json()
    assert held["ids"] == ids
    released = researcher_client.post(f"/api/v1/groups/{group.pk}/release/").json()
    assert released == {"group": group.pk, "released": 3, "members": ids, "changed": True}
    canceled = researcher_client.post(f"/api/v1/groups/{group.pk}/cancel/").json()
    assert canceled == {
        "group": group.pk,
        "canceled": 3,
        "members": ids,
        "changed": True,
    }  # the shape of hold and release (left50)


def test_anonymous_is_refused(api_client_for, mine):
    response = api_client_for(None).post(f"{URL}?state=pending", {"action": "cancel"}, format="json")
    assert response.status_code in (401, 403)
    assert {state for _, state, _ in _rows()} == {"pending"}
