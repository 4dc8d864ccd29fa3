"""mend33: faults found by earlier helpers; each case names what it was."""

from __future__ import annotations

import ipaddress
import socket

import pytest

EMBEDDING = [
    "::127.0.0.1",  # IPv4-compatible (deprecated, still routed by some stacks)
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:10.0.0.5",
    "64:ff9b::7f00:1",  # NAT64 well-known prefix → 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 → 169.254.169.254 (cloud metadata)
    "64:ff9b:1::a00:1",  # NAT64 local-use prefix (RFC 8215)
    "2002:7f00:1::",  # 6to4 → 127.0.0.1
    "2002:a00:1::1",  # 6to4 → 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
]


@pytest.mark.parametrize("address", EMBEDDING)
def test_a_webhook_to_an_ipv6_address_embedding_a_private_ipv4_is_refused(address):
    """``http://[::127.0.0.1]/``, ``http://[64:ff9b::7f00:1]/`` and ``http://[2002:7f00:1::]/`` were
    taken: Python calls those IPv6 addresses global, yet each reaches the IPv4 it embeds (here
    loopback) through the server's compat, NAT64 or 6to4 route. The refusal names the address."""
    from scheduler import notifications

    problem = notifications.webhook_problem(f"http://[{address}]/x") or ""
    assert "private or local" in problem
    assert str(ipaddress.ip_address(address)) in problem


@pytest.mark.parametrize("address", EMBEDDING)
def test_a_webhook_name_resolving_to_such_an_address_is_refused(monkeypatch, address):
    from scheduler import notifications

    def resolve(host, port, *args, **kwargs):
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    problem = notifications.webhook_problem("https://hooks.example.org/x") or ""
    assert "private or local" in problem and "hooks.example.org" in problem


@pytest.mark.parametrize(
    "address", ["2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "93.184.216.34"]
)
def test_a_webhook_to_a_public_address_or_one_embedding_a_public_ipv4_is_taken(address):
    from scheduler import notifications

    host = f"[{address}]" if ":" in address else address
    assert notifications.webhook_problem(f"http://{host}/x") is None


def test_the_api_the_page_and_the_cli_say_alike_that_a_running_attempts_host_is_silent(
    researcher, researcher_client, cluster, submit_kwargs, monkeypatch, settings
):
    """The workload page said, for a running attempt whose host is offline, since when the host is
    silent and when the attempt ends ``lost``; the API's detail and ``fairway show`` said
    "running" and nothing more. All three read one source now (``lifecycle.silent_hosts``)."""
    from datetime import timedelta

    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from fairway_cli.numbers import instant_text
    from fairway_cli.words import silent_host_words
    from scheduler import lifecycle
    from scheduler.models import Attempt, Host
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick
    from tests.cli.inprocess import run_cli

    settings.FAIRWAY = {**settings.FAIRWAY, "HOST_LOST_AFTER_S": 300}
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    heard = timezone.now().replace(microsecond=0) - timedelta(seconds=40)
    Host.objects.filter(pk=attempt.host_id).update(state=Host.State.OFFLINE, last_heartbeat=heard)
    name = attempt.host.name

    with CaptureQueriesContext(connection) as offline:
        detail = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    silent = detail["attempts"][0]["silent_hosts"]
    assert len(silent) == 1 and silent[0]["host"] == name
    assert silent[0]["last_heartbeat"].replace("Z", "+00:00") == heard.isoformat()
    assert silent[0]["lost_at"].replace("Z", "+00:00") == (heard + timedelta(seconds=300)).isoformat()

    sentence = silent_host_words(silent[0])
    assert sentence.startswith(f"host {name} silent since {instant_text(heard)}; ")
    assert f"ends lost at {instant_text(heard + timedelta(seconds=300))} unless it returns" in sentence
    assert sentence in run_cli(monkeypatch, researcher, "show", str(w.pk))
    browser = Client()
    browser.force_login(researcher)
    assert sentence in browser.get(f"/workloads/{w.pk}/").content.decode()

    # Back online: nothing silent, on every surface
    Host.objects.filter(pk=attempt.host_id).update(state=Host.State.ACTIVE, last_heartbeat=timezone.now())
    with CaptureQueriesContext(connection) as online:
        assert researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["silent_hosts"] == []
    assert len(offline.captured_queries) == len(online.captured_queries)  # the hosts come with the GPU links
    assert "silent since" not in run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert "silent since" not in browser.get(f"/workloads/{w.pk}/").content.decode()


def test_a_host_never_heard_from_is_lost_its_timeout_after_its_registration(
    researcher, researcher_client, cluster, submit_kwargs, monkeypatch
):
    """The sweep's own rule (``sweep_hosts``): no heartbeat yet, lost that long after it joined."""
    from fairway_cli.numbers import instant_text
    from scheduler.lifecycle import host_lost_after
    from scheduler.models import Attempt, Host
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick
    from tests.cli.inprocess import run_cli

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    Host.objects.filter(pk=attempt.host_id).update(state=Host.State.OFFLINE, last_heartbeat=None)
    host = Host.objects.get(pk=attempt.host_id)
    (silent,) = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"][0]["silent_hosts"]
    assert silent["last_heartbeat"] is None
    assert silent["lost_at"].replace("Z", "+00:00") == (host.created_at + host_lost_after()).isoformat()
    shown = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert f"host {host.name} silent since its registration; ends lost at {instant_text(silent['lost_at'])}" in shown
