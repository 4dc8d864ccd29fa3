"""left41: a registered GPU its agent no longer reports (the inventory waits for an admin's approval,
``Host.pending_inventory``) kept showing its last sample (the API, the clusters page, ``fairway
hosts``) as if it were measured now. Every surface now says "missing from the agent's last report
since …" in the same words (``scheduler.gpu_report``), and shows no sample for it."""

from __future__ import annotations

import html
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from fairway_cli.numbers import instant_text
from scheduler import lifecycle
from scheduler.gpu_report import unreported
from scheduler.models import GPU, Host
from tests.cli.inprocess import run_cli


def _hello(host: Host, gpus: list[GPU], now) -> None:  # noqa: ANN001
    lifecycle.host_hello(
        host,
        agent_version="1.0",
        gpus=[lifecycle.GpuReport(g.index, g.uuid, g.model, g.memory_mb) for g in gpus],
        running=[],
        now=now,
    )


def test_a_gpu_missing_from_the_report_shows_no_sample_anywhere(hosts, admin, researcher, monkeypatch):
    host = hosts["h100-1"]
    gpus = list(GPU.objects.filter(host=host).order_by("index"))
    t0 = timezone.now().replace(microsecond=0) - timedelta(minutes=4)  # left50: its sample not stale (5 min)
    sample = {"utilization_pct": 97, "memory_used_mb": 1234, "temperature_c": 71}
    lifecycle.record_heartbeat(host, [lifecycle.GpuSample(g.index, "healthy", (), sample) for g in gpus], now=t0)
    _hello(host, gpus[:3], t0 + timedelta(minutes=1))  # GPU 3 fell off the bus
    _hello(host, gpus[:3], t0 + timedelta(minutes=2))  # still missing: the instant stays the first
    host.refresh_from_db()
    assert host.pending_inventory is not None
    since = t0 + timedelta(minutes=1)
    words = f"missing from the agent's last report since {instant_text(since)}"
    gone = GPU.objects.select_related("host").get(pk=gpus[3].pk)
    assert unreported(gone) is not None and unreported(gone).since == since
    assert unreported(gone).text == words
    assert gone.last_sample == {}  # the stale sample is not kept as if measured
    assert unreported(GPU.objects.select_related("host").get(pk=gpus[0].pk)) is None

    api = Client()
    api.force_login(researcher)
    row = {g["index"]: g for g in api.get("/api/v1/hosts/h100-1/").json()["gpus"]}
    assert row[3]["reported"] is False and row[3]["report_text"] == words
    assert row[3]["missing_since"].replace("Z", "+00:00") == since.isoformat()
    assert (row[3]["utilization_pct"], row[3]["memory_used_mb"], row[3]["temperature_c"]) == (None, None, None)
    assert row[0]["reported"] is True and row[0]["report_text"] is None and row[0]["utilization_pct"] == 97

    page = html.unescape(api.get("/clusters/").content.decode())
    assert f"GPU 3 · healthy · {words}" in page
    assert "GPU 0 · healthy · 71 °C" in page

    shown = run_cli(monkeypatch, researcher, "hosts", "h100-1")
    assert f"GPU 3: {words}" in shown

    staff = Client()
    staff.force_login(admin)
    listing = html.unescape(staff.get("/admin/scheduler/gpu/").content.decode())
    assert words in listing
    inline = html.unescape(staff.get(f"/admin/scheduler/host/{host.pk}/change/").content.decode())
    change = html.unescape(staff.get(f"/admin/scheduler/gpu/{gpus[3].pk}/change/").content.decode())
    assert words in change
    assert words in inline

    _hello(host, gpus, t0 + timedelta(minutes=3))  # back: reported again, nothing missing
    back = GPU.objects.select_related("host").get(pk=gpus[3].pk)
    assert back.host.pending_inventory is None and unreported(back) is None
    assert {g["index"]: g["reported"] for g in api.get("/api/v1/hosts/h100-1/").json()["gpus"]} == dict.fromkeys(
        range(4), True
    )


def test_a_hold_written_before_the_instant_was_kept_still_says_missing(hosts):
    """An inventory held by an older server has no ``missing`` map: the rule reads the reported
    UUIDs, and the words leave out the instant."""
    host = hosts["h100-1"]
    gpus = list(GPU.objects.filter(host=host).order_by("index"))
    reported = [
        {"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mb": 0, "health": "healthy"} for g in gpus[:3]
    ]
    Host.objects.filter(pk=host.pk).update(pending_inventory={"gpus": reported, "cordoned": True})
    gone = GPU.objects.select_related("host").get(pk=gpus[3].pk)
    assert unreported(gone) is not None and unreported(gone).since is None
    assert unreported(gone).text == "missing from the agent's last report"
    assert unreported(GPU.objects.select_related("host").get(pk=gpus[1].pk)) is None
