"""``fairway hold ID...`` / ``fairway release ID...`` / ``--group G`` / ``fairway submit --hold``
(docs/jobs.md "Hold and release"): words, exit codes, and the reason in ``fairway ls``."""

from __future__ import annotations

import json

import pytest

from fairway_cli.cli import EXIT_API, EXIT_USAGE
from scheduler.models import ArrayGroup, Workload
from scheduler.services import do_hold_workload, do_submit_workload
from tests.cli.inprocess import run_cli


@pytest.fixture
def two(researcher, submit_kwargs) -> list[Workload]:
    return [do_submit_workload(researcher, **submit_kwargs(name=f"w{i}")) for i in range(2)]


def test_hold_and_release_several_then_ls_shows_the_hold(monkeypatch, researcher, two):
    a, b = two
    out = run_cli(monkeypatch, researcher, "hold", str(a.pk), f"#{b.pk}")
    assert out == (
        f"#{a.pk} w0 held (user hold: you, the owner or a budget manager may release it)\n"
        f"#{b.pk} w1 held (user hold: you, the owner or a budget manager may release it)\n"
    )
    assert set(Workload.objects.values_list("hold", flat=True)) == {"user"}
    listing = run_cli(monkeypatch, researcher, "ls")
    assert listing.count("held by its owner") == 2
    out = run_cli(monkeypatch, researcher, "release", str(a.pk), "--json")
    assert [w["hold"] for w in json.loads(out)] == [""]
    assert run_cli(monkeypatch, researcher, "release", str(b.pk)) == f"#{b.pk} w1 released\n"


def test_a_refused_id_does_not_stop_the_others_and_exits_api(monkeypatch, researcher, admin, two):
    a, b = two
    do_hold_workload(admin, a)
    err = run_cli(monkeypatch, researcher, "release", str(a.pk), str(b.pk), expect=EXIT_API)
    assert f"#{a.pk}:" in err and "only an admin" in err
    assert f"#{b.pk}: " in err and "not on hold" in err
    assert Workload.objects.get(pk=a.pk).hold == "admin"
    Workload.objects.filter(pk=b.pk).update(state=Workload.State.RUNNING)
    err = run_cli(monkeypatch, researcher, "hold", str(b.pk), expect=EXIT_API)
    assert "pending" in err


def test_hold_needs_ids_or_a_group(monkeypatch, researcher, two):
    assert "workload ids" in run_cli(monkeypatch, researcher, "hold", expect=EXIT_USAGE)
    assert "not a workload id" in run_cli(monkeypatch, researcher, "hold", "12x", expect=EXIT_USAGE)
    assert set(Workload.objects.values_list("hold", flat=True)) == {""}


def test_a_group_is_held_and_released(monkeypatch, researcher, submit_kwargs):
    do_submit_workload(researcher, **submit_kwargs(), array="0-2")
    group = ArrayGroup.objects.get()
    out = run_cli(monkeypatch, researcher, "hold", "--group", str(group.pk))
    assert out == f"array group {group.pk}: 3 pending members held\n"
    out = run_cli(monkeypatch, researcher, "release", "--group", str(group.pk))
    assert out == f"array group {group.pk}: 3 held members released\n"


def test_submit_held(monkeypatch, researcher, cluster, tmp_path):
    out = run_cli(monkeypatch, researcher, "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", "--hold", "--", "x")
    w = Workload.objects.get()
    assert w.hold == "user"
    assert f"held: it starts only after `fairway release {w.pk}`" in out
    spec = tmp_path / "job.yaml"
    spec.write_text("budget: nlp/olmo\ngpu_model: A100\nmin_runtime: 1h\ncommand: [y]\nhold: true\n")
    run_cli(monkeypatch, researcher, "submit", "-f", str(spec))
    assert Workload.objects.get(name="y").hold == "user"
