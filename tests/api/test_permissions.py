"""Authorization matrix: every API endpoint × every persona, with the status each must get.

Personas: ``admin`` (superuser), ``program`` (member of the program ``nlp``), ``project``
(member of ``nlp/olmo``, not the owner), ``owner`` (member of ``nlp/olmo``, owns the workload),
``outsider`` (member of ``vision/sam`` only), ``host`` (a host's agent token, which the REST API
does not accept) and ``anonymous``. On every denial (4xx) nothing in the database changed.

Rules (issue 7): researchers submit only to budgets they are members of and see env values and
logs only of their projects; every workload's name, budget, size and state are visible to all;
only admins operate hosts (and change shares, which the API does not offer at all).
"""

from __future__ import annotations

from typing import Any

import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.models import Membership, User
from accounts.services import create_api_token, do_add_membership
from budgets.models import Budget
from scheduler.models import Host, HostEvent, Workload, WorkloadEvent
from scheduler.services import do_submit_workload

PERSONAS = ["admin", "program", "project", "owner", "outsider", "host", "anonymous"]
USERS = ["admin", "program", "project", "owner", "outsider"]
ALL_200 = {**dict.fromkeys(USERS, 200), "host": 401, "anonymous": 401}
ADMIN_ONLY = {
    "admin": 200,
    "program": 403,
    "project": 403,
    "owner": 403,
    "outsider": 403,
    "host": 401,
    "anonymous": 401,
}

SUBMISSION = {
    "name": "matrix",
    "budget": "nlp/olmo",
    "cluster": "default",
    "gpu_model": "A100",
    "gpu_count": 1,
    "command": ["python", "x.py"],
    "min_runtime": 60,
}

# (method, path template, body, {persona: status})
MATRIX: list[tuple[str, str, Any, dict[str, int]]] = [
    ("get", "/api/v1/me/", None, ALL_200),
    ("get", "/api/v1/budgets/", None, ALL_200),
    ("get", "/api/v1/budgets/{budget}/", None, ALL_200),
    ("get", "/api/v1/budgets/tree/", None, ALL_200),
    ("get", "/api/v1/workloads/", None, ALL_200),
    ("get", "/api/v1/workloads/{workload}/", None, ALL_200),
    ("get", "/api/v1/clusters/", None, ALL_200),
    ("get", "/api/v1/clusters/default/", None, ALL_200),
    ("get", "/api/v1/hosts/", None, ALL_200),
    ("get", "/api/v1/hosts/a100-1/", None, ALL_200),
    ("get", "/api/v1/metrics/", None, ALL_200),
    ("get", "/api/v1/tokens/", None, ALL_200),
    (
        "post",
        "/api/v1/workloads/",
        SUBMISSION,
        {
            **dict.fromkeys(["admin", "program", "project", "owner"], 201),
            "outsider": 400,
            "host": 401,
            "anonymous": 401,
        },
    ),
    (
        "post",
        "/api/v1/workloads/{workload}/cancel/",
        {},
        {"admin": 200, "owner": 200, "program": 403, "project": 403, "outsider": 403, "host": 401, "anonymous": 401},
    ),
    (
        # Members may read logs; the workload has no attempt yet, so they get 404 no_attempt.
        "get",
        "/api/v1/workloads/{workload}/logs/",
        None,
        {
            **dict.fromkeys(["admin", "program", "project", "owner"], 404),
            "outsider": 403,
            "host": 401,
            "anonymous": 401,
        },
    ),
    ("post", "/api/v1/hosts/a100-1/cordon/", {"reason": "x"}, ADMIN_ONLY),
    ("post", "/api/v1/hosts/a100-1/drain/", {"reason": "x"}, ADMIN_ONLY),
    ("post", "/api/v1/hosts/a100-1/drain-now/", {"reason": "x"}, ADMIN_ONLY),
    ("post", "/api/v1/hosts/a100-1/resume/", {"reason": "x"}, ADMIN_ONLY),
    ("post", "/api/v1/tokens/", {"name": "matrix"}, {**dict.fromkeys(USERS, 201), "host": 401, "anonymous": 401}),
    (
        # The owner's personal token: only the owner revokes it; to anyone else it does not exist.
        "delete",
        "/api/v1/tokens/{owner_token}/",
        None,
        {
            **dict.fromkeys(["admin", "program", "project", "outsider"], 404),
            "owner": 204,
            "host": 401,
            "anonymous": 401,
        },
    ),
]


@pytest.fixture
def world(org_tree: dict[str, Budget], cluster: Any, host_tokens: dict[str, str]) -> dict[str, Any]:
    """Personas with API clients, a pending workload of ``owner`` in nlp/olmo, a personal token of ``owner``."""
    users = {
        "admin": User.objects.create_user("admin", is_staff=True, is_superuser=True),
        "program": User.objects.create_user("program"),
        "project": User.objects.create_user("project"),
        "owner": User.objects.create_user("owner"),
        "outsider": User.objects.create_user("outsider"),
    }
    do_add_membership(users["program"], org_tree["nlp"], Membership.Role.MEMBER)
    do_add_membership(users["project"], org_tree["nlp/olmo"])
    do_add_membership(users["owner"], org_tree["nlp/olmo"])
    do_add_membership(users["outsider"], org_tree["vision/sam"])
    clients: dict[str, APIClient] = {}
    for name, user in users.items():
        clients[name] = APIClient()
        clients[name].credentials(HTTP_AUTHORIZATION=f"Token {create_api_token(user)[1]}")
    clients["host"] = APIClient()
    clients["host"].credentials(HTTP_AUTHORIZATION=f"Token {host_tokens['a100-1']}")
    clients["anonymous"] = APIClient()
    workload = do_submit_workload(
        users["owner"],
        name="secretive",
        budget=org_tree["nlp/olmo"],
        cluster=cluster,
        gpu_model="A100",
        gpu_count=2,
        image="",
        command=["python", "train.py"],
        env={"API_KEY": {"value": "s3cret", "secret": True}, "PLAIN": "visible-to-members"},
        min_runtime_s=3600,
    )
    owner_token, _ = create_api_token(users["owner"], name="personal", kind="personal")
    return {
        "users": users,
        "clients": clients,
        "workload": workload,
        "ids": {"workload": workload.pk, "budget": org_tree["nlp/olmo"].pk, "owner_token": owner_token.token_key},
    }


def state_of_the_world() -> dict[str, Any]:
    """Everything an endpoint could change."""
    return {
        "workloads": sorted(Workload.objects.values_list("id", "state", "pending_reason")),
        "workload_events": WorkloadEvent.objects.count(),
        "hosts": sorted(Host.objects.values_list("name", "state", "drain_now")),
        "host_events": HostEvent.objects.count(),
        "tokens": sorted(AuthToken.objects.values_list("digest", flat=True)),
        "budgets": sorted(Budget.objects.values_list("id", "shares", "hold", "archived_at")),
        "memberships": sorted(Membership.objects.values_list("user_id", "budget_id", "role")),
    }


@pytest.mark.parametrize("persona", PERSONAS)
@pytest.mark.parametrize(
    ("method", "path", "body", "expected"), MATRIX, ids=[f"{m.upper()} {p}" for m, p, _b, _e in MATRIX]
)
def test_authorization_matrix(world, persona, method, path, body, expected):
    url = path.format(**world["ids"])
    before = state_of_the_world()

    response = getattr(world["clients"][persona], method)(url, body, format="json")

    assert response.status_code == expected[persona], (persona, method, url, response.content[:300])
    if response.status_code >= 400:
        assert state_of_the_world() == before, f"{persona} was refused {method} {url} but something changed"
        assert set(response.json()) >= {"code"}


@pytest.mark.parametrize(
    ("persona", "sees_env"),
    [("admin", True), ("program", True), ("project", True), ("owner", True), ("outsider", False)],
)
def test_env_values_only_for_members_and_secrets_never(world, persona, sees_env):
    body = world["clients"][persona].get(f"/api/v1/workloads/{world['workload'].pk}/").json()

    assert (body["name"], body["budget"], body["gpu_count"], body["state"]) == ("secretive", "nlp/olmo", 2, "pending")
    if sees_env:
        assert body["env"] == {
            "API_KEY": {"value": "********", "secret": True},
            "PLAIN": {"value": "visible-to-members", "secret": False},
        }
    else:
        assert body["env"] is None
    assert b"s3cret" not in world["clients"][persona].get("/api/v1/workloads/").content


def test_host_tokens_are_refused_however_they_are_sent(world, host_tokens):
    for header in (f"Bearer {host_tokens['a100-1']}", f"Token {host_tokens['a100-1']}", host_tokens["a100-1"]):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=header)
        assert client.get("/api/v1/me/").status_code == 401
        assert client.post("/api/v1/workloads/", SUBMISSION, format="json").status_code == 401


def test_shares_cannot_be_changed_through_the_api(world):
    budget = world["ids"]["budget"]
    before = state_of_the_world()
    for persona in USERS:
        client = world["clients"][persona]
        for method in ("put", "patch", "delete"):
            assert (
                getattr(client, method)(f"/api/v1/budgets/{budget}/", {"shares": 99}, format="json").status_code == 405
            )
        assert client.post("/api/v1/budgets/", {"name": "x", "shares": 5}, format="json").status_code == 405
    assert state_of_the_world() == before


def test_every_refusal_of_permission_answers_one_code(researcher_client, outsider_client, hosts, org_tree):
    """tryout: a researcher draining a host got ``permission_denied`` (DRF's code) while a cancel of
    someone else's work got ``forbidden`` (the services' code, the one the API documents): one code."""
    # Given a permission class refusing (a host action), a view refusing (a budget's statement)
    drain = researcher_client.post("/api/v1/hosts/a100-1/drain/", {}, format="json")
    statement = outsider_client.get(f"/api/v1/budgets/{org_tree['nlp/olmo'].pk}/statement.csv")

    # Then both answer 403 with the documented code
    assert (drain.status_code, drain.json()["code"]) == (403, "forbidden")
    assert (statement.status_code, statement.json()["code"]) == (403, "forbidden")
