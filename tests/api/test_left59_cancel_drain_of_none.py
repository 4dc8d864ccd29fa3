"""left59: ``cancel-drain`` of a host with no drain scheduled is a no-op in the API (200, nothing
changed, no event) and ``fairway hosts`` (exit 0, "no drain scheduled"), as README says an API
repeat of a change is, and as Kubernetes' uncordon of an uncordoned node; the clusters page, which
refuses what would change nothing, and the admin say so (``services.no_drain_scheduled_text``).
It was a 409 ``no_scheduled_drain`` (exit 1)."""

from __future__ import annotations

import re

from django.test import Client
from django.urls import reverse

from scheduler.models import HostEvent
from tests.cli.inprocess import run_cli

NONE = "Host a100-1 has no drain scheduled: nothing to cancel."


def test_the_api_and_the_cli_change_nothing_and_say_so(admin_client_api, monkeypatch, admin, hosts):
    response = admin_client_api.post("/api/v1/hosts/a100-1/cancel-drain/", {}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["scheduled_drain"] is None
    assert run_cli(monkeypatch, admin, "hosts", "cancel-drain", "a100-1") == "a100-1: active; no drain scheduled\n"
    assert not HostEvent.objects.filter(kind__startswith="drain_").exists()


def test_the_page_refuses_it_and_the_admin_says_it(admin, hosts):
    client = Client()
    client.force_login(admin)
    done = client.post("/hosts/a100-1/cancel-drain/", follow=True)
    assert re.findall(r'<div class="notice ([^"]*)">(.*?)</div>', done.content.decode()) == [("error", NONE)]
    url = reverse("admin:scheduler_host_changelist")
    done = client.post(url, {"action": "cancel_scheduled_drain", "_selected_action": [hosts["a100-1"].pk]}, follow=True)
    listed = done.content.decode().split('class="messagelist"', 1)[1].split("</ul>")[0]
    assert [m.strip() for m in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)] == [NONE]
    assert not HostEvent.objects.filter(kind__startswith="drain_").exists()
