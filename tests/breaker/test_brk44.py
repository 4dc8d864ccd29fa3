"""brk44: a staff member's reading of a budget's statement comes from Django permissions, as their
reading of other people's logs and env values does (lim42): ``is_staff`` alone (an OIDC ``staff``
grant with no permission given) read every budget's statement, each user's GPU-hours, on the API,
the CLI and the budgets page's links."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from accounts.models import User
from scheduler.models import Host, HostEvent
from tests.cli.inprocess import run_cli
from tests.conftest import PASSWORD


def _staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD, is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(content_type__app_label="budgets", codename=codename))
    return User.objects.get(pk=user.pk)  # no permission cache


@pytest.mark.django_db
def test_staff_without_permissions_read_no_statement(org_tree, api_client_for):
    bare = api_client_for(_staff("bare"))
    answer = bare.get(f"/api/v1/budgets/{org_tree['nlp'].pk}/statement.csv")
    assert answer.status_code == 403
    assert "view_budget" in answer.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("codename", ["view_budget", "change_budget"])
def test_staff_with_a_budget_permission_read_every_statement(org_tree, api_client_for, codename):
    reader = api_client_for(_staff("reader", codename))
    answer = reader.get(f"/api/v1/budgets/{org_tree['vision/sam'].pk}/statement.csv")
    assert answer.status_code == 200
    assert answer.content.startswith(b"budget,day,")


@pytest.mark.django_db
def test_the_budgets_page_links_only_the_statements_one_may_read(org_tree, client):
    _staff("bare")
    client.login(username="bare", password=PASSWORD)
    page = client.get("/budgets/")
    assert page.status_code == 200
    assert "statement.csv" not in page.content.decode()
    _staff("reader", "view_budget")
    client.login(username="reader", password=PASSWORD)
    page = client.get("/budgets/")
    assert f"/api/v1/budgets/{org_tree['vision/sam'].pk}/statement.csv" in page.content.decode()


@pytest.mark.django_db
def test_the_cli_says_why_bare_staff_read_no_statement(org_tree, monkeypatch):
    assert "view_budget" in run_cli(monkeypatch, _staff("bare"), "statement", "nlp", expect=1)


# --- a removed host's token ---------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("action", ["rotate", "revoke"])
def test_a_removed_hosts_token_is_neither_rotated_nor_revoked(hosts, host_tokens, action):
    """A rotation gave a removed host a token the admin was told to put in its agent's config (it is
    refused there with 4410 for good), and took the removal's 4410 from the token its agent holds:
    it was then refused as unknown (4401), which an agent retries for ever."""
    from scheduler.gateway import link_refusal
    from scheduler.services import HostError, do_remove_host, do_revoke_host_token, do_rotate_host_token

    host = do_remove_host(None, hosts["a100-1"])
    before = Host.objects.values_list("token_hash", "link_generation").get(pk=host.pk)
    events = HostEvent.objects.filter(host=host).count()
    with pytest.raises(HostError) as refused:
        (do_rotate_host_token if action == "rotate" else do_revoke_host_token)(None, host)
    assert refused.value.code == "host_removed"
    assert Host.objects.values_list("token_hash", "link_generation").get(pk=host.pk) == before
    assert HostEvent.objects.filter(host=host).count() == events
    assert link_refusal(host_tokens["a100-1"]) == ("host 'a100-1' was removed from the cluster", True)


@pytest.mark.django_db
def test_the_admins_rotation_of_a_removed_host_says_so_and_shows_no_token(hosts, admin, client):
    from scheduler.services import do_remove_host

    removed = do_remove_host(None, hosts["a100-1"])
    client.force_login(admin)
    answer = client.post(
        "/admin/scheduler/host/",
        {"action": "rotate_token", "_selected_action": [removed.pk, hosts["a100-2"].pk]},
        follow=True,
    )
    said = [str(m) for m in answer.context["messages"]]
    assert "a100-1: Host a100-1 was removed from the cluster." in said
    assert not any(m.startswith("a100-1: new host token") for m in said)
    assert any(m.startswith("a100-2: new host token") for m in said)


@pytest.mark.django_db
def test_a_removed_hosts_held_inventory_is_not_approved(hosts):
    """A host whose agent's GPU inventory awaited approval was removed (or removed while the approval
    waited for its lock): the approval, the one host action that did not refuse a removed host,
    resumed it (state active), put its GPUs back in an inventory and made GPU rows for it."""
    from config.errors import ServiceError
    from scheduler import lifecycle
    from scheduler.models import GPU
    from scheduler.services import do_remove_host

    host = hosts["a100-1"]
    gpus = list(GPU.objects.filter(host=host).order_by("index"))
    reported = [lifecycle.GpuReport(g.index, g.uuid, "A100") for g in gpus[:7]]
    reported.append(lifecycle.GpuReport(8, "GPU-new-card", "A100"))
    lifecycle.host_hello(host, agent_version="t", gpus=reported, running=[])
    assert Host.objects.get(pk=host.pk).pending_inventory is not None
    do_remove_host(None, Host.objects.get(pk=host.pk))
    before = Host.objects.values_list("state", "state_before_offline", "pending_inventory").get(pk=host.pk)
    rows = sorted(GPU.objects.values_list("pk", "host_id", "uuid", "removed_at"))
    events = HostEvent.objects.filter(host=host).count()

    with pytest.raises(ServiceError) as refused:
        lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=host.pk))

    assert (refused.value.code, refused.value.message) == ("host_removed", "Host a100-1 was removed from the cluster.")
    assert Host.objects.values_list("state", "state_before_offline", "pending_inventory").get(pk=host.pk) == before
    assert sorted(GPU.objects.values_list("pk", "host_id", "uuid", "removed_at")) == rows
    assert HostEvent.objects.filter(host=host).count() == events


def _ran_on(gpu, researcher, submit_kwargs):
    """A finished attempt of ``researcher`` that held ``gpu`` an hour, two hours ago."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import Attempt, AttemptGPU, Workload
    from scheduler.services import do_submit_workload

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    now = timezone.now()
    attempt = Attempt.objects.create(
        workload=w,
        number=1,
        host=gpu.host,
        allocated=True,
        placed_at=now - timedelta(hours=2),
        started_at=now - timedelta(hours=2),
        ended_at=now - timedelta(hours=1),
        end_reason="succeeded",
    )
    AttemptGPU.objects.create(attempt=attempt, gpu=gpu, open=False)
    Workload.objects.filter(pk=w.pk).update(state="succeeded", finished_at=now - timedelta(hours=1))
    return attempt


@pytest.mark.django_db
def test_a_machine_that_rejoins_under_another_name_leaves_its_old_hosts_history_alone(
    hosts, researcher, submit_kwargs, admin_client_api
):
    """docs/deploy.md §9: "a machine that comes back joins under another name, and its GPUs (by UUID)
    move to it", its old host's history staying. The GPU rows themselves moved, so every attempt
    that ran on the removed host named the new one: the API's ``hosts`` and ``gpus``
    (``a100-1b:0`` beside ``host: a100-1``), the history (sacct), the page and ``fairway show``."""
    from scheduler.models import GPU
    from scheduler.services import do_register_host, do_remove_host

    old = hosts["a100-1"]
    gpu = GPU.objects.get(host=old, index=3)
    attempt = _ran_on(gpu, researcher, submit_kwargs)
    do_remove_host(None, old)
    specs = [(g.index, g.uuid, "A100", 81920) for g in GPU.objects.filter(host=old).order_by("index")]

    new, _token = do_register_host(old.cluster, "a100-1b", specs)

    assert sorted(GPU.objects.filter(host=new).values_list("index", "uuid")) == [(i, u) for i, u, _m, _mb in specs]
    shown = admin_client_api.get(f"/api/v1/workloads/{attempt.workload_id}/").json()["attempts"][0]
    assert (shown["host"], shown["hosts"], shown["gpus"]) == ("a100-1", ["a100-1"], ["a100-1:3"])
    (row,) = admin_client_api.get("/api/v1/workloads/history/").json()["results"]
    assert row["hosts"] == ["a100-1"]


@pytest.mark.django_db
def test_an_approved_inventory_taking_a_removed_hosts_card_leaves_that_hosts_history_alone(
    hosts, researcher, submit_kwargs
):
    from scheduler import lifecycle
    from scheduler.models import GPU, Attempt
    from scheduler.services import do_remove_host

    old, other = hosts["a100-1"], hosts["a100-2"]
    card = GPU.objects.get(host=old, index=5)
    attempt = _ran_on(card, researcher, submit_kwargs)
    do_remove_host(None, old)
    reported = [lifecycle.GpuReport(g.index, g.uuid, "A100") for g in GPU.objects.filter(host=other)]
    reported.append(lifecycle.GpuReport(8, card.uuid, "A100"))  # the card, moved into a100-2
    lifecycle.host_hello(other, agent_version="t", gpus=reported, running=[])

    lifecycle.do_approve_host_inventory(None, Host.objects.get(pk=other.pk))

    assert GPU.objects.get(host=other, index=8).uuid == card.uuid
    assert Attempt.objects.get(pk=attempt.pk).host_names() == ["a100-1"]
    assert [str(link.gpu) for link in Attempt.objects.get(pk=attempt.pk).ordered_gpu_links()] == ["a100-1:5"]
