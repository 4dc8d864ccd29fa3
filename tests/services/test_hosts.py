"""Host registration, token hashing and operator state changes."""

from __future__ import annotations

import hashlib

import pytest

from scheduler.models import GPU, Host, HostEvent
from scheduler.services import (
    HostError,
    authenticate_host_token,
    do_create_cluster,
    do_register_host,
    do_rotate_host_token,
    do_set_host_state,
)
from tests.conftest import gpu_specs


def test_host_registration_stores_only_the_token_hash(db):
    cluster = do_create_cluster("default")

    host, token = do_register_host(cluster, "node-1", gpu_specs("node-1", "A100", 8), {"rack": "r7"})

    assert len(token) >= 40
    assert host.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert not Host.objects.filter(token_hash=token).exists()
    assert token not in repr(list(Host.objects.values()))
    assert list(host.gpus.values_list("index", flat=True)) == list(range(8))
    assert host.labels == {"rack": "r7"}
    assert HostEvent.objects.filter(host=host, kind="registered").exists()


def test_host_token_authenticates_its_host_only(host_tokens, hosts):
    assert authenticate_host_token(host_tokens["a100-1"]) == hosts["a100-1"]
    assert authenticate_host_token(host_tokens["a100-1"] + "x") is None
    assert authenticate_host_token("") is None


def test_rotated_token_replaces_the_old_one(host_tokens, hosts):
    new = do_rotate_host_token(None, hosts["a100-1"])
    assert authenticate_host_token(host_tokens["a100-1"]) is None
    assert authenticate_host_token(new) == hosts["a100-1"]


def test_removed_host_token_no_longer_authenticates(host_tokens, hosts):
    Host.objects.filter(pk=hosts["a100-2"].pk).update(removed_at="2026-01-01T00:00:00Z")
    assert authenticate_host_token(host_tokens["a100-2"]) is None


@pytest.mark.parametrize(
    ("name", "gpus", "code"),
    [
        ("a100-1", gpu_specs("x", "A100", 1), "host_exists"),
        ("bad name", gpu_specs("y", "A100", 1), "invalid_host_name"),
        ("new-1", [], "invalid_gpus"),
        ("new-1", [(0, "u0", "A100", 1), (0, "u1", "A100", 1)], "invalid_gpus"),
        ("new-1", [(0, "u0", "A100", 1), (1, "u1", "H100", 1)], "mixed_models"),
        ("new-1", gpu_specs("a100-1", "A100", 1), "duplicate_gpu"),
    ],
)
def test_invalid_registration_is_refused_and_creates_nothing(cluster, name, gpus, code):
    before = (Host.objects.count(), GPU.objects.count())
    with pytest.raises(HostError) as info:
        do_register_host(cluster, name, gpus)
    assert info.value.code == code
    assert (Host.objects.count(), GPU.objects.count()) == before


def test_cordon_drain_now_and_resume_are_audited(admin, hosts, django_capture_on_commit_callbacks):
    host = hosts["a100-1"]
    with django_capture_on_commit_callbacks() as callbacks:
        do_set_host_state(admin, host, Host.State.CORDONED, "maintenance tomorrow")
    assert len(callbacks) == 3  # a tick, a push and the log line (left44: on commit)
    do_set_host_state(admin, host, Host.State.DRAINING, "fan failure", drain_now=True)
    host.refresh_from_db()
    assert (host.state, host.drain_now) == (Host.State.DRAINING, True)
    do_set_host_state(admin, host, Host.State.ACTIVE, "fixed")
    host.refresh_from_db()
    assert (host.state, host.drain_now) == (Host.State.ACTIVE, False)
    events = HostEvent.objects.filter(host=host).exclude(kind="registered")
    assert list(events.values_list("kind", "actor", "message")) == [
        ("cordoned", admin.pk, "maintenance tomorrow"),
        ("drain_now", admin.pk, "fan failure"),
        ("resumed", admin.pk, "fixed"),
    ]


def test_state_change_of_offline_host_is_kept_for_its_return(admin, hosts):
    host = hosts["a100-1"]
    Host.objects.filter(pk=host.pk).update(state=Host.State.OFFLINE, state_before_offline=Host.State.ACTIVE)
    do_set_host_state(admin, host, Host.State.DRAINING, "")
    host.refresh_from_db()
    assert (host.state, host.state_before_offline) == (Host.State.OFFLINE, Host.State.DRAINING)


def test_draining_a_drained_host_changes_nothing(admin, hosts):
    host = hosts["a100-1"]
    Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINED)
    do_set_host_state(admin, host, Host.State.DRAINING, "")
    host.refresh_from_db()
    assert host.state == Host.State.DRAINED
    assert not HostEvent.objects.filter(host=host, kind="draining").exists()


@pytest.mark.parametrize("state", [Host.State.OFFLINE, Host.State.DRAINED, "broken"])
def test_operators_cannot_set_offline_or_drained(admin, hosts, state):
    with pytest.raises(HostError) as info:
        do_set_host_state(admin, hosts["a100-1"], state, "")
    assert info.value.code == "invalid_state"


@pytest.mark.parametrize("how", ["registered", "joined"])
def test_a_new_host_takes_no_work_until_its_agent_says_hello(
    cluster, researcher, researcher_client, submit_kwargs, django_capture_on_commit_callbacks, how
):
    """brk30, mend31: a host joined with a join token, or registered by ``do_register_host``
    (``seed_demo --hosts``, the benches, the scenario runner), was ``active`` before its agent ever
    connected: it took placements and its GPUs counted as idle capacity until the sweep marked it
    offline. Every new host is ``offline`` until its agent's first hello, which makes it active;
    the API and ``fairway hosts`` say so meanwhile."""
    from datetime import timedelta

    from fairway_cli.cli import host_health
    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.reports import occupancy
    from scheduler.services import do_create_join_token, do_join_host, do_submit_workload
    from scheduler.tick import run_tick

    for name in ("a100-1", "a100-2"):
        do_set_host_state(None, Host.objects.get(name=name), "cordoned")
    specs = gpu_specs("a100-new", "A100", 8)
    if how == "joined":
        host, _token = do_join_host(do_create_join_token(None, cluster, timedelta(hours=1))[1], "a100-new", specs)
    else:
        host, _token = do_register_host(cluster, "a100-new", specs)
    host.refresh_from_db()
    assert (host.state, host.state_before_offline, host.last_heartbeat) == ("offline", "active", None)
    [occ] = occupancy([cluster])
    assert occ.idle == 4  # h100-1's: the new host's 8 are unavailable
    shown = researcher_client.get("/api/v1/hosts/a100-new/").json()
    assert (shown["state"], shown["last_heartbeat"]) == ("offline", None)
    assert host_health(shown) == "never connected"
    with django_capture_on_commit_callbacks(execute=True):
        do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
        run_tick(cluster.pk)
    assert not Attempt.objects.exists()

    reports = [lifecycle.GpuReport(i, uuid, model, mb) for i, uuid, model, mb in specs]
    lifecycle.host_hello(host, agent_version="1", gpus=reports, running=[])
    host.refresh_from_db()
    assert host.state == "active"
    assert host.events.filter(kind="online").get().message == "agent connected for the first time: active"
    with django_capture_on_commit_callbacks(execute=True):
        run_tick(cluster.pk)
    assert Attempt.objects.get().host_id == host.pk


def test_a_first_heartbeat_says_the_agent_connected_for_the_first_time(cluster):
    """mend31: the scenario runner's simulated agent is heard from by a heartbeat, not a hello;
    the host's event said "agent back: offline → active" of a host never heard from before."""
    from scheduler import lifecycle

    host, _token = do_register_host(cluster, "new-1", gpu_specs("new-1", "A100", 1))
    lifecycle.record_heartbeat(host, [])
    host.refresh_from_db()
    assert host.state == "active"
    assert host.events.filter(kind="online").get().message == "agent connected for the first time: active"
