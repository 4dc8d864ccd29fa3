"""brk47: inputs that still got past their rule (each case names what it did before)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

# --- the simulator's command line -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        # dict.fromkeys(range(10**10)) per host: 2.7 GB in 30 s and still building the cluster
        (["--gpus-per-host", "10000000000"], "--gpus-per-host: at most 256"),  # the protocol's (left47)
        (["--hosts", "100000000"], "--hosts: at most 100000"),  # a hundred million hosts, the same
    ],
)
def test_manage_simulate_refuses_a_cluster_no_scenario_file_may_describe(args, words, tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s\n1,0,aa,1,60,\n")
    with pytest.raises(CommandError, match=words):
        call_command("simulate", "--trace", str(trace), "--no-progress", "--days", "0.01", *args)


# --- settings ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FAIRWAY_TICK_INTERVAL_S", "١"),  # float() read Arabic-Indic one as 1.0: a tick every second
        ("FAIRWAY_HEARTBEAT_S", "1_0"),  # and "1_0" as 10.0; env_int refuses both (brk37's rule)
        ("FAIRWAY_IDLE_UTIL_PCT", "٥.٥"),
        ("FAIRWAY_READYZ_CACHE_S", " 0_0.5 "),
    ],
)
def test_a_float_setting_in_other_digits_is_refused(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured, match=rf"{name}=.* is not a number \(ASCII digits"):
        load_settings(monkeypatch, **{name: value})


def test_a_float_setting_in_ascii_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.breaker.test_break26 import load_settings

    conf = load_settings(monkeypatch, FAIRWAY_TICK_INTERVAL_S=" 2.5 ", FAIRWAY_ESTIMATE_INTERVAL_S="1e2")["FAIRWAY"]
    assert (conf["TICK_INTERVAL_S"], conf["ESTIMATE_INTERVAL_S"]) == (2.5, 100.0)


# --- hand-written YAML (fairway_common.strict_yaml) -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "line"),
    [
        # YAML 1.1's merge key laid gpu_count: 8 under the 4 written: a key given twice, silently
        ("gpu_count: 4\n<<: {gpu_count: 8}\n", "merge", 2),
        ("<<: {gpu_count: 8}\nname: x\n", "merge", 1),  # a field set by a line that names none
        ("env:\n  A: '1'\n  <<: [{A: '2'}, {B: '3'}]\n", "merge", 3),
        ("? !!merge x\n: {a: 1}\n", "merge", 1),  # the tag written out
        # two spellings of one key: YAML kept the last value
        ("1: a\n+1: b\n", "key_twice", 2),
        ("10: a\n1_0: b\n", "key_twice", 2),
        ("true: a\nTrue: b\n", "key_twice", 2),
    ],
)
def test_the_strict_reader_refuses_a_merge_key_and_a_key_spelled_twice(text: str, kind: str, line: int) -> None:
    from fairway_common import strict_yaml

    with pytest.raises(strict_yaml.Refused) as refused:
        strict_yaml.load(text)
    assert (refused.value.kind, refused.value.line) == (kind, line)


def test_the_strict_reader_still_reads_a_quoted_merge_key_as_text() -> None:
    from fairway_common import strict_yaml

    assert strict_yaml.load("'<<': {a: 1}\nb: 2\n") == {"<<": {"a": 1}, "b": 2}


def test_the_submit_form_refuses_a_merge_key_in_its_words(client, researcher) -> None:
    from scheduler.models import Workload
    from tests.conftest import PASSWORD

    client.login(username="researcher", password=PASSWORD)
    spec = (
        "name: x\nbudget: nlp/olmo\ngpu_model: A100\ngpu_count: 1\n<<: {gpu_count: 8}\ncommand: [x]\nmin_runtime: 1h\n"
    )
    r = client.post("/submit/", {"mode": "spec", "spec": spec})
    page = r.content.decode()
    assert r.status_code in (200, 400), r.status_code
    assert "merge key (&lt;&lt;) is not allowed" in page, page[-3000:]
    assert not Workload.objects.exists()


# --- fairway-agent join -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "said"),
    [
        # the fake backend read --gpus 0 as 8 (told the server 8 GPUs) and the config said gpus: 0
        ({"gpu_backend": "fake", "gpus": 0, "model": "H100"}, "bad value for gpus"),
        ({"docker_url": "ftp://x", "runtime": "docker"}, "bad value for docker_url"),
        ({"state_dir": ""}, "bad value for state_dir"),  # --state-dir ""
    ],
)
def test_a_join_whose_config_the_agent_would_refuse_sends_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, values: dict, said: str
) -> None:
    """The join spent its one-time token, registered the host and wrote a config the agent refuses
    at every start: the host taken, its agent never up."""
    from agent import join as join_module
    from agent.gpu.fake import FakeGpuBackend
    from agent.join import JoinFailed, join

    posted: list[object] = []
    monkeypatch.setattr(join_module, "post_join", lambda *a, **k: posted.append(a) or {})
    config = tmp_path / "agent.yaml"
    with pytest.raises(JoinFailed, match=said):
        join(
            server="http://s",
            join_token="fwj_x",
            config_path=config,
            host_name="n1",
            gpu=FakeGpuBackend("n1", 8, "H100"),
            settings=values,
        )
    assert posted == []
    assert not config.exists()


# --- the fairway CLI --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "0", "nan"])
def test_logs_follow_interval_is_read_as_waits_is(
    researcher, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """``fairway logs -f --interval`` was a bare float: -1 and nan raised ValueError from
    time.sleep (a traceback) at the first poll of a running attempt, and 0 polled the server without
    a pause; ``fairway wait --interval`` refuses them (the rule ``_poll_interval``)."""
    from tests.cli.inprocess import run_cli

    run_cli(monkeypatch, researcher, "logs", "1", "-f", "--interval", value, expect=2)
    err = capsys.readouterr().err  # argparse's own line
    assert "--interval: must be above 0 and at most 60" in err, err


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("localhost:6379", "must specify one of the following schemes"),  # a ValueError traceback at start
        ("redis://127.0.0.1:99999/1", "Port out of range"),
        ("redis://127.0.0.1:6379/abc", "the database is a number"),  # redis-py used database 0, another's
        ("redis://127.0.0.1:6379/1_0", "the database is a number"),  # and this as 10
    ],
)
def test_a_malformed_redis_url_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str, words: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured, match=rf"REDIS_URL is not a Redis URL .*{words}") as refused:
        load_settings(monkeypatch, REDIS_URL=value)
    assert value not in str(refused.value)  # a URL may hold a password: never quoted


def test_a_redis_url_with_a_password_and_a_database_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.breaker.test_break26 import load_settings

    for url in ("redis://:pw@127.0.0.1:6379/9", "unix:///run/redis.sock?db=2", "rediss://h:6380"):
        assert load_settings(monkeypatch, REDIS_URL=url)["REDIS_URL"] == url


def test_a_bad_database_url_is_refused_without_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """A DATABASE_URL dj-database-url cannot read was quoted whole in the refusal, password and all
    (found by brk47): the message names the variable and the reason only, as REDIS_URL's does."""
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    url = "nosuchdb://fairway:s3cret-pw@db.example.org:5432/fairway"
    with pytest.raises(ImproperlyConfigured, match=r"DATABASE_URL is not a valid database URL") as refused:
        load_settings(monkeypatch, DATABASE_URL=url)
    assert "s3cret-pw" not in str(refused.value)
