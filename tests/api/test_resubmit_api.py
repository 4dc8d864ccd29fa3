"""Submit again (docs/jobs.md "Submit again"): ``POST /api/v1/workloads/{id}/resubmit/`` makes a new
workload from the old one's spec through the one submission service; ``GET .../spec/`` shows that
spec. The secret rule: a secret's value never passes from one user to another."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.models import Membership
from scheduler.models import Mount, Workload, WorkloadDependency
from scheduler.services import SECRET_PLACEHOLDER


def _submit(client: Any, payload: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/v1/workloads/", payload, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _again(client: Any, pk: int, body: dict[str, Any] | None = None) -> Any:
    return client.post(f"/api/v1/workloads/{pk}/resubmit/", body or {}, format="json")


@pytest.fixture(autouse=True)
def _cluster(cluster: Any) -> None:
    """Every test submits to the ``default`` cluster."""


@pytest.fixture
def datasets(cluster: Any) -> Mount:
    return Mount.objects.create(cluster=cluster, name="datasets", host_path="/data/sets", container_path="/datasets")


def test_the_owner_submits_again_with_every_field_and_the_secret_kept_server_side(
    researcher_client, submission, datasets
):
    old = _submit(
        researcher_client,
        submission(mounts=["datasets"], max_runtime="3h", retries=2, cpus=8, memory="64G", shared_memory="8G"),
    )
    Workload.objects.filter(pk=old["id"]).update(state="failed")  # any state may be submitted again
    response = _again(researcher_client, old["id"])
    assert response.status_code == 201, response.json()
    new = response.json()
    assert new["id"] != old["id"] and new["state"] == "pending"
    assert new["resubmitted_from"] == old["id"]
    same = ("name", "budget", "cluster", "gpu_model", "gpu_count", "image", "command", "min_runtime_s", "cpus")
    assert {k: new[k] for k in same} == {k: old[k] for k in same}
    assert (new["memory_bytes"], new["shared_memory_bytes"]) == (old["memory_bytes"], old["shared_memory_bytes"])
    assert (new["max_runtime_s"], new["retries"], new["mounts"]) == (3 * 3600, 2, old["mounts"])
    # the secret is never shown back, and it ran with the owner's value
    assert new["env"]["HF_TOKEN"] == {"value": "********", "secret": True}
    stored = Workload.objects.get(pk=new["id"]).env
    assert stored["HF_TOKEN"] == {"value": "hf_secret", "secret": True}
    assert stored["WANDB_PROJECT"] == {"value": "olmo", "secret": False}
    assert new["events"][0]["message"].startswith(f"resubmitted from #{old['id']}; submitted to nlp/olmo")


def test_overrides_take_the_submission_fields(researcher_client, submission):
    old = _submit(researcher_client, submission(max_runtime="3h"))
    response = _again(
        researcher_client,
        old["id"],
        {"gpu_count": 2, "min_runtime": "30m", "max_runtime": None, "retries": 1, "env": {"WANDB_PROJECT": "tulu"}},
    )
    assert response.status_code == 201, response.json()
    new = response.json()
    assert (new["gpu_count"], new["min_runtime_s"], new["max_runtime_s"], new["retries"]) == (2, 1800, None, 1)
    assert Workload.objects.get(pk=new["id"]).env["WANDB_PROJECT"]["value"] == "tulu"
    assert Workload.objects.get(pk=new["id"]).env["HF_TOKEN"]["value"] == "hf_secret"  # the rest kept


def test_overrides_are_refused_as_a_submission_and_nothing_is_created(researcher_client, submission):
    old = _submit(researcher_client, submission())
    before = Workload.objects.count()
    bad = _again(researcher_client, old["id"], {"gpu_count": 0, "max_runtme": "1h"})
    assert bad.status_code == 400 and bad.json()["code"] == "unknown_field"
    bad = _again(researcher_client, old["id"], {"gpu_count": 999})
    assert bad.status_code == 400 and "gpu_count" in bad.json(), bad.json()  # the policy's admission
    bad = _again(researcher_client, old["id"], {"min_runtime": "3d"})
    assert bad.status_code == 400 and bad.json()["code"] == "min_runtime_too_long"
    assert Workload.objects.count() == before


def test_another_member_never_obtains_the_owners_secret(researcher_client, teammate_client, teammate, submission):
    """The rule this feature must keep: a teammate may copy the work but must give the secret."""
    old = _submit(researcher_client, submission())
    before = Workload.objects.count()
    refused = _again(teammate_client, old["id"])
    assert refused.status_code == 400, refused.json()
    assert refused.json()["code"] == "secret_values_required"
    assert "HF_TOKEN" in refused.json()["env"][0]
    # the placeholder passed back as the value, or a blank one, is no way around it
    for value in (SECRET_PLACEHOLDER, ""):
        sneaky = _again(teammate_client, old["id"], {"env": {"HF_TOKEN": {"value": value, "secret": True}}})
        assert sneaky.status_code == 400 and sneaky.json()["code"] == "secret_values_required"
    assert Workload.objects.count() == before
    given = _again(teammate_client, old["id"], {"env": {"HF_TOKEN": {"value": "hf_mine", "secret": True}}})
    assert given.status_code == 201, given.json()
    new = Workload.objects.get(pk=given.json()["id"])
    assert new.owner == teammate and new.env["HF_TOKEN"]["value"] == "hf_mine"
    assert new.resubmitted_from_id == old["id"]
    assert not Workload.objects.filter(owner=teammate, env__HF_TOKEN__value="hf_secret").exists()


def test_who_may_submit_again(researcher_client, outsider_client, manager_client, admin_client_api, submission):
    old = _submit(researcher_client, submission(env={}))
    refused = _again(outsider_client, old["id"])  # may not read its env
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    assert outsider_client.get(f"/api/v1/workloads/{old['id']}/spec/").status_code == 403
    managed = _again(manager_client, old["id"])  # a manager of nlp: a member of the leaves below it
    assert managed.status_code == 201, managed.json()
    assert _again(admin_client_api, old["id"]).status_code == 201  # superusers may submit to any leaf
    missing = _again(researcher_client, 10**9)
    assert missing.status_code == 404


def test_an_owner_removed_from_the_budget_is_refused_by_the_submission(researcher, researcher_client, submission):
    old = _submit(researcher_client, submission())
    Membership.objects.filter(user=researcher).delete()
    refused = _again(researcher_client, old["id"])
    assert refused.status_code == 400 and refused.json()["code"] == "not_a_member"


def test_the_submission_limit_applies(researcher_client, submission, settings):
    old = _submit(researcher_client, submission())
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": 1}
    before = Workload.objects.count()
    refused = _again(researcher_client, old["id"])
    assert refused.status_code == 429 and refused.json()["code"] == "too_many_submitted"
    assert Workload.objects.count() == before


def test_a_running_workload_gives_a_copy_and_dependencies_are_not_copied(researcher_client, submission):
    first = _submit(researcher_client, submission(env={}))
    old = _submit(researcher_client, submission(env={}, after=[str(first["id"])]))
    Workload.objects.filter(pk=old["id"]).update(state="running")
    new = _again(researcher_client, old["id"]).json()
    assert new["after"] == [] and not WorkloadDependency.objects.filter(workload_id=new["id"]).exists()
    assert Workload.objects.get(pk=old["id"]).state == "running"  # the original is untouched
    assert new["resubmitted_from"] == old["id"]


def test_an_array_member_comes_back_alone_with_its_index(researcher_client, submission):
    first = _submit(researcher_client, submission(env={}, gpu_count=1, array="0-3%2"))
    member = Workload.objects.get(group_id=first["group"], array_index=2)
    spec = researcher_client.get(f"/api/v1/workloads/{member.pk}/spec/").json()
    assert (spec["name"], spec["array"]) == ("pretrain", "2") and "FAIRWAY_ARRAY_INDEX" not in spec.get("env", {})
    new = _again(researcher_client, member.pk).json()
    assert new["name"] == "pretrain[2]" and new["group"] != first["group"]
    assert new["array"]["count"] == 1 and new["array"]["indices"] == [2]
    assert Workload.objects.get(pk=new["id"]).env["FAIRWAY_ARRAY_INDEX"]["value"] == "2"
    assert Workload.objects.filter(group_id=first["group"]).count() == 4  # the old group unchanged


def test_the_spec_is_a_submission_whose_secrets_are_placeholders(researcher_client, submission, datasets):
    old = _submit(researcher_client, submission(mounts=["datasets"], max_runtime="3h"))
    spec = researcher_client.get(f"/api/v1/workloads/{old['id']}/spec/").json()
    assert spec["env"] == {"WANDB_PROJECT": "olmo", "HF_TOKEN": {"value": SECRET_PLACEHOLDER, "secret": True}}
    assert (spec["min_runtime"], spec["max_runtime"], spec["mounts"]) == ("2h", "3h", ["datasets"])
    assert "hf_secret" not in str(spec)
    refused = researcher_client.post("/api/v1/workloads/", spec, format="json")
    assert refused.status_code == 400 and refused.json()["code"] == "secret_values_required"
    assert "HF_TOKEN" in refused.json()["env"][0]
    spec["env"]["HF_TOKEN"]["value"] = "hf_new"
    assert researcher_client.post("/api/v1/workloads/", spec, format="json").status_code == 201


def test_a_quote_of_a_resubmission_writes_nothing(researcher_client, submission):
    old = _submit(researcher_client, submission())
    before = Workload.objects.count()
    quote = researcher_client.post(f"/api/v1/workloads/{old['id']}/resubmit/quote/", {"gpu_count": 2}, format="json")
    assert quote.status_code == 200, quote.json()
    assert quote.json()["gpu_count"] == 2 and Workload.objects.count() == before


def test_the_detail_links_the_original_and_the_schema_has_the_actions(researcher_client, submission):
    old = _submit(researcher_client, submission())
    new = _again(researcher_client, old["id"]).json()
    detail = researcher_client.get(f"/api/v1/workloads/{new['id']}/").json()
    assert detail["resubmitted_from"] == old["id"]
    assert researcher_client.get(f"/api/v1/workloads/{old['id']}/").json()["resubmitted_from"] is None
    schema = researcher_client.get("/api/schema/").content.decode()
    for path in ("/api/v1/workloads/{id}/resubmit/", "/api/v1/workloads/{id}/resubmit/quote/"):
        assert path in schema
    assert "/api/v1/workloads/{id}/spec/" in schema


def test_the_schema_describes_the_spec_fields(researcher_client, submission, datasets):
    """api48: ``GET workloads/{id}/spec/`` was a free-form object; its fields are workload_spec's.
    left50: the keys compared are those ``workload_spec`` writes for a workload with every option
    given, and of those the ones it always writes are the schema's required, not a list kept by hand
    beside them (it could drift from both); and a spec is a submission: each key is one of
    ``POST workloads/``'s fields."""
    import yaml
    from rest_framework.test import APIClient

    from scheduler.api.serializers import WorkloadSubmitSerializer
    from scheduler.resubmit import SPEC_LEFT_OUT_EMPTY, workload_spec

    full = submission(
        cpus=4, memory="32G", shared_memory="8G", mounts=["datasets"], max_runtime="4h", retries=1, array="3"
    )
    member = Workload.objects.get(pk=_submit(researcher_client, full)["id"])
    keys = set(workload_spec(member, "nlp/olmo"))
    schema = yaml.safe_load(APIClient().get("/api/schema/").content)
    ok = schema["paths"]["/api/v1/workloads/{id}/spec/"]["get"]["responses"]["200"]
    ref = ok["content"]["application/json"]["schema"]["$ref"]
    described = schema["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert set(described["properties"]) == keys
    assert set(described["required"]) == keys - set(SPEC_LEFT_OUT_EMPTY)
    assert keys <= set(WorkloadSubmitSerializer().fields)
