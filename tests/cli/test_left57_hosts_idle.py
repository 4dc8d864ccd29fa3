"""left57: ``fairway hosts`` had no column for the GPUs held idle (docs/jobs.md "Idle GPUs"; the
clusters page marks them): the host rows carry ``idle_gpus`` (``scheduler.idle.idle_attempts``, once
for the whole list) and the table an IDLE column."""

from __future__ import annotations

from scheduler.services import do_submit_workload
from tests.api.test_idle_api import run_on
from tests.cli.inprocess import run_cli


def _idle_and_busy(researcher, submit_kwargs, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0, "IDLE_AFTER_S": 3600}
    run_on(do_submit_workload(researcher, **submit_kwargs(name="idler", gpu_count=2)), "a100-1", 0.0)
    run_on(do_submit_workload(researcher, **submit_kwargs(name="worker", gpu_count=2)), "a100-2", 60.0)


def test_the_host_rows_count_the_gpus_held_idle(researcher, researcher_client, submit_kwargs, settings, hosts):
    _idle_and_busy(researcher, submit_kwargs, settings)
    rows = {h["name"]: h for h in researcher_client.get("/api/v1/hosts/").json()}
    assert rows["a100-1"]["idle_gpus"] == 2
    assert rows["a100-2"]["idle_gpus"] == 0
    assert researcher_client.get("/api/v1/hosts/a100-1/").json()["idle_gpus"] == 2


def test_fairway_hosts_has_an_idle_column(monkeypatch, researcher, submit_kwargs, settings, hosts):
    _idle_and_busy(researcher, submit_kwargs, settings)
    out = run_cli(monkeypatch, researcher, "hosts")
    head, *lines = out.splitlines()
    col = head.split().index("IDLE")
    cells = {line.split()[0]: line.split() for line in lines if line.startswith("a100-")}
    assert cells["a100-1"][col] == "2" and cells["a100-2"][col] == "0"
