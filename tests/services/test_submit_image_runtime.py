"""An image on a cluster whose hosts cannot run images is refused at submission (issue 14, finding 11).

A host tells its runtime in its ``runtime`` label (``fairway-agent join`` sets it). A
process-runtime agent runs the command directly and would silently ignore the image.
"""

from __future__ import annotations

import pytest

from scheduler.models import Host, Workload
from scheduler.services import SubmissionError, do_submit_workload, host_runs_images


def _label(hosts: dict[str, Host], runtime: str, names: tuple[str, ...] = ("a100-1", "a100-2", "h100-1")) -> None:
    for name in names:
        host = hosts[name]
        host.labels = {**host.labels, "runtime": runtime}
        host.save(update_fields=["labels"])


def test_an_image_for_process_runtime_hosts_is_refused(researcher, submit_kwargs, hosts):
    _label(hosts, "process")
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(image="ghcr.io/lab/train:1"))
    assert (refused.value.code, refused.value.field) == ("image_unsupported", "image")
    assert not Workload.objects.exists()
    # without an image it is accepted
    assert do_submit_workload(researcher, **submit_kwargs(image="")).pk


def test_one_docker_host_of_the_model_is_enough(researcher, submit_kwargs, hosts):
    _label(hosts, "process")
    _label(hosts, "docker", ("a100-2",))
    assert do_submit_workload(researcher, **submit_kwargs(image="ghcr.io/lab/train:1")).pk
    # ... but the H100 hosts are all process hosts
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(image="x:1", gpu_model="H100", gpu_count=1))
    assert refused.value.code == "image_unsupported"


def test_hosts_without_a_runtime_label_are_assumed_able(researcher, submit_kwargs, hosts):
    assert do_submit_workload(researcher, **submit_kwargs(image="ghcr.io/lab/train:1")).pk
    assert host_runs_images({}) and host_runs_images({"runtime": "docker"})
    assert not host_runs_images({"runtime": " Process "})


def test_the_api_answers_the_refusal_in_the_error_format(researcher_client, submission, hosts):
    _label(hosts, "process")
    response = researcher_client.post("/api/v1/workloads/", submission(), format="json")
    assert response.status_code == 400
    assert response.json()["code"] == "image_unsupported"
    assert "image" in response.json()


def test_the_agent_join_reports_its_runtime_as_a_label(monkeypatch, tmp_path):
    import agent.__main__ as agent_main
    import agent.join

    sent = {}

    def fake_join(**kwargs):
        sent.update(kwargs)
        return "joined"

    monkeypatch.setattr(agent.join, "join", fake_join)
    monkeypatch.setenv("FAIRWAY_JOIN_TOKEN", "fwj_x")
    args = agent_main._parser().parse_args(
        ["join", "--server", "http://x", "--config", str(tmp_path / "c.toml"), "--gpu-backend", "fake", "--gpus", "1"]
    )
    assert agent_main._join(args) == 0
    assert sent["labels"] == {"runtime": "process"}
