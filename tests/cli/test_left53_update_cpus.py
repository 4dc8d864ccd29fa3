"""left53: ``fairway update --cpus`` sent any text to the server while ``submit``/``resubmit --cpus``
checked it here (``fairway_cli.cli._cpus``): one argument type for all three now."""

from __future__ import annotations

import pytest

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli


@pytest.mark.parametrize("value", ["0", "abc", "-2", "1.5"])
def test_a_bad_cpus_is_refused_alike_before_any_request(monkeypatch, capsys, researcher, submit_kwargs, value):
    w = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    version = Workload.objects.get(pk=w.pk).spec_version
    run_cli(monkeypatch, researcher, "update", str(w.pk), "--cpus", value, expect=2)
    said = capsys.readouterr().err  # argparse's usage error
    run_cli(monkeypatch, researcher, "resubmit", str(w.pk), "--cpus", value, expect=2)
    again = capsys.readouterr().err
    assert "argument --cpus:" in said
    assert said.splitlines()[-1].split("--cpus")[-1] == again.splitlines()[-1].split("--cpus")[-1]
    assert Workload.objects.get(pk=w.pk).spec_version == version


def test_cpus_none_and_a_number_still_update(monkeypatch, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(name="w0"))
    run_cli(monkeypatch, researcher, "update", str(w.pk), "--cpus", "4")
    assert Workload.objects.get(pk=w.pk).cpus == 4
    run_cli(monkeypatch, researcher, "update", str(w.pk), "--cpus", "none")
    assert Workload.objects.get(pk=w.pk).cpus is None
