"""left53: ``fairway ls --id 1,2,3``, the list API's ``id`` filter (left51): those workloads, in
every state (as ``--group``), ids as the pages write them (``#12``) too."""

from __future__ import annotations

import json

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli


def test_ls_lists_the_ids_given_in_any_state(monkeypatch, researcher, submit_kwargs):
    a, b, c = (do_submit_workload(researcher, **submit_kwargs(name=f"w{i}")) for i in range(3))
    Workload.objects.filter(pk=a.pk).update(state=Workload.State.SUCCEEDED)
    rows = json.loads(run_cli(monkeypatch, researcher, "--json", "ls", "--id", f"{a.pk}, #{c.pk}"))
    assert [w["id"] for w in rows] == [c.pk, a.pk]
    table = run_cli(monkeypatch, researcher, "ls", "--id", str(b.pk))
    assert "w1" in table and "w0" not in table


def test_a_bad_id_is_a_usage_error(monkeypatch, capsys, researcher):
    for value in ("x", ",", "1,,y"):
        run_cli(monkeypatch, researcher, "ls", "--id", value, expect=2)
        assert "argument --id:" in capsys.readouterr().err, value
