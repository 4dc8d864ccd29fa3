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
