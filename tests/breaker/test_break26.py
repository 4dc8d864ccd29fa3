"""break26: hostile or careless settings, specs and forms; each case names what it was."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

SETTINGS = Path(__file__).resolve().parents[2] / "config" / "settings.py"


def load_settings(monkeypatch: pytest.MonkeyPatch, **env: str) -> dict[str, object]:
    """Run config/settings.py afresh with ``env`` set (the process's own settings stay as they are)."""
    monkeypatch.setenv("DATABASE_URL", "sqlite:///:memory:")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return runpy.run_path(str(SETTINGS))


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        # nan passed every "minimum" (nan < x is false): a tick every nan seconds
        ("FAIRWAY_TICK_INTERVAL_S", "nan", "not a finite number"),
        ("FAIRWAY_READYZ_TICK_INTERVALS", "nan", "not a finite number"),
        ("FAIRWAY_HEARTBEAT_S", "1e400", "not a finite number"),  # float("1e400") is inf
        # beyond timedelta and the database's integer columns: OverflowError / 500 later
        ("FAIRWAY_LOOKBACK_WINDOW_S", "9" * 23, "must be <= 2147483647"),
        ("FAIRWAY_MAX_RUNTIME_LIMIT_S", "99999999999", "must be <= 2147483647"),
        ("FAIRWAY_ESTIMATE_INTERVAL_S", "1e300", "must be <= 2147483647"),
        ("EMAIL_PORT", "999999", "must be <= 65535"),
        # DRF parsed these on every request: 500 for every API call
        ("FAIRWAY_THROTTLE_USER", "abc", "not a rate like 30/min"),
        ("FAIRWAY_THROTTLE_ANON", "10/fortnight", "not a rate like 30/min"),
        ("FAIRWAY_THROTTLE_LOGIN", "10/", "not a rate like 30/min"),
        ("FAIRWAY_THROTTLE_LOGIN_USER", "ten/min", "not a rate like 30/min"),
        # "ValueError: Unable to configure root logger", naming no variable
        ("LOG_LEVEL", "LOUD", "not a log level"),
        # silently handed to agents as their server URL
        ("FAIRWAY_PUBLIC_URL", "fairway.example.org", "not an http(s) URL"),
        ("FAIRWAY_PUBLIC_URL", "ftp://fairway.example.org", "not an http(s) URL"),
        # a FileNotFoundError traceback from mkdir
        ("FAIRWAY_VAR_DIR", "/proc/no/such/dir", "cannot be created"),
    ],
)
def test_a_bad_setting_stops_the_process_naming_the_variable(monkeypatch, name, value, words):
    with pytest.raises(ImproperlyConfigured) as error:
        load_settings(monkeypatch, **{name: value})
    assert str(error.value).startswith(f"{name}=") and words in str(error.value)


def test_a_pool_smaller_than_its_minimum_is_refused_at_start(monkeypatch):
    # psycopg_pool raised "max_size must be greater or equal than min_size" at the first query
    with pytest.raises(ImproperlyConfigured, match="FAIRWAY_DB_POOL_MIN_SIZE=50 must be <= the pool's max size 10"):
        load_settings(
            monkeypatch,
            DATABASE_URL="postgres://fairway@db.invalid:5432/fairway",  # never reached: checked at load
            FAIRWAY_DB_POOL="1",
            FAIRWAY_DB_POOL_MIN_SIZE="50",
            FAIRWAY_DB_POOL_MAX_SIZE="10",
        )


def test_good_settings_still_load(monkeypatch):
    loaded = load_settings(
        monkeypatch,
        FAIRWAY_THROTTLE_USER="100/hour",
        FAIRWAY_THROTTLE_ANON="5/s",
        LOG_LEVEL="debug",
        FAIRWAY_PUBLIC_URL="https://fairway.example.org/",
        FAIRWAY_TICK_INTERVAL_S="2.5",
        FAIRWAY_LOOKBACK_WINDOW_S="1209600",
    )
    assert loaded["REST_FRAMEWORK"]["DEFAULT_THROTTLE_RATES"]["user"] == "100/hour"  # type: ignore[index]
    assert loaded["LOGGING"]["root"]["level"] == "DEBUG"  # type: ignore[index]
    assert loaded["FAIRWAY"]["TICK_INTERVAL_S"] == 2.5  # type: ignore[index]


# --- the agent's config (agent.yaml, FAIRWAY_* of the agent, --options) ------------------------------


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("heartbeat", "inf", "finite"),  # accepted: never a heartbeat until the server set one
        ("backoff_max", "1e400", "finite"),  # accepted: reconnect delays growing without end
        ("gpus", True, "whole number"),  # YAML `gpus: yes` was 1 GPU
        ("gpus", 8.9, "whole number"),  # silently 8
        ("cpus", 1.5, "whole number"),
        ("state_dir", "", "must not be empty"),  # Path("") was the agent's working directory
        ("server", "ws://", "with a host"),  # reconnected forever to nowhere
        ("server", "ws:// fairway", "with a host"),
        ("isolation", "{nss_min_uid: -5}", "nss_min_uid"),  # user "daemon" ran as the daemon account
        ("isolation", "{nss_min_uid: 0}", "nss_min_uid"),
        ("isolation", "{account_prefix: ''}", "account_prefix"),  # user "-ou0" became useradd's options
        ("isolation", "{account_prefix: 'fw:x/'}", "account_prefix"),  # ':' breaks /etc/passwd
        ("isolation", "{uid_range: [61000.5, 61001]}", "uid_range"),  # silently 61000
        ("isolation", "{uid_range: [true, 5]}", "uid_range"),
        ("isolation", "{uid_range: 61000}", "uid_range"),  # TypeError, not a ConfigError
        ("isolation", "{cgroup_parent: ../../etc}", "cgroup_parent"),  # relative to the agent's cwd
    ],
)
def test_a_bad_agent_setting_is_refused_naming_the_key(key, value, words):
    from agent.config import ConfigError, load_config

    with pytest.raises(ConfigError) as error:
        load_config({"server": "ws://fairway.example.org/ws/agent/", "token": "t", key: value}, environ={})
    assert f"bad value for {key}" in str(error.value) and words in str(error.value)


def test_good_agent_settings_still_load():
    from agent.config import load_config

    config = load_config(
        {"server": "wss://fairway.example.org/ws/agent/", "token": "t", "gpus": 8.0, "heartbeat": "2.5"},
        environ={
            "FAIRWAY_ISOLATION": "{uid_range: [62000, 62099], account_prefix: fwt-, nss_min_uid: 500, "
            "cgroup_parent: /sys/fs/cgroup/fairway}"
        },  # fmt: skip
    )
    assert (config.gpus, config.heartbeat) == (8, 2.5)
    assert (config.isolation.uid_range, config.isolation.account_prefix) == ((62000, 62099), "fwt-")
    assert config.isolation.nss_min_uid == 500


# --- the simulator's command lines ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--days", "nan"], "--days must be a finite number"),  # ValueError traceback
        (["--days", "inf"], "--days must be a finite number"),  # OverflowError traceback
        (["--days", "1e9"], "--days: at most 3650"),  # lists of a billion days, a bar stuck at 0 % (brk31)
        (["--start-day", "1e9", "--days", "0.01"], "--start-day: at most 3650"),
        (["--start-day", "nan", "--days", "0.01"], "--start-day must be a finite number"),
        (["--fault-rate", "nan", "--days", "0.01"], "--fault-rate must be a finite number"),  # ran with nan faults
        (["--estimates", "--estimate-budget", "nan", "--days", "0.01"], "must be finite numbers"),  # ran, budget nan
        (["--estimates", "--estimate-from-day", "nan", "--days", "0.01"], "must be finite numbers"),
    ],
)
def test_manage_simulate_refuses_non_finite_numbers(args, words, tmp_path):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=words):
        call_command("simulate", "--no-plots", "--no-progress", "--out", str(tmp_path / "out"), *args)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--days", "-1"], "nothing written: --days must be positive"),  # SimulationError traceback
        (["--policies", "bogus"], "nothing written: unknown policy 'bogus'"),  # traceback from a worker
        (["--min-runtime-rule", "bogus"], "nothing written: min-runtime rule 'bogus'"),
        (["--workers", "0"], "--workers 0: at least 1"),  # ProcessPoolExecutor's ValueError
    ],
)
def test_bench_simulate_philly_refuses_bad_options_without_a_traceback(args, words, tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(  # noqa: S603 -- our own script
        [
            sys.executable,
            str(root / "bench" / "simulate_philly.py"),
            "--days",
            "0.01",
            "--out",
            str(tmp_path / "out"),
            "--parts",
            str(tmp_path / "parts"),
            *args,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and words in done.stderr and "Traceback" not in done.stderr, done.stderr[-500:]
    assert not (tmp_path / "out").exists()


# --- scenario files -----------------------------------------------------------------------------------

SCENARIO = "name: x\nhosts: [{name: h1, gpus: 8}]\nbudgets: [{path: A, shares: 1}]\n"


@pytest.mark.parametrize(
    ("steps", "key"),
    [
        ("[{advance: 9999999999d}]", "steps[0].advance"),  # a tick every 10 s for 10^10 days: never ended
        ("[{advance: 1d}, {at: 99999999h}]", "steps[1].at"),
    ],
)
def test_a_scenario_whose_clock_runs_past_the_tick_limit_is_refused_at_load(tmp_path, steps, key):
    from scheduler.scenarios.spec import ScenarioError, load_scenario

    path = tmp_path / "long.yaml"
    path.write_text(SCENARIO + f"steps: {steps}\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert info.value.key == key and "ticks of 10 s" in str(info.value)
    path.write_text(SCENARIO + "settings: {tick_interval: 1h}\nsteps: [{advance: 100d}]\n")
    assert load_scenario(path).steps[0].arg == 100 * 86400  # a coarser tick may go further


# --- admin forms ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        # the tick computed now - timedelta(days=1000000): OverflowError in every tick of every cluster
        ({"cap_gpu_hours": "100", "cap_period_days": "1000000"}, "cap_period_days"),
        ({"cap_gpu_hours": "-5", "cap_period_days": "30"}, "cap_gpu_hours"),  # always capped
    ],
)
def test_a_budget_cap_the_scheduler_cannot_use_is_refused_by_the_admin(admin, org_tree, cluster, changes, field):
    from django.test import Client

    from scheduler.tick import run_tick
    from tests.api.test_admin import _budget_form

    web = Client()
    web.force_login(admin)
    budget = org_tree["nlp/olmo"]
    response = web.post(f"/admin/budgets/budget/{budget.pk}/change/", _budget_form(budget, **changes))
    assert response.status_code == 200 and field in response.context["adminform"].form.errors
    budget.refresh_from_db()
    assert (budget.cap_gpu_hours, budget.cap_period_days) == (None, 30)  # nothing changed
    run_tick(cluster.pk)  # and the scheduler still ticks


# --- web forms ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "secret_env", "field"),
    [
        ("A=1\nA=2", "", "env"),  # A=2 was submitted, A=1 dropped silently
        ("", "TOKEN=a\nTOKEN=b", "secret_env"),
        ("TOKEN=plain", "TOKEN=secret", "secret_env"),  # the secret silently replaced the plain one
    ],
)
def test_the_web_submit_form_refuses_a_variable_given_twice(researcher, cluster, org_tree, env, secret_env, field):
    from django.test import Client

    from scheduler.models import Workload

    web = Client()
    web.force_login(researcher)
    data = {"command": "python train.py", "cluster": "default", "gpu_model": "H100", "gpu_count": "1",
            "min_runtime": "1h", "budget": "nlp/olmo", "env": env, "secret_env": secret_env}  # fmt: skip
    response = web.post("/submit/", data)
    assert response.status_code == 400 and field in response.context["form"].errors
    assert not Workload.objects.exists()
    response = web.post("/submit/", {**data, "env": "A=1\nB=2", "secret_env": "TOKEN=x"})
    assert response.status_code == 302 and Workload.objects.get().env["TOKEN"]["secret"] is True


# --- management command arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["clock", "--interval", "nan"], "--interval"),  # a clock ticking every nan / -1 / 0 seconds
        (["clock", "--interval", "-1"], "--interval"),
        (["clock", "--interval", "0"], "--interval"),
        (["create_token", "researcher", "--expiry-hours", "nan"], "--expiry-hours"),  # ValueError traceback
        (["create_token", "researcher", "--expiry-hours", "1e300"], "--expiry-hours"),  # OverflowError
        (["serve", "--port", "70000"], "--port"),  # "Uvicorn running on http://127.0.0.1:70000"
        (["serve", "--port", "-1"], "--port"),
    ],
)
def test_a_bad_command_argument_is_a_usage_error(researcher, args, words):
    from django.core.management import CommandError, call_command
    from knox.models import AuthToken

    with pytest.raises(CommandError, match=words):
        call_command(*args)
    assert not AuthToken.objects.exists()
