"""left51: ``none`` in an override of the wall-time limit, CPUs, memory or shm means "no limit /
the default again" (``null``), alike in an update (``PATCH workloads/{id}/``), a resubmission
(``POST workloads/{id}/resubmit/``) and their CLI verbs (docs/jobs.md)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.models import Workload
from tests.cli.inprocess import run_cli

CLEARED = {"max_runtime": "none", "cpus": "None", "memory": " NONE ", "shared_memory": "none"}


def _limited(client: Any, submission: Any) -> dict[str, Any]:
    body = submission(max_runtime="3h", cpus=8, memory="64G", shared_memory="8G")
    response = client.post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _cleared(pk: int) -> tuple[Any, ...]:
    w = Workload.objects.get(pk=pk)
    return (w.max_runtime_s, w.cpus, w.memory_bytes, w.shared_memory_bytes)


@pytest.mark.parametrize("none", ["none", None])
def test_resubmit_api_clears_the_limits_with_none_or_null(researcher_client, submission, cluster, none):
    old = _limited(researcher_client, submission)
    body = {k: (v if none else None) for k, v in CLEARED.items()}
    response = researcher_client.post(f"/api/v1/workloads/{old['id']}/resubmit/", body, format="json")
    assert response.status_code == 201, response.json()
    assert _cleared(response.json()["id"]) == (None, None, None, None)
    assert _cleared(old["id"]) == (3 * 3600, 8, 64 << 30, 8 << 30)


def test_update_api_takes_the_same_none(researcher_client, submission, cluster):
    old = _limited(researcher_client, submission)
    response = researcher_client.patch(f"/api/v1/workloads/{old['id']}/", CLEARED, format="json")
    assert response.status_code == 200, response.json()
    assert _cleared(old["id"]) == (None, None, None, None)


def test_a_word_other_than_none_is_still_refused(researcher_client, submission, cluster):
    old = _limited(researcher_client, submission)
    response = researcher_client.post(
        f"/api/v1/workloads/{old['id']}/resubmit/", {"max_runtime": "never"}, format="json"
    )
    assert response.status_code == 400 and response.json()["code"] == "invalid_max_runtime"
    assert Workload.objects.count() == 1


def test_fairway_resubmit_clears_the_limits_with_none(monkeypatch, researcher, researcher_client, submission, cluster):
    old = _limited(researcher_client, submission)
    run_cli(
        monkeypatch, researcher, "resubmit", str(old["id"]), "-t", "none", "--cpus", "none", "--mem", "none",
        "--shm", "none",
    )  # fmt: skip
    new = Workload.objects.exclude(pk=old["id"]).get()
    assert _cleared(new.pk) == (None, None, None, None)


def test_fairway_resubmit_still_refuses_a_bad_cpu_count(
    monkeypatch, capsys, researcher, researcher_client, submission, cluster
):
    old = _limited(researcher_client, submission)
    run_cli(monkeypatch, researcher, "resubmit", str(old["id"]), "--cpus", "lots", expect=2)  # argparse's usage
    assert "argument --cpus: 'lots' is not a whole number" in capsys.readouterr().err
    assert Workload.objects.count() == 1
