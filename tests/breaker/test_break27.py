"""break27: faults found trying Fairway as a new user and with hostile input; each case names what it was."""

from __future__ import annotations

import pytest


def test_fairway_show_prints_every_event_when_there_are_fewer_than_asked(researcher, submit_kwargs, monkeypatch):
    """``fairway show`` (``--events 10`` by default) sliced ``events[len - N:]``: with N between
    len + 1 and 2 len - 1 the start was negative but inside the list, so a workload with 9 events
    (4 failed starts) showed only its last one, and one with 2 events under ``--events 3`` only
    ``canceled``."""
    from scheduler.services import do_cancel_workload, do_submit_workload
    from tests.cli.inprocess import run_cli

    w = do_submit_workload(researcher, **submit_kwargs())
    do_cancel_workload(researcher, w)
    for n in ["2", "3", "10"]:
        shown = run_cli(monkeypatch, researcher, "show", str(w.pk), "--events", n).split("events:\n")[1]
        assert "submitted" in shown and "canceled" in shown, (n, shown)


def test_a_relative_state_dir_gives_attempts_absolute_paths(tmp_path, monkeypatch):
    """The demo starts its agents with ``--state-dir var/demo/agents/philly-00N``: the attempts got
    ``HOME`` and ``FAIRWAY_PREEMPT_FILE`` relative to the agent's directory, wrong for an attempt
    that runs in its first mount's directory (docs/jobs.md) or changes directory, so it never saw
    its preemption notice. The state dir is made absolute when the config is read."""
    from agent.config import load_config

    monkeypatch.chdir(tmp_path)
    config = load_config({"server": "ws://h/ws/agent/", "token": "t", "state_dir": "var/agents/h1"})
    assert config.state_dir == tmp_path / "var" / "agents" / "h1"
    assert config.state_dir.is_absolute()


def test_fairway_metrics_says_1_complete_hour(researcher, cluster, monkeypatch):
    """``fairway metrics`` printed "1 complete hours" (the web page says "1 complete hour")."""
    from fairway_cli import cli
    from tests.cli.inprocess import run_cli

    real = cli.escaped

    def one_hour(data):  # the pyramid's answer as after one complete hour
        if isinstance(data, list) and data and "range" in data[0]:
            for r in data:
                r["range"]["complete_hours"] = 1
        return real(data)

    monkeypatch.setattr(cli, "escaped", one_hour)
    out = run_cli(monkeypatch, researcher, "metrics")
    assert "1 complete hour and" in out


def test_a_spec_file_without_end_is_refused_not_read_into_memory(researcher, monkeypatch, tmp_path):
    """``fairway submit -f /dev/zero`` (or a large file given by mistake) read the whole file before
    parsing it: the OOM killer stopped the CLI 23 GB in. It reads at most the server's limit."""
    import io
    import sys

    from fairway_cli import cli
    from tests.cli.inprocess import run_cli
    from web.forms import MAX_SPEC_CHARS

    assert cli.MAX_SPEC_CHARS == MAX_SPEC_CHARS
    err = run_cli(monkeypatch, researcher, "submit", "-f", "/dev/zero", "--quote", expect=2)
    assert "longer than 262,144 characters" in err
    monkeypatch.setattr(sys, "stdin", io.StringIO("#" * (MAX_SPEC_CHARS + 1)))
    assert "longer than" in run_cli(monkeypatch, researcher, "submit", "-f", "-", expect=2)
    spec = tmp_path / "job.yaml"
    spec.write_text("name: ok\\n" + "#" * (MAX_SPEC_CHARS - 20) + "\\n", encoding="utf-8")
    assert "missing: the command" in run_cli(monkeypatch, researcher, "submit", "-f", str(spec), expect=2)


@pytest.mark.parametrize(
    "args",
    [
        ["--gpu", "0", "--xid", "-5"],
        ["--gpu", "0", "--xid", str(2**31)],
        ["--gpu", "0", "--ecc", "-1"],
        ["--gpu", "0", "--ecc", str(2**63)],
        ["--gpu", "1024", "--xid", "79"],
        ["--gpu", "0", *[a for x in range(65) for a in ("--xid", str(x))]],
    ],
)
def test_inject_fault_refuses_what_a_heartbeat_cannot_carry(tmp_path, capsys, args):
    """``inject-fault --xid -5`` (or ``--ecc -1``) was written: the running agent's every heartbeat
    then failed its own protocol check ("not sending invalid heartbeat message"), so the host went
    offline and its attempts would end lost. Refused now, nothing written; and a fault file edited
    by hand with such values is ignored by the backend (the last good faults are kept)."""
    from agent.__main__ import main
    from agent.gpu.fake import FAULT_FILE, FakeGpuBackend

    assert main(["inject-fault", "--state-dir", str(tmp_path), *args]) == 2
    assert "inject-fault:" in capsys.readouterr().err
    assert not (tmp_path / FAULT_FILE).exists()

    backend = FakeGpuBackend("h1", 2, state_dir=tmp_path)
    (tmp_path / FAULT_FILE).write_text('{"0": {"xids": [-5], "ecc_uncorrected": -1}}')
    samples = backend.sample()
    assert [s.xids for s in samples] == [[], []] and all(s.ecc_uncorrected == 0 for s in samples)


def test_inject_fault_still_injects_and_clears_a_bad_file(tmp_path):
    from agent.__main__ import main
    from agent.gpu.fake import FAULT_FILE, read_faults

    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "1", "--xid", "79", "--ecc", "2"]) == 0
    assert read_faults(tmp_path)[1].health == "unhealthy"
    (tmp_path / FAULT_FILE).write_text('{"0": {"xids": [-5]}}')
    assert main(["inject-fault", "--state-dir", str(tmp_path), "--gpu", "0", "--xid", "79"]) == 2
    assert main(["inject-fault", "--state-dir", str(tmp_path), "--clear"]) == 0
    assert read_faults(tmp_path) == {}


def test_an_attempts_charge_is_what_its_budget_usage_counts(researcher, cluster, submit_kwargs, org_tree):
    """``fairway history`` / ``ls`` CHARGED summed the attempts' ``charged_gpu_seconds``, GPUs ×
    int(end − start), while the budget's usage (budgets page, dashboard, ``fairway budgets``,
    ``share``, the pyramid's delivered) counts each closed attempt from its whole-second start to
    its whole-second end (the policy's exact integer times, ``snapshot._epoch_col``): an attempt
    from 100.9 s to 200.2 s was charged 99 s and used 100 s. On a live cluster one budget showed
    0.519 GPU-h charged in history and 0.521 GPU-h used on the budgets page."""
    from datetime import timedelta

    from django.utils import timezone

    from budgets.tree_memo import shared_tree
    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.reports import budget_standings
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    base = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=2), submitted_at=base)
    run_tick(cluster.pk, now=base)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=base + timedelta(seconds=100.9))
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0, now=base + timedelta(seconds=200.2))
    attempt.refresh_from_db()
    assert attempt.charged_gpu_seconds == 2 * 100
    standing = budget_standings(cluster, shared_tree(), base + timedelta(seconds=300))
    usage = {b.path: b.usage_gpu_hours for b in standing.budgets}[w.budget.path]
    assert usage == round(attempt.charged_gpu_seconds / 3600, 3)


def test_a_statement_counts_an_attempt_as_it_is_charged(researcher, cluster, submit_kwargs, org_tree):
    """The budget statement split each attempt's exact instants: 0.1113 GPU-h for a budget whose
    attempts were charged 0.1111 (``fairway history``) and that used 0.111 (budgets page)."""
    from datetime import timedelta

    from django.utils import timezone

    from budgets.statement import budget_statement
    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    base = timezone.now().replace(hour=6, minute=0, second=0, microsecond=0) - timedelta(days=1)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=2), submitted_at=base)
    run_tick(cluster.pk, now=base)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=base + timedelta(seconds=100.9))
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0, now=base + timedelta(seconds=200.2))
    attempt.refresh_from_db()
    rows = budget_statement(w.budget, base.date(), base.date())
    assert sum(r.allocated_gpu_seconds for r in rows) == attempt.charged_gpu_seconds == 200


@pytest.mark.parametrize("content", ["[]", '"x"', "null", "5", "{" + " " * (64 * 1024) + "}"])
def test_a_cli_config_that_is_not_an_object_is_a_clear_error(content, tmp_path, monkeypatch, capsys):
    """A config file holding ``[]`` was an AttributeError traceback; ``FAIRWAY_CONFIG=/dev/zero``
    read until memory ran out. Both are now "not a Fairway CLI config" (exit 2)."""
    from fairway_cli.cli import EXIT_USAGE, main

    path = tmp_path / "config.json"
    path.write_text(content)
    monkeypatch.setenv("FAIRWAY_CONFIG", str(path))
    monkeypatch.delenv("FAIRWAY_URL", raising=False)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)
    assert main(["ls"]) == EXIT_USAGE
    assert "not a Fairway CLI config" in capsys.readouterr().err


def test_a_cli_config_of_dev_zero_is_refused(monkeypatch, capsys):
    from fairway_cli.cli import EXIT_USAGE, main

    monkeypatch.setenv("FAIRWAY_CONFIG", "/dev/zero")
    assert main(["ls"]) == EXIT_USAGE


def test_an_array_given_as_a_json_number_is_one_index(researcher_client, cluster, org_tree):
    """``"array": 7`` was refused with "Bad array '7': an array is like 0-99, 1,3,5-7 or 0-99%10",
    which names as bad the very text it would take ("7"); ``after: [7]`` takes numbers."""
    body = {"budget": "nlp/olmo", "cluster": cluster.name, "gpu_model": "H100", "gpu_count": 1, "min_runtime": 0}
    body["command"] = ["true"]
    response = researcher_client.post("/api/v1/workloads/", {**body, "array": 7}, format="json")
    assert response.status_code == 201, response.content[:300]
    assert response.json()["array_index"] == 7
    response = researcher_client.post("/api/v1/workloads/", {**body, "array": True}, format="json")
    assert response.status_code == 400 and response.json()["code"] == "invalid_array"


def test_an_array_counts_its_distinct_members():
    """``0-599,400-999`` (1,000 indices) was refused, "an array has at most 1000 members": the
    check added each range's length, overlaps counted twice."""
    from scheduler.jobspec import parse_array

    assert parse_array("0-599,400-999", 1000) == (list(range(1000)), None)
    assert parse_array("1,1,1", 1000) == ([1], None)
    for spec in ["0-999,1000", "0-2147483647", "5-1005"]:
        with pytest.raises(ValueError, match="at most 1000 members"):
            parse_array(spec, 1000)


def test_a_finished_budget_is_owed_what_it_used(researcher, cluster, submit_kwargs, org_tree):
    """The demand counted a finished workload's run from its exact instants (int(99.3 s)) while
    its usage counts whole seconds (100 s): the budgets page and the pyramid showed a budget
    owed 0.519 GPU-h that had been delivered 0.521."""
    from datetime import timedelta

    from django.utils import timezone

    from budgets.tree_memo import shared_tree
    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.reports import budget_standings
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    base = timezone.now().replace(microsecond=0) - timedelta(hours=1)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=2), submitted_at=base + timedelta(seconds=100.9))
    run_tick(cluster.pk, now=base + timedelta(seconds=100.9))
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=base + timedelta(seconds=100.9))
    lifecycle.attempt_exited(attempt.host, attempt.pk, 0, now=base + timedelta(seconds=200.2))
    standing = {b.path: b for b in budget_standings(cluster, shared_tree(), base + timedelta(seconds=300)).budgets}
    olmo = standing[w.budget.path]
    assert olmo.usage_gpu_hours == olmo.demand_gpu_hours == olmo.owed_gpu_hours == round(200 / 3600, 3)
    assert olmo.attainment == 1
