"""The owner's POSIX identity travels in ``start`` (issue 14): the server names the workload's owner,
with the uid/gid/groups an admin set; the protocol reads a ``start`` without ``owner`` as null."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from agent import protocol


def _start_for(username: object, **identity: object) -> protocol.Start:
    """The ``start`` the server sends for a one-GPU workload of ``username`` (a name: a new user
    with ``identity``; or a User)."""
    from accounts.models import User
    from budgets.models import Budget
    from scheduler import gateway
    from scheduler.models import Attempt, AttemptGPU, Cluster, Workload
    from scheduler.services import do_register_host

    cluster = Cluster.objects.create(name="iso")
    host, _token = do_register_host(cluster, "iso-1", [(0, "GPU-iso-0", "H100", 80000)])
    user = username if isinstance(username, User) else User.objects.create(username=username, **identity)
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


def _admin_change(admin_client: object, user: object, **posix: str) -> object:
    """POST the user's admin change form as an admin would, the POSIX fields as typed."""
    data = {
        "username": user.username,  # type: ignore[attr-defined]
        "email": "",
        "first_name": "",
        "last_name": "",
        "is_active": "on",
        "date_joined_0": "2026-01-01",
        "date_joined_1": "00:00:00",
        "last_login_0": "",
        "last_login_1": "",
        "posix_uid": "",
        "posix_gid": "",
        "posix_groups": "",
    }
    for prefix in ("memberships", "oidc_identities"):
        data.update({f"{prefix}-TOTAL_FORMS": "0", f"{prefix}-INITIAL_FORMS": "0", f"{prefix}-MIN_NUM_FORMS": "0"})
        data[f"{prefix}-MAX_NUM_FORMS"] = "1000"
    data.update(posix)
    return admin_client.post(f"/admin/accounts/user/{user.pk}/change/", data)  # type: ignore[attr-defined]


def _identity(user: object) -> tuple[object, object, object]:
    user.refresh_from_db()  # type: ignore[attr-defined]
    return user.posix_uid, user.posix_gid, user.posix_groups  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_an_admin_sets_the_posix_identity_and_the_start_carries_it(admin_client: object) -> None:
    """tryout: an admin sets a user's uid, gid and groups in the Django admin (groups typed as
    ``2000, 2001`` or as JSON), and the agent's ``start.owner`` carries them."""
    from accounts.models import User

    user = User.objects.create(username="erin")
    answer = _admin_change(admin_client, user, posix_uid="61234", posix_gid="5000", posix_groups="2000, 2001")
    assert answer.status_code == 302, answer.content.decode()[-3000:]  # type: ignore[attr-defined]
    assert _identity(user) == (61234, 5000, [2000, 2001])
    assert _start_for(user).owner == protocol.Owner(name="erin", uid=61234, gid=5000, groups=[2000, 2001])

    answer = _admin_change(admin_client, user, posix_uid="61234", posix_groups="[2002]")
    assert answer.status_code == 302
    assert _identity(user) == (61234, None, [2002])
    page = admin_client.get(f"/admin/accounts/user/{user.pk}/change/").content.decode()  # type: ignore[attr-defined]
    assert 'name="posix_groups"' in page and "2002" in page

    assert _admin_change(admin_client, user).status_code == 302  # all empty: the host maps the name
    assert _identity(user) == (None, None, [])


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"posix_uid": "-1"}, "greater than or equal to 0"),
        ({"posix_uid": "4294967295"}, "less than or equal to 4294967294"),
        ({"posix_uid": "alice"}, "whole number"),
        ({"posix_gid": "5000"}, "set a uid with a gid or groups"),
        ({"posix_uid": "7000", "posix_groups": "wheel"}, "group ids"),
        ({"posix_uid": "7000", "posix_groups": "[-3]"}, "group ids"),
        ({"posix_uid": "7000", "posix_gid": "4294967295"}, "less than or equal to 4294967294"),
        ({"posix_uid": "7100"}, "already"),
    ],
)
def test_an_invalid_posix_identity_is_refused_with_a_clear_error_and_changes_nothing(
    admin_client: object, fields: dict[str, str], words: str
) -> None:
    from accounts.models import User

    User.objects.create(username="other", posix_uid=7100)
    user = User.objects.create(username="frank", posix_uid=7000, posix_gid=7000, posix_groups=[1])
    answer = _admin_change(admin_client, user, **fields)
    assert answer.status_code == 200  # type: ignore[attr-defined]
    errors = answer.context["adminform"].form.errors.as_text()  # type: ignore[attr-defined]
    assert words in errors, errors
    assert _identity(user) == (7000, 7000, [1])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "fields",
    [
        {"posix_uid": "7000", "posix_groups": "6"},  # disk
        {"posix_uid": "7000", "posix_groups": "2000, 0"},  # root's group
        {"posix_uid": "7000", "posix_groups": "[999]"},
        {"posix_uid": "7000", "posix_gid": "0"},
        {"posix_uid": "7000", "posix_gid": "42"},  # shadow
    ],
)
def test_an_admin_set_system_group_is_refused_unless_a_cluster_allows_root_workloads(
    admin_client: object, fields: dict[str, str]
) -> None:
    """sec41: a system group (``disk``, ``docker``, ``shadow``, gid 0: below the first normal gid,
    ``FAIRWAY_POSIX_MIN_GID``, 1000 as useradd's ``GID_MIN``) is root-equivalent on a host. The
    admin refuses it with the reason while no cluster allows root workloads (every agent would
    refuse the start: it needs the cluster's and the host's consent, as a system uid); once one
    does, it is saved and each agent still checks its own host's consent and ``GID_MIN``."""
    from accounts.models import User
    from scheduler.models import Cluster

    user = User.objects.create(username="gina", posix_uid=7000)
    answer = _admin_change(admin_client, user, **fields)
    assert answer.status_code == 200  # type: ignore[attr-defined]
    errors = answer.context["adminform"].form.errors.as_text()  # type: ignore[attr-defined]
    assert "system group" in errors and "allow_root_workloads" in errors, errors
    assert _identity(user) == (7000, None, [])

    normal = {"posix_uid": "7000", "posix_gid": "1000", "posix_groups": "1000, 2000"}
    assert _admin_change(admin_client, user, **normal).status_code == 302  # type: ignore[attr-defined]
    assert _identity(user) == (7000, 1000, [1000, 2000])

    Cluster.objects.create(name="trusted", allow_root_workloads=True)
    assert _admin_change(admin_client, user, **fields).status_code == 302  # type: ignore[attr-defined]
    assert _identity(user)[0] == 7000


@pytest.mark.django_db
def test_an_admin_set_uid_0_is_refused_unless_a_cluster_allows_root_workloads(admin_client: object) -> None:
    """try43: the admin refused gid 0 and every system group, yet saved ``posix_uid`` 0 without a
    word; every agent then refuses each start of the user's work (uid 0 needs both root consents,
    docs/isolation.md), which the operator learns only from failed starts. Refused here, as the
    system groups are, while no cluster allows root workloads."""
    from accounts.models import User
    from scheduler.models import Cluster

    user = User.objects.create(username="hank", posix_uid=7000)
    answer = _admin_change(admin_client, user, posix_uid="0", posix_gid="2000")
    assert answer.status_code == 200  # type: ignore[attr-defined]
    errors = answer.context["adminform"].form.errors.as_text()  # type: ignore[attr-defined]
    assert "uid 0 is root" in errors and "allow_root_workloads" in errors, errors
    assert _identity(user) == (7000, None, [])

    Cluster.objects.create(name="trusted", allow_root_workloads=True)
    assert _admin_change(admin_client, user, posix_uid="0", posix_gid="2000").status_code == 302  # type: ignore[attr-defined]
    assert _identity(user) == (0, 2000, [])


@pytest.mark.django_db
def test_a_group_typed_by_name_is_answered_with_how_to_find_its_gid(admin_client: object) -> None:
    """try43: an operator who typed ``docker`` (the README names groups so) was answered "a list of
    at most 64 group ids (integers 0..4294967294)": the answer now names the word and the way to
    its number."""
    from accounts.models import User

    user = User.objects.create(username="ivan", posix_uid=7000)
    answer = _admin_change(admin_client, user, posix_uid="7000", posix_groups="docker, 2001")
    assert answer.status_code == 200  # type: ignore[attr-defined]
    errors = answer.context["adminform"].form.errors.as_text()  # type: ignore[attr-defined]
    assert "docker: group ids are numbers" in errors and "getent group docker" in errors, errors
    assert _identity(user) == (7000, None, [])
