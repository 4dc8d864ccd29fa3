"""A new lab's tryout (try34): what a researcher, leadership or an operator tripped on, one test each."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import reverse


@pytest.fixture
def admin_web(admin) -> Client:
    c = Client()
    c.force_login(admin)
    return c


def _messages(page: str) -> list[str]:
    listed = page.split('class="messagelist"', 1)[1].split("</ul>")[0]
    return [m.strip() for m in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)]


def test_admin_messages_keep_the_lowercase_host_and_cluster_names(admin_web, hosts):
    """Django's admin writes every message through ``capfirst``: "A100-1: new host token ..."
    named a host that does not exist (names are case-sensitive: `fairway hosts drain A100-1`
    answers "No host"), and the join token's message began "Default: join token ..."."""
    host = hosts["a100-1"]
    response = admin_web.post(
        reverse("admin:scheduler_host_changelist"),
        {"action": "rotate_token", "_selected_action": [host.pk]},
        follow=True,
    )
    (message,) = _messages(response.content.decode())
    assert message.startswith("a100-1: new host token "), message
    response = admin_web.post(
        reverse("admin:scheduler_cluster_changelist"),
        {"action": "create_join_token", "_selected_action": [host.cluster_id]},
        follow=True,
    )
    (message,) = _messages(response.content.decode())
    assert message.startswith("default: join token fwj_"), message


@pytest.mark.parametrize(("value", "words"), [("30d", "is not an integer"), ("0", "must be >= 1")])
def test_a_bad_gpu_metrics_retention_stops_the_process_at_start_naming_it(monkeypatch, value, words):
    """README: "a malformed value stops the process with the variable's name". The retention was
    read only when the hourly prune ran (``int(value)`` in a worker): the server started, and every
    prune failed with a bare ValueError, so the per-minute GPU samples were never deleted."""
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured) as error:
        load_settings(monkeypatch, FAIRWAY_GPU_METRICS_RETENTION_DAYS=value)
    assert str(error.value).startswith("FAIRWAY_GPU_METRICS_RETENTION_DAYS=") and words in str(error.value)
    loaded = load_settings(monkeypatch, FAIRWAY_GPU_METRICS_RETENTION_DAYS="3")
    assert loaded["FAIRWAY"]["GPU_METRICS_RETENTION_DAYS"] == 3


def test_cordoning_an_offline_host_says_what_it_returns_as(admin, hosts, monkeypatch):
    """An operator cordoned a host whose agent was away: `fairway hosts cordon` answered only
    "gpu-b: offline", and the clusters page "offline · by boss, 01:34 UTC: not racked yet", which
    reads as if boss had taken it offline; both now name the state it returns to."""
    from scheduler.models import Host
    from tests.cli.inprocess import run_cli

    Host.objects.filter(name="a100-1").update(state=Host.State.OFFLINE, state_before_offline=Host.State.ACTIVE)
    out = run_cli(monkeypatch, admin, "hosts", "cordon", "a100-1", "--reason", "not racked yet")
    assert out.startswith("a100-1: offline; cordoned by admin at "), out
    assert out.rstrip().endswith("not racked yet (from when its agent is back)"), out

    page = Client()
    page.force_login(admin)
    html = page.get("/clusters/").content.decode()
    (reason,) = re.findall(r'<div class="small muted state-reason">([^<]*)</div>', html)
    assert reason.startswith("cordoned by admin at "), reason  # the CLI's words (host_reason_words, lt61)
    assert reason.endswith("not racked yet (from when its agent is back)"), reason


def test_email_notifications_without_an_address_on_the_account_say_so(researcher, monkeypatch):
    """A user created in the admin without an email address turned email notifications on with
    `fairway notifications --email failed`: the CLI answered "email: failed" and every email was
    then refused unsent ("the user has no email address"); the web page said so, the CLI now too."""
    from tests.cli.inprocess import run_cli

    out = run_cli(monkeypatch, researcher, "notifications", "--email", "failed")
    assert "email:   failed -> researcher@example.org" in out, out
    researcher.email = ""
    researcher.save(update_fields=["email"])
    out = run_cli(monkeypatch, researcher, "notifications")
    assert "email:   failed -> (no address on your account: ask an admin)" in out, out


def test_the_sacct_import_help_says_how_to_export_and_in_which_time_zone():
    """README: `import_history sacct usage.txt --cluster h100`, and the command's help said only
    "a Slurm `sacct -a -X -P` export (see the command's docstring)": a lab could not tell which
    fields to export, nor that times without an offset are read as UTC (sacct prints local time:
    a lab at UTC-8 imported its week eight hours early). The help now gives the command, TZ=UTC."""
    import argparse

    from scheduler.management.commands.import_history import Command

    parser = Command().create_parser("manage.py", "import_history")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["sacct"].format_help().split())
    assert (
        "TZ=UTC sacct -a -X -P --duplicates -S" in text and "-o JobID,User,Account,AllocTRES,Start,End,State" in text
    ), text


def test_an_operator_removes_a_decommissioned_host_and_its_gpus_stop_counting(
    admin_web, admin, researcher, hosts, cluster, submit_kwargs
):
    """A lab retiring a machine had no way to take it out: uninstalled and revoked, it stayed
    `offline` for ever, its GPUs in the cluster's count (every budget's entitlement, the pyramid's
    registered time). The hosts admin now removes a host that holds no attempt (refused while
    one is open: drain it first); `removed_at` was already honoured everywhere else."""
    from scheduler import lifecycle
    from scheduler.models import GPU, Attempt, Host, HostEvent
    from scheduler.services import HostError, do_register_host, do_submit_workload
    from scheduler.tick import run_tick

    def gpus() -> int:
        (tree,) = researcher_api.get("/api/v1/budgets/tree/", {"cluster": cluster.name}).json()
        return tree["gpus"]

    from rest_framework.test import APIClient

    researcher_api = APIClient()
    researcher_api.force_authenticate(researcher)
    before = gpus()
    busy = do_submit_workload(researcher, **submit_kwargs(gpu_count=8, gpu_model="A100"))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=busy)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    idle = next(h for name, h in hosts.items() if name.startswith("a100") and h.pk != attempt.host_id)

    url = reverse("admin:scheduler_host_changelist")
    response = admin_web.post(
        url, {"action": "remove_hosts", "_selected_action": [attempt.host_id], "confirm": "yes"}, follow=True
    )
    (refused,) = _messages(response.content.decode())
    assert "drain it first" in refused and Host.objects.get(pk=attempt.host_id).removed_at is None

    response = admin_web.post(
        url, {"action": "remove_hosts", "_selected_action": [idle.pk], "confirm": "yes"}, follow=True
    )
    assert _messages(response.content.decode()) == ["1 host(s) removed from their cluster."]
    idle.refresh_from_db()
    assert idle.removed_at is not None
    assert HostEvent.objects.filter(host=idle, kind="removed", actor=admin).exists()
    assert gpus() == before - 8
    assert idle.name not in [h["name"] for h in researcher_api.get("/api/v1/hosts/").json()]
    with pytest.raises(HostError, match="was removed from its cluster: join under another name"):
        do_register_host(cluster, idle.name, [(0, "GPU-new-0", "A100", 81920)])
    # the machine comes back as another name: its GPUs move with it (its old host's history stays)
    uuids = list(GPU.objects.filter(host=idle).order_by("index").values_list("uuid", flat=True))
    back, _token = do_register_host(cluster, "a100-1b", [(i, u, "A100", 81920) for i, u in enumerate(uuids)])
    assert list(GPU.objects.filter(host=back).order_by("index").values_list("uuid", flat=True)) == uuids
    assert gpus() == before  # offline until its first hello, but registered: counted again
    busy_uuid = GPU.objects.filter(host_id=attempt.host_id).values_list("uuid", flat=True).first()
    with pytest.raises(HostError, match="GPU UUIDs already registered"):
        do_register_host(cluster, "thief", [(0, busy_uuid, "A100", 81920)])


def test_fairway_share_marks_an_archived_budget_as_fairway_budgets_does(researcher, org_tree, cluster, monkeypatch):
    """An archived leaf kept its line in `fairway share` with a blank rank and nothing saying why;
    `fairway budgets` and the budgets page write "(archived)" after its name."""
    from budgets.services import do_archive_budget
    from tests.cli.inprocess import run_cli

    do_archive_budget(org_tree["nlp/olmo"])
    (line,) = [ln for ln in run_cli(monkeypatch, researcher, "share").splitlines() if "olmo" in ln]
    assert line.split()[:2] == ["olmo", "(archived)"], line


def test_elapsed_and_charge_count_the_same_whole_seconds(researcher, cluster, submit_kwargs):
    """`fairway history` showed a 1-GPU attempt with ELAPSED 20s and a charge of 21 GPU-seconds
    (elapsed 0 beside "less than 0.1 GPU-min" for a short one): the charge counts whole seconds
    from its start to its end, floored (docs/standing.md), the elapsed time the exact span
    truncated. Every elapsed time of a closed attempt now counts the charge's seconds."""
    from datetime import timedelta

    from django.utils import timezone
    from rest_framework.test import APIClient

    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, gpu_model="A100", min_runtime_s=60))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    t0 = timezone.now().replace(microsecond=0) + timedelta(seconds=2)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=t0 + timedelta(seconds=0.9))
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0, now=t0 + timedelta(seconds=2.1))
    attempt.refresh_from_db()
    assert attempt.charged_gpu_seconds == 2  # seconds t0+0 .. t0+2, one GPU

    api = APIClient()
    api.force_authenticate(researcher)
    (row,) = api.get("/api/v1/workloads/", {"state": "succeeded"}).json()["results"]
    detail = api.get(f"/api/v1/workloads/{w.pk}/").json()
    (past,) = api.get("/api/v1/workloads/history/", {"since": "1d"}).json()["results"]
    assert (row["accounting"]["elapsed_s"], detail["accounting"]["elapsed_s"], past["elapsed_s"]) == (2, 2, 2)


def test_removing_hosts_in_the_admin_asks_for_confirmation_first(admin_web, hosts):
    """tryout35: "Remove from the cluster for good" acted at once on the selected rows (an active
    host with nothing on it was gone on one click, and a removed name can never join again), while
    ``fairway hosts remove`` asks for ``--yes`` and Django's own delete shows a confirmation page.
    The action now shows one, naming each host and its state, and removes only when confirmed."""
    url = reverse("admin:scheduler_host_changelist")
    host = hosts["a100-2"]

    page = admin_web.post(url, {"action": "remove_hosts", "_selected_action": [host.pk]})

    assert page.status_code == 200
    html = page.content.decode()
    assert "Remove 1 host from its cluster for good?" in html and "a100-2" in html and "active" in html
    assert 'name="confirm" value="yes"' in html
    host.refresh_from_db()
    assert host.removed_at is None  # nothing removed yet
    done = admin_web.post(url, {"action": "remove_hosts", "_selected_action": [host.pk], "confirm": "yes"}, follow=True)
    assert _messages(done.content.decode()) == ["1 host(s) removed from their cluster."]
    host.refresh_from_db()
    assert host.removed_at is not None


def test_a_host_action_in_the_admin_without_a_reason_names_its_actor_once(admin_web, hosts):
    """lead47: a drain scheduled in the admin with no reason read "drain scheduled at Dec 9 08:00:00
    UTC by admin: admin action by admin" on the clusters page and in `fairway hosts`: the actor is
    recorded beside the reason already. The reason left empty is "admin action", as a budget's."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import HostEvent
    from scheduler.services import scheduled_drain

    url = reverse("admin:scheduler_host_changelist")
    host = hosts["a100-2"]
    at = (timezone.now() + timedelta(days=1)).strftime("%Y-%m-%dT%H:%MZ")
    admin_web.post(url, {"action": "schedule_drain", "_selected_action": [host.pk], "confirm": "yes", "at": at})
    host.refresh_from_db()
    shown = scheduled_drain(host)
    assert shown is not None and shown["summary"].endswith("by admin: admin action"), shown
    admin_web.post(url, {"action": "cordon", "_selected_action": [host.pk]})
    event = HostEvent.objects.filter(host=host).order_by("id").last()
    assert event is not None and event.kind == "cordoned", event
    assert "admin action" in event.message and "by admin" not in event.message, event.message
