"""words47: an admin scheduled a drain of the host of a researcher's running workload, then the
host's agent fell silent (offline). The workload's page, the API's detail and ``fairway show``
said only that the host was silent: the drain scheduled, which still applies (it drains the host
at its time, and the host returns draining), was no longer said, though the hosts' pages (the
clusters page, ``GET hosts/``, ``fairway hosts``) said both. Each open attempt now names both facts
(``scheduler.lifecycle.silent_hosts`` and ``draining_hosts``, their one wording in
``fairway_cli.words``)."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from fairway_cli.numbers import instant_text
from fairway_cli.words import draining_host_words
from scheduler.models import Host
from scheduler.services import do_schedule_drain
from tests.cli.inprocess import run_cli
from tests.cli.test_fake46_scheduled_drain import QUEUE, _stamp
from tests.cli.test_tryout46_draining_host import _running


def _offline(host: Host) -> None:
    Host.objects.filter(pk=host.pk).update(state=Host.State.OFFLINE, state_before_offline=host.state)


def test_an_offline_host_with_a_drain_scheduled_says_both_on_the_workload(
    monkeypatch, researcher, researcher_client, admin, submit_kwargs
):
    w, attempt, host = _running(researcher, submit_kwargs)
    later = (attempt.protected_until + timedelta(hours=1)).replace(microsecond=0)
    do_schedule_drain(admin, host, later, "PSU swap")
    _offline(host)

    [api] = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"]
    assert [s["host"] for s in api["silent_hosts"]] == [host.name]
    assert api["draining_hosts"] == [
        {"host": host.name, "drain_now": False, "drains_at": _stamp(later), "stops_at": _stamp(later)}
    ]
    drain = f"host {host.name} drains at {instant_text(later)}: this attempt is stopped then{QUEUE}"
    assert draining_host_words(api["draining_hosts"][0]) == drain
    page = Client()
    page.force_login(researcher)
    html = page.get(f"/workloads/{w.pk}/").content.decode()
    assert f"host {host.name} silent since" in html and drain in html
    show = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert f"host {host.name} silent since" in show and f"attempt 1: {drain}" in show


def test_a_cordoned_host_gone_offline_with_a_drain_now_scheduled_says_both(
    monkeypatch, researcher, researcher_client, admin, submit_kwargs
):
    from scheduler.services import do_set_host_state

    w, _attempt, host = _running(researcher, submit_kwargs)
    soon = (timezone.now() + timedelta(minutes=5)).replace(microsecond=0)
    do_set_host_state(admin, host, "cordoned", "fan")
    do_schedule_drain(admin, host, soon, "fire", drain_now=True)
    _offline(Host.objects.get(pk=host.pk))
    [api] = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()["attempts"]
    assert [s["host"] for s in api["silent_hosts"]] == [host.name]
    assert api["draining_hosts"] == [
        {"host": host.name, "drain_now": True, "drains_at": _stamp(soon), "stops_at": _stamp(soon)}
    ]


def test_the_hosts_pages_say_both_facts(monkeypatch, researcher, admin, admin_client_api, hosts):
    """Pinned: the clusters page, ``GET hosts/{name}/`` and ``fairway hosts`` said both already."""
    at = (timezone.now() + timedelta(hours=3)).replace(microsecond=0)
    do_schedule_drain(admin, hosts["a100-1"], at, "PSU")
    _offline(hosts["a100-1"])
    summary = f"drain scheduled at {instant_text(at)} by admin: PSU"
    shown = admin_client_api.get("/api/v1/hosts/a100-1/").json()
    assert (shown["state"], shown["scheduled_drain"]["summary"]) == ("offline", summary)
    page = Client()
    page.force_login(researcher)
    html = page.get("/clusters/default/").content.decode()
    row = html.split('id="host-a100-1"', 1)[1].split("</tr>", 1)[0]
    assert '<span class="badge offline">offline</span>' in row and f"⏲ {summary}" in row
    listed = run_cli(monkeypatch, admin, "hosts")
    assert "offline (drain scheduled)" in listed and f"a100-1: {summary}" in listed
