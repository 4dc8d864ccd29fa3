"""util49: after a drain stopped an unallocated workload, ``fairway hosts NAME`` showed about 90 %
UTIL on the freed GPUs. The fake backend reads 0 % from its first sample after the attempt left
(fake46, tests/agent/test_agent_gpu_and_config.py); the server stores one sample per host every
few heartbeats (``gateway.sample_interval``) and showed the last one, taken while the workload ran,
with no word of its age. Every stored sample now carries its instant (``scheduler.gpu_report``):
the API gives ``sampled_at`` and ``fairway hosts NAME`` says the sample's age beside the numbers."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from scheduler import lifecycle
from scheduler.gpu_report import sampled_at
from scheduler.models import GPU
from tests.cli.inprocess import run_cli


def test_a_stored_sample_says_when_it_was_taken_on_the_api_and_the_cli(hosts, researcher, monkeypatch):
    host = hosts["h100-1"]
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=40)
    lifecycle.record_heartbeat(
        host, [lifecycle.GpuSample(0, "healthy", (), {"utilization_pct": 91.0, "temperature_c": 60.0})], now=at
    )
    assert sampled_at(GPU.objects.get(host=host, index=0).last_sample) == at

    api = Client()
    api.force_login(researcher)
    row = {g["index"]: g for g in api.get("/api/v1/hosts/h100-1/").json()["gpus"]}
    assert parse_datetime(row[0]["sampled_at"]) == at
    assert row[1]["sampled_at"] is None and row[1]["utilization_pct"] is None  # never sampled

    shown = run_cli(monkeypatch, researcher, "hosts", "h100-1")
    assert "SAMPLED" in shown
    line = next(x for x in shown.splitlines() if x.split()[:1] == ["0"])
    assert "91%" in line and re.search(r"\b4[0-3]s ago\b", line), line


def test_the_flush_stores_each_sample_with_its_heartbeats_receipt(hosts):
    """The web process's flush (``record_heartbeats``, the common path) stamps as the per-host one."""
    host = hosts["h100-1"]
    at = timezone.now().replace(microsecond=0) - timedelta(seconds=7)
    sample = lifecycle.GpuSample(0, "healthy", (), {"utilization_pct": 0.0})
    lifecycle.record_heartbeats([lifecycle.HeartbeatReport(host.pk, at, [sample])])
    assert sampled_at(GPU.objects.get(host=host, index=0).last_sample) == at
