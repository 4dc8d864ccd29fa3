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
        (["--gpus-per-host", "10000000000"], "--gpus-per-host: at most 1024"),
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
