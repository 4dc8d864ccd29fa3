"""left59: a resume cancels a host's scheduled drain, an immediate drain cancels a scheduled
drain it covers (a drain now any), a cordon keeps it: every surface says which, in one wording
(``services.scheduled_drain_note``). Before, ``fairway hosts resume`` printed "gpu2: active" alone."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler.models import Host
from scheduler.services import do_schedule_drain, do_set_host_state, scheduled_drain_note
from tests.cli.inprocess import run_cli


def _messages(page: str) -> list[str]:
    listed = page.split('class="messagelist"', 1)[1].split("</ul>")[0]
    return [m.strip() for m in re.findall(r"<li[^>]*>(.*?)</li>", listed, re.S)]


def _schedule(admin, host: Host, drain_now: bool = False) -> str:
    at = (timezone.now() + timedelta(hours=3)).replace(microsecond=0)
    do_schedule_drain(admin, host, at, drain_now=drain_now)
    return instant_text(at)


@pytest.mark.parametrize(
    ("verb", "state", "now", "scheduled_now", "kept"),
    [
        ("resume", "active", False, False, False),
        ("cordon", "cordoned", False, True, True),
        ("drain", "draining", False, False, False),  # covered: the host drains already
        ("drain", "draining", False, True, True),  # a drain now at the time still changes something
        ("drain-now", "draining", True, True, False),
    ],
)
def test_each_action_says_what_it_did_to_the_scheduled_drain(admin, hosts, verb, state, now, scheduled_now, kept):
    host = hosts["a100-1"]
    if verb == "resume":
        do_set_host_state(admin, host, "cordoned")
    when = _schedule(admin, host, scheduled_now)
    before = Host.objects.get(pk=host.pk)
    after = do_set_host_state(admin, before, state, drain_now=now)
    what = "drain now" if scheduled_now else "drain"
    note = f"its {what} scheduled at {when} " + ("stands" if kept else "is canceled")
    assert scheduled_drain_note(before, after) == note
    assert (Host.objects.get(pk=host.pk).drain_at is not None) is kept
    assert scheduled_drain_note(after, after) == ("" if not kept else note)


def test_the_cli_and_the_api_say_a_resume_cancelled_the_drain(monkeypatch, admin, hosts, admin_client_api):
    when = _schedule(admin, hosts["a100-1"])
    said = run_cli(monkeypatch, admin, "hosts", "resume", "a100-1")
    assert said == f"a100-1: active (its drain scheduled at {when} is canceled)\n"
    assert run_cli(monkeypatch, admin, "hosts", "resume", "a100-1") == "a100-1: active\n"
    when = _schedule(admin, hosts["a100-1"], drain_now=True)
    body = admin_client_api.post("/api/v1/hosts/a100-1/cordon/", {}, format="json").json()
    assert body["scheduled_drain_change"] == f"its drain now scheduled at {when} stands"
    assert body["scheduled_drain"]["drain_now"] is True
    listed = admin_client_api.get("/api/v1/hosts/a100-1/").json()
    assert listed["scheduled_drain_change"] is None


def test_the_page_and_the_admin_say_it(admin, hosts):
    client = Client()
    client.force_login(admin)
    when = _schedule(admin, hosts["a100-1"])
    done = client.post("/hosts/a100-1/drain-now/", follow=True)
    notices = re.findall(r'<div class="notice [^"]*">(.*?)</div>', done.content.decode())
    assert notices == [f"a100-1: draining now (its drain scheduled at {when} is canceled)."]
    when = _schedule(admin, hosts["a100-2"])
    url = reverse("admin:scheduler_host_changelist")
    pk = hosts["a100-2"].pk
    done = client.post(url, {"action": "resume", "_selected_action": [pk]}, follow=True)
    assert _messages(done.content.decode()) == [
        f"a100-2: its drain scheduled at {when} is canceled.",
        "1 host(s) updated.",
    ]
