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


@pytest.mark.parametrize("pending", [False, True])
def test_hosts_without_registered_gpus_are_not_called_no_hosts(researcher, submit_kwargs, cluster, pending):
    """fin43: "(it has: no registered hosts)" while hosts were registered, their GPUs not (yet)."""
    from scheduler.models import GPU

    hosts = Host.objects.filter(cluster=cluster, removed_at__isnull=True).count()
    assert hosts >= 1
    GPU.objects.filter(host__cluster=cluster).delete()
    if pending:
        Host.objects.filter(cluster=cluster).update(pending_inventory=[{"index": 0, "uuid": "GPU-x", "model": "A100"}])
    bare = _problem(researcher, submit_kwargs(gpu_model=""))
    named = _problem(researcher, submit_kwargs(gpu_model="A100"))
    hosts_words = f"{hosts} registered host{'s' if hosts != 1 else ''}"
    gpus_words = "GPUs awaiting inventory approval" if pending else "no registered GPUs"
    assert bare.message == f"Cluster {cluster.name} has no GPUs yet (it has: {hosts_words}, {gpus_words})."
    assert named.message == f"Cluster {cluster.name} has no A100 GPUs (it has: {hosts_words}, {gpus_words})."
