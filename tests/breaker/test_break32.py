"""break32: faults found by brk32 (files, time, sizes, authorization)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from budgets.models import UsageEntry


def _stamp(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S")


def test_a_sacct_job_id_too_long_for_its_note_is_refused_not_imported_twice(cluster, researcher, org_tree, tmp_path):
    """A JobID of 190 characters: the usage interval's note (200 characters, by which a second import
    of the job is recognised) was cut before its " user " part, so the same export imported again
    was taken as new: the lab's usage doubled without a word."""
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    job = "7" * 190
    f.write_text(f"JobID|User|Account|AllocTRES|Start|End|State\n{job}|researcher|olmo|gres/gpu=4|{s}|{e}|COMPLETED\n")
    for _ in range(2):
        with pytest.raises(CommandError) as err:
            call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
        assert "line 2 (job 777" in str(err.value) and "JobID" in str(err.value)
    assert UsageEntry.objects.count() == 0


@pytest.mark.parametrize("until", ["9999-12-31T23:59:59-12:00", "9999-12-31T20:00:00-05:00"])
def test_an_instant_past_the_last_utc_datetime_is_a_400(researcher, api_client_for, cluster, until):
    """``metrics/pyramid/?until=9999-12-31T23:59:59-12:00``: a date-time a datetime holds whose UTC
    instant it does not (year 10000); the report's query converted it to UTC: a 500."""
    api = api_client_for(researcher)
    api.raise_request_exception = False
    for url, key in [("/api/v1/metrics/pyramid/", "until"), ("/api/v1/workloads/history/", "since")]:
        r = api.get(url, {key: until})
        assert r.status_code == 400, (url, r.status_code)
        assert key in r.json()


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        # every start and stop carries grace_s (protocol: at most 7 days): with 8 days the server
        # logged "not sending invalid start" and sent none: nothing ever started or stopped
        ("FAIRWAY_GRACE_PERIOD_S", str(7 * 86400 + 1), "must be <= 604800"),
        # the welcome carries heartbeat_s (protocol: at most 3600 s): it was never sent
        ("FAIRWAY_HEARTBEAT_S", "3601", "must be <= 3600"),
    ],
)
def test_a_setting_the_agent_protocol_cannot_carry_is_refused_naming_it(monkeypatch, name, value, words):
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured) as error:
        load_settings(monkeypatch, **{name: value})
    assert str(error.value).startswith(f"{name}=") and words in str(error.value)


def test_the_largest_grace_and_heartbeat_settings_are_messages_the_protocol_carries(monkeypatch):
    from agent import protocol
    from tests.breaker.test_break26 import load_settings

    longest = {"FAIRWAY_GRACE_PERIOD_S": str(7 * 86400), "FAIRWAY_HEARTBEAT_S": "3600"}
    # a host goes offline only after a silence longer than the heartbeat period (brk46b)
    alive = {"FAIRWAY_HOST_OFFLINE_AFTER_S": "7200", "FAIRWAY_HOST_LOST_AFTER_S": "14400"}
    conf = load_settings(monkeypatch, **longest, **alive)["FAIRWAY"]
    protocol.encode(protocol.Stop(id=1, attempt_id=1, reason="x", grace_s=conf["GRACE_PERIOD_S"]))
    protocol.encode(protocol.Welcome(id=1, host="h", heartbeat_s=float(conf["HEARTBEAT_S"])))


@pytest.mark.parametrize(
    ("where", "token"),
    [
        ("FAIRWAY_TOKEN", "\u20acuro"),
        ("FAIRWAY_TOKEN", "abc\ndef"),
        ("config", "t\u00f6ken\u2603"),
        ("--token", "\u2603"),
    ],
)
def test_a_token_that_cannot_be_a_header_is_a_usage_error_not_a_traceback(monkeypatch, tmp_path, where, token):
    """``FAIRWAY_TOKEN=€uro fairway ls`` (a token pasted with a stray character, or a config edited
    by hand): a UnicodeEncodeError traceback from http.client; with a newline, "cannot reach
    SERVER ... Is the server running there?" (requests' InvalidHeader), which it is."""
    import io

    from fairway_cli import cli as fairway_cli

    config = tmp_path / "config.json"
    config.write_text('{"server": "http://127.0.0.1:9", "token": ""}')
    monkeypatch.setenv("FAIRWAY_CONFIG", str(config))
    monkeypatch.delenv("FAIRWAY_URL", raising=False)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)
    argv = ["ls"]
    if where == "FAIRWAY_TOKEN":
        monkeypatch.setenv("FAIRWAY_TOKEN", token)
    elif where == "config":
        import json

        config.write_text(json.dumps({"server": "http://127.0.0.1:9", "token": token}))
    else:
        argv = ["login", "--token", token]
    out, err = io.StringIO(), io.StringIO()
    assert fairway_cli.main(argv, out=out, err=err) == fairway_cli.EXIT_USAGE, err.getvalue()
    assert "token" in err.getvalue() and "cannot reach" not in err.getvalue()
    assert json_of(config)["token"] == ("" if where != "config" else token)  # nothing saved


def json_of(path: Path) -> dict:
    import json

    return json.loads(path.read_text())


@pytest.mark.parametrize("server", ["http://exa mple", "http://127.0.0.1:99999", "http://%zz"])
def test_a_server_url_that_is_no_url_is_named_so(monkeypatch, tmp_path, server):
    """``FAIRWAY_URL='http://exa mple'``: "cannot reach ...: InvalidURL. Is the server running there?"."""
    import io

    from fairway_cli import cli as fairway_cli

    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "none.json"))
    monkeypatch.setenv("FAIRWAY_URL", server)
    monkeypatch.setenv("FAIRWAY_TOKEN", "abc")
    out, err = io.StringIO(), io.StringIO()
    assert fairway_cli.main(["ls"], out=out, err=err) == fairway_cli.EXIT_USAGE, err.getvalue()
    assert "is not a server URL" in err.getvalue()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"server: ws://h\ntoken: \xff\xfe\n", "not UTF-8"),  # UnicodeDecodeError traceback
        (b"1: a\nb: 2\nserver: ws://h\ntoken: t\n", "unknown key(s)"),  # sorted() of int and str: TypeError
        (b"server: ws://h:99999\ntoken: t\n", "bad value for server"),  # the port: InvalidURI at each connect
    ],
)
def test_an_agent_config_file_with_wrong_bytes_or_keys_is_a_config_error(tmp_path, content, words):
    from agent.config import ConfigError, load_config

    path = tmp_path / "agent.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as error:
        load_config({"host_name": "h"}, path, {})
    assert words in str(error.value)


@pytest.mark.parametrize("token", ["t\u20ac-secret", "abc\nX-Other: 1", "two words", 12345])
def test_an_agent_token_that_cannot_be_a_header_is_refused_without_showing_it(token):
    """A host token holding a character an HTTP header cannot carry reached the websocket
    handshake (an encoding error, or a header injected); a bad token's refusal printed the token
    itself into the agent's log."""
    from agent.config import ConfigError, load_config

    with pytest.raises(ConfigError) as error:
        load_config({"host_name": "h", "server": "ws://h", "token": token}, None, {})
    assert "token" in str(error.value) and "secret" not in str(error.value) and "12345" not in str(error.value)


def test_simulate_refuses_an_out_it_cannot_write_before_simulating(tmp_path):
    """``simulate --out FILE`` (a file, or a directory it may not write): the whole simulation ran,
    then ``mkdir`` raised (a traceback) and its report was lost."""
    from django.core.management import call_command

    taken = tmp_path / "a-file"
    taken.write_text("keep")
    for out in (taken, taken / "below"):
        with pytest.raises(CommandError, match="--out"):
            call_command("simulate", "--no-plots", "--no-progress", "--days", "0.01", "--out", str(out))
    assert taken.read_text() == "keep"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["\u00b2"], "(?i)no budget"),  # '²'.isdigit(): int('²') was a ValueError traceback
        (["nlp/olmo", "--out", "/nonexistent/statement.csv"], "--out"),  # FileNotFoundError traceback
        (["nlp/olmo", "--out", "."], "--out"),  # IsADirectoryError traceback
    ],
)
def test_budget_statement_refuses_a_bad_budget_or_out_clearly(org_tree, args, words):
    from django.core.management import call_command

    with pytest.raises(CommandError, match=words):
        call_command("budget_statement", *args, stdout=StringIO(), stderr=StringIO())


def test_a_trace_with_a_byte_order_mark_is_read(tmp_path):
    """A trace saved by a Windows editor starts with a UTF-8 byte order mark: "missing column
    'job_id'", which its header plainly has (brk30 fixed the same in the sacct import)."""
    from scheduler.trace import read_trace

    path = tmp_path / "trace.csv"
    path.write_bytes("\ufeffjob_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n0,0,a,1,10,\n".encode())
    assert [(j.job_id, j.vc, j.num_gpus) for j in read_trace(path)] == [(0, "a", 1)]


def test_an_approved_inventory_whose_gpus_swapped_indices_is_registered_as_reported(hosts):
    """Two GPUs of a host trade places (cards moved between slots): index 0 now reports index 1's
    UUID and back. The approval kept both rows as they were ("registered elsewhere; kept": each UUID
    was the other row's), said "approved", and the next hello held the same inventory again: the
    host stayed cordoned for good, its database inventory naming each device by the other's index."""
    from scheduler import lifecycle
    from scheduler.models import GPU, Host

    host = hosts["h100-1"]
    registered = {g.index: g for g in GPU.objects.filter(host=host)}
    swapped = {0: 1, 1: 0, 2: 2, 3: 3}
    reports = [
        lifecycle.GpuReport(i, registered[swapped[i]].uuid, "H100", registered[swapped[i]].memory_mb) for i in range(4)
    ]
    lifecycle.host_hello(host, agent_version="0.1", gpus=reports, running=[])
    host.refresh_from_db()
    assert host.pending_inventory is not None and host.state == "cordoned"
    lifecycle.do_approve_host_inventory(None, host)
    assert [(g.index, g.uuid) for g in GPU.objects.filter(host=host).order_by("index")] == [
        (r.index, r.uuid) for r in reports
    ]
    lifecycle.host_hello(Host.objects.get(pk=host.pk), agent_version="0.1", gpus=reports, running=[])
    host.refresh_from_db()
    assert host.pending_inventory is None and host.state == "active"


def test_the_cli_shows_invisible_format_characters_escaped(monkeypatch, researcher, teammate, submit_kwargs):
    """A teammate's workload named ``train\\u200b`` (zero-width space), with a word joiner, a byte
    order mark, a soft hyphen or Unicode tag characters, printed as ``train``: indistinguishable
    from another ``train`` in ``fairway ls`` (and its columns shifted). Every format character
    (category Cf) is escaped now, as the bidirectional ones already were."""
    from scheduler.models import Workload
    from scheduler.services import do_submit_workload
    from tests.cli.inprocess import run_cli

    hidden = "\u200b\u2060\ufeff\u00ad\U000e0041\u180e"
    w = do_submit_workload(teammate, **submit_kwargs(name="train"))
    Workload.objects.filter(pk=w.pk).update(name=f"train{hidden}")  # stored before names refused them (left36)
    out = run_cli(monkeypatch, researcher, "ls", "--all")
    assert not any(c in out for c in hidden)
    assert "train\\u200b\\u2060\\ufeff\\xad\\U000e0041" in out  # the column is cut at 40
    out = run_cli(monkeypatch, researcher, "show", str(w.pk))
    assert not any(c in out for c in hidden)


def test_the_clis_invisible_characters_are_every_format_character_of_this_python():
    """The oracle of ``fairway_cli.cli._INVISIBLE`` (written out for the CLI's start time)."""
    import re
    import sys
    import unicodedata

    from fairway_cli.cli import _INVISIBLE

    pattern = re.compile(f"[{_INVISIBLE}]")
    for code in range(0xA0, sys.maxunicode + 1):
        char = chr(code)
        expected = unicodedata.category(char) in ("Cf", "Zl", "Zp")
        if unicodedata.unidata_version.split(".")[0] != "14" and not expected:
            continue  # a newer Unicode may add format characters; none of these may be ordinary text
        assert bool(pattern.match(char)) == expected, hex(code)


@pytest.mark.parametrize("cap", ["0", "0s", "0h0m"])
def test_import_history_philly_refuses_a_run_time_cap_of_nothing(cluster, researcher, cap):
    """``--max-duration 0`` capped every imported job's run at 0 s: history of workloads that ran
    for nothing, written as if real (the cap is a run time, more than 0)."""
    with pytest.raises(CommandError, match="--max-duration"):
        call_command(
            "import_history",
            "philly",
            "--cluster",
            "default",
            "--user",
            "researcher",
            "--max-duration",
            cap,
            stdout=StringIO(),
        )


def test_agent_join_reads_an_existing_config_that_is_not_utf8_as_not_joined(tmp_path):
    """``agent join`` first asks whether the host joined already (its config holds a token): a
    config that is not UTF-8 was a UnicodeDecodeError traceback there."""
    from agent.join import already_joined

    path = tmp_path / "agent.yaml"
    path.write_bytes(b"token: \xff\xfe\n")
    assert already_joined(path) is None


def _scenario_with(tmp_path, expect: dict) -> str:
    import yaml

    doc = yaml.safe_load(Path("tests/scenarios/P01-fair-share-split.yaml").read_text())
    doc["steps"][0]["expect"] = expect
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_a_scenario_expecting_the_ratio_order_of_an_undeclared_budget_is_a_scenario_error(tmp_path):
    """``ratio_order: [A, Z]`` (a typo, or a renamed budget): a KeyError traceback in the policy's
    tree (found by mutating the example scenarios: 2 faults in 2,560 mutations)."""
    from scheduler.scenarios.runner import MemoryBackend, run_scenario
    from scheduler.scenarios.spec import ScenarioError

    with pytest.raises(ScenarioError, match="ratio_order"):
        run_scenario(_scenario_with(tmp_path, {"ratio_order": ["A", "Z"]}), MemoryBackend())


def test_a_scenario_expecting_preemptions_of_a_workload_it_never_had_fails_that_expectation(tmp_path):
    """``preemptions: {Q9: 0}`` naming no workload (or one refused at submission): a KeyError
    traceback in the memory backend; an expectation that fails like any other now."""
    from scheduler.scenarios.runner import MemoryBackend, run_scenario

    result = run_scenario(_scenario_with(tmp_path, {"preemptions": {"Q9": 0}}), MemoryBackend())
    assert not result.ok and [f.key for f in result.failures] == ["preemptions.Q9"]
