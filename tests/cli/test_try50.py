"""try50: a new researcher's day by the README, in the CLI; each test names what it met."""

from __future__ import annotations

import pytest

from scheduler.models import Workload
from tests.cli.inprocess import run_cli


@pytest.mark.parametrize("quote", [False, True])
def test_submit_without_a_minimum_runtime_names_the_flag(researcher, hosts, monkeypatch, quote):
    """``fairway submit -g 2 -- python train.py`` (and its ``--quote``, where a researcher asks which
    minimum runtime to choose) said "missing: min_runtime (flags or a spec with -f)": the API's field,
    not the flag ``-M`` nor what it means. It names the flag, an example and how to compare."""
    args = ["submit", "-m", "A100", *(["--quote"] if quote else []), "--", "python", "train.py"]
    err = run_cli(monkeypatch, researcher, *args, expect=2)
    assert "missing: the minimum runtime: -M DURATION (e.g. -M 2h; -M 0: unallocated" in err
    assert "min_runtime in the -f spec" in err
    assert "--quote -M 2h" in err and "min_runtime (flags" not in err
    assert not Workload.objects.exists()


def test_submit_without_a_command_names_where_it_goes(researcher, hosts, monkeypatch):
    err = run_cli(monkeypatch, researcher, "submit", "-m", "A100", "-M", "1h", expect=2)
    assert "missing: the command: after -- (e.g. -- python train.py), or command in the -f spec" in err
    assert not Workload.objects.exists()
