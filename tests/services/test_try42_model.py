"""try42: a submission without a GPU model, on a cluster of several models or of none, is refused
in the words of the refusal with a model ("Cluster lab has no A100 GPUs (it has: …)")."""

from __future__ import annotations

import pytest

from config.errors import ServiceError
from scheduler.models import Cluster, Host
from scheduler.services import do_submit_workload


def _problem(user, kwargs):  # noqa: ANN001, ANN202
    with pytest.raises(ServiceError) as refused:
        do_submit_workload(user, **kwargs)
    [problem] = [p for p in refused.value.problems if p.field == "gpu_model"]
    return problem


def test_no_model_on_a_cluster_without_hosts_says_it_has_none(researcher, submit_kwargs, cluster):
    """A lab's first submission, before any host joined: "Give a GPU model (cluster has: none)."
    asked for a model no choice could satisfy; with a model it said "Cluster lab has no A100 GPUs
    (it has: no registered hosts).". Both now say what the cluster has, one way."""
    Host.objects.filter(cluster=cluster).delete()
    bare = _problem(researcher, submit_kwargs(gpu_model=""))
    named = _problem(researcher, submit_kwargs(gpu_model="A100"))
    assert bare.code == named.code == "unknown_model"
    assert bare.message == f"Cluster {cluster.name} has no GPUs yet (it has: no registered hosts)."
    assert named.message == f"Cluster {cluster.name} has no A100 GPUs (it has: no registered hosts)."


def test_no_model_on_a_cluster_of_several_lists_them_as_the_named_refusal(researcher, submit_kwargs, cluster):
    bare = _problem(researcher, submit_kwargs(gpu_model=""))
    named = _problem(researcher, submit_kwargs(gpu_model="V100"))
    assert bare.message == f"Give a GPU model: cluster {cluster.name} has A100, H100."
    assert named.message.endswith("(it has: A100, H100).")
    assert Cluster.objects.count() == 1
