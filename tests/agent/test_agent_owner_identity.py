"""The owner's POSIX identity travels in ``start`` (issue 14): the server names the workload's owner,
with the uid/gid/groups an admin set; the protocol reads a ``start`` without ``owner`` as null."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from agent import protocol


def _start_for(username: str, **identity: object) -> protocol.Start:
    from accounts.models import User
    from budgets.models import Budget
    from scheduler import gateway
    from scheduler.models import Attempt, AttemptGPU, Cluster, Workload
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="iso")
    host, _token = do_register_host(cluster, "iso-1", [(0, "GPU-iso-0", "H100", 80000)])
    user = User.objects.create(username=username, **identity)
    budget = Budget.objects.create(name="iso-budget")
    workload = Workload.objects.create(
        name="w", owner=user, budget=budget, cluster=cluster, gpu_model="H100", gpu_count=1,
        command=["true"], min_runtime_s=60, submitted_at=timezone.now(), seq=1, state=Workload.State.STARTING,
    )  # fmt: skip
    attempt = Attempt.objects.create(workload=workload, number=1, host=host, allocated=True, placed_at=timezone.now())
    AttemptGPU.objects.create(attempt=attempt, gpu=host.gpus.get(index=0))
    (start,) = gateway.desired_commands(host.pk, set())
    assert isinstance(start, protocol.Start)
    return start


@pytest.mark.django_db
def test_the_start_names_the_owner_with_the_identity_an_admin_set() -> None:
    start = _start_for("alice", posix_uid=12345, posix_gid=500, posix_groups=[600, 601])

    assert start.owner == protocol.Owner(name="alice", uid=12345, gid=500, groups=[600, 601])
    assert protocol.decode(protocol.encode(start)) == start


@pytest.mark.django_db
def test_without_an_identity_the_start_names_only_the_user() -> None:
    assert _start_for("bob").owner == protocol.Owner(name="bob")


@pytest.mark.django_db
def test_posix_identity_fields_are_validated() -> None:
    from accounts.models import User

    user = User(username="carol", posix_gid=5, posix_groups=[1])
    with pytest.raises(ValidationError, match="posix_uid"):
        user.full_clean()
    user = User(username="carol", posix_uid=7000, posix_groups=["wheel"])
    with pytest.raises(ValidationError, match="group ids"):
        user.full_clean()


def test_a_start_without_the_owner_field_reads_as_no_owner() -> None:
    start = protocol.Start(7, 3, "", ["true"], {}, [], [], 30, owner=protocol.Owner("alice", 1000, 1000, [27]), id=2)
    payload = json.loads(protocol.encode(start))
    assert payload["owner"] == {"name": "alice", "uid": 1000, "gid": 1000, "groups": [27]}
    del payload["owner"]

    assert protocol.decode(json.dumps(payload)).owner is None  # type: ignore[attr-defined]
    payload["owner"] = {"name": "alice", "uid": -1, "gid": None, "groups": []}
    with pytest.raises(protocol.ProtocolError, match="owner.uid"):
        protocol.decode(json.dumps(payload))


@pytest.mark.django_db
def test_the_user_admin_edits_the_posix_identity(admin_client: object) -> None:
    from accounts.models import User

    user = User.objects.create(username="dora", posix_uid=7001, posix_gid=7001, posix_groups=[5])
    page = admin_client.get(f"/admin/accounts/user/{user.pk}/change/")  # type: ignore[attr-defined]
    assert page.status_code == 200
    assert b"POSIX identity on GPU hosts" in page.content and b'name="posix_uid"' in page.content
