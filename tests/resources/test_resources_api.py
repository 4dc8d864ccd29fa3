"""CPU, memory and shared-memory requests through the API (DESIGN.md §3.3): accepted as numbers
or sizes, shown back, refused clearly when malformed or when no host could offer them; host CPUs
and memory from the agent's hello in the hosts API; the limits a start carries."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounts.models import User
from agent import protocol
from budgets.models import Budget
from scheduler import gateway, lifecycle
from scheduler.gateway import _Part, limits_of
from scheduler.models import Attempt, AttemptGPU, Cluster, Host, Workload
from scheduler.services import do_register_host
from tests.replay.test_replay_command import replay

URL = "/api/v1/workloads/"
G = 1 << 30


@pytest.fixture
def sized(cluster, hosts):
    """The A100 hosts report 64 CPUs and 512G (as their hellos would); h100-1 stays unknown."""
    Host.objects.filter(name__startswith="a100").update(cpus=64, memory_bytes=512 * G)


def test_requests_are_stored_and_shown(researcher_client, submission, sized):
    body = researcher_client.post(URL, submission(cpus="16", memory="64G", shared_memory=8 * G), format="json").json()
    assert (body["cpus"], body["memory_bytes"], body["shared_memory_bytes"]) == (16, 64 * G, 8 * G)
    w = Workload.objects.get()
    assert (w.cpus, w.memory_bytes, w.shared_memory_bytes) == (16, 64 * G, 8 * G)
    assert w.events.get().data["memory_bytes"] == 64 * G
    # nothing asked: the per-GPU share, stored as null
    body = researcher_client.post(URL, submission(), format="json").json()
    assert (body["cpus"], body["memory_bytes"], body["shared_memory_bytes"]) == (None, None, None)


@pytest.mark.parametrize(
    ("overrides", "field", "code"),
    [
        ({"cpus": 65}, "cpus", "too_many_cpus"),
        ({"memory": "513G"}, "memory", "too_much_memory"),
        ({"cpus": 0}, "cpus", "invalid_cpus"),
        ({"cpus": "lots"}, "cpus", "invalid_cpus"),
        ({"memory": "32X"}, "memory", "invalid_memory"),
        ({"memory": -1}, "memory", "invalid_memory"),
        ({"shared_memory": "1.5"}, "shared_memory", "invalid_shared_memory"),
        ({"memory": "8G", "shared_memory": "16G"}, "shared_memory", "invalid_shared_memory"),
        # memory left out: at most the per-GPU share of the host that gives the least (4 of 8 GPUs, 512G: 256G)
        ({"shared_memory": "1P"}, "shared_memory", "invalid_shared_memory"),
        ({"shared_memory": f"{256 * G + 1}"}, "shared_memory", "invalid_shared_memory"),
    ],
)
def test_bad_or_impossible_requests_are_refused_and_create_nothing(
    researcher_client, submission, sized, overrides, field, code
):
    response = researcher_client.post(URL, submission(**overrides), format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["code"] == code and body[field]
    assert Workload.objects.count() == 0


def test_a_host_of_unknown_capacity_limits_nothing(researcher_client, submission, cluster):
    # hosts registered before the fields (no hello with them): any request is feasible
    response = researcher_client.post(URL, submission(cpus=500, memory="4T"), format="json")
    assert response.status_code == 201, response.json()


def test_hello_stores_the_hosts_cpus_and_memory_and_the_hosts_api_shows_them(admin_client_api, hosts):
    host = hosts["a100-1"]
    gpus = [lifecycle.GpuReport(g.index, g.uuid, g.model, g.memory_mb, "healthy") for g in host.gpus.all()]
    lifecycle.host_hello(host, agent_version="t", gpus=gpus, running=[], cpus=96, memory=768 * G)
    row = next(h for h in admin_client_api.get("/api/v1/hosts/").json() if h["name"] == "a100-1")
    assert (row["cpus"], row["memory_bytes"]) == (96, 768 * G)
    # an agent older than the fields: unknown again
    lifecycle.host_hello(host, agent_version="t", gpus=gpus, running=[])
    host.refresh_from_db()
    assert (host.cpus, host.memory_bytes) == (None, None)


def _part(gpus: int, requests=(None, None, None), host=(64, 512 * G)) -> _Part:  # noqa: ANN001
    return _Part(1, 1, 1, "", False, "", [], {}, 0, [(i, f"u{i}") for i in range(gpus)], None, False, requests, host, 8)


def test_a_start_carries_the_requests_or_the_hosts_per_gpu_share():
    share = limits_of(_part(2))
    assert (share.cpus, share.memory, share.shared_memory) == (16, 128 * G, None)
    asked = limits_of(_part(1, (4, 8 * G, G)))
    assert (asked.cpus, asked.memory, asked.shared_memory) == (4, 8 * G, G)
    assert limits_of(_part(1, host=(None, None))) is None  # unknown host, nothing asked: no limits


def test_a_memory_share_below_the_floor_reaches_the_runtime_as_the_floor():
    # Given a host of 8 GPUs and 16 MiB of memory (2 MiB a GPU: the share the policy counts)
    # When a workload that asks no memory starts on one GPU there
    limits = limits_of(_part(1, host=(64, 16 << 20)))
    # Then its limit is the 6 MiB floor Docker and the cgroup can run in (2 MiB failed every start)
    assert limits.memory == protocol.MIN_MEMORY_BYTES
    assert limits_of(_part(4, host=(64, 16 << 20))).memory == 8 << 20  # above the floor: the share


def test_the_demo_replay_asks_cpus_and_memory_from_the_gpu_count(db):
    call_command("seed_demo", "--hosts", "1", "--gpus", "8", stdout=StringIO())
    replay("--start", "34805", "--limit", "40", "--cpus-per-gpu", "6", "--memory-per-gpu", "48G")
    rows = list(Workload.objects.values_list("gpu_count", "cpus", "memory_bytes"))
    assert len(rows) == 40
    for gpus, cpus, memory in rows:
        assert (cpus, memory) == (6 * min(gpus, 8), 48 * G * min(gpus, 8))


@pytest.mark.parametrize(
    ("requests", "limits"), [((None, None, None), (8, 64 * G, None)), ((3, 5 * G, G), (3, 5 * G, G))]
)
def test_the_start_message_carries_the_limits_for_its_host(db, requests, limits):
    cluster = Cluster.objects.create(name="res")
    host, _ = do_register_host(cluster, "res-1", [(i, f"GPU-res-{i}", "H100", 80000) for i in range(8)])
    Host.objects.filter(pk=host.pk).update(cpus=64, memory_bytes=512 * G)
    owner = User.objects.create(username="res")
    cpus, memory, shm = requests
    w = Workload.objects.create(
        name="w", owner=owner, budget=Budget.objects.create(name="res-b"), cluster=cluster, gpu_model="H100",
        gpu_count=1, command=["true"], min_runtime_s=60, submitted_at=timezone.now(), seq=1,
        state=Workload.State.STARTING, cpus=cpus, memory_bytes=memory, shared_memory_bytes=shm,
    )  # fmt: skip
    attempt = Attempt.objects.create(workload=w, number=1, host=host, allocated=True, placed_at=timezone.now())
    AttemptGPU.objects.create(attempt=attempt, gpu=host.gpus.get(index=0))
    (start,) = gateway.desired_commands(host.pk, set())
    assert isinstance(start, protocol.Start)
    assert (start.limits.cpus, start.limits.memory, start.limits.shared_memory) == limits


def test_shared_memory_with_memory_left_out_is_at_most_the_per_gpu_share(researcher_client, submission, sized):
    """brk46: ``shared_memory: "1P"`` with no memory was accepted, the runtime given a /dev/shm larger
    than its memory limit. Left out, memory is the host's per-GPU share (DESIGN.md §3.3): shared
    memory is at most the share of the host of the model that gives the least (one wording with
    the memory given, ``admission.SHARED_MEMORY_PROBLEM``)."""
    from scheduler.policy.admission import SHARED_MEMORY_PROBLEM

    body = researcher_client.post(URL, submission(shared_memory="1P"), format="json").json()
    assert body["shared_memory"] == [
        f"{SHARED_MEMORY_PROBLEM}; left out, memory is the host's per-GPU share, 256G for 4 GPUs on the "
        "host of the model that gives the least: give memory too."
    ]
    given = researcher_client.post(URL, submission(memory="8G", shared_memory="16G"), format="json").json()
    assert given["shared_memory"] == [f"{SHARED_MEMORY_PROBLEM}."]
    ok = researcher_client.post(URL, submission(shared_memory="256G"), format="json")
    assert ok.status_code == 201, ok.json()
    assert Workload.objects.get().shared_memory_bytes == 256 * G


def test_shared_memory_on_hosts_of_unknown_memory_is_not_held_to_a_share(researcher_client, submission, cluster):
    response = researcher_client.post(URL, submission(shared_memory="1P"), format="json")
    assert response.status_code == 201, response.json()


def test_a_start_never_gives_more_shared_memory_than_its_memory_limit():
    """A host registered after the submission may give a smaller share than the one the submission
    was held to: the start's /dev/shm is at most its memory limit (tmpfs pages count in the cgroup's
    memory: more was a promise the limit broke)."""
    limits = limits_of(_part(1, (None, None, 1 << 50)))
    assert (limits.memory, limits.shared_memory) == (64 * G, 64 * G)
    assert limits_of(_part(1, (None, None, G))).shared_memory == G
    assert limits_of(_part(1, (None, None, 1 << 50), host=(None, None))).shared_memory == 1 << 50  # unknown host
