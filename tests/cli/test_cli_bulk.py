"""``fairway cancel|hold|release --mine --state pending [--budget B] [--cluster C] [--owner U]``:
the workloads ``fairway ls`` shows with the same filters, after a count and a confirmation
(docs/jobs.md "Bulk actions")."""

from __future__ import annotations

import io
import json
import sys

from fairway_cli import cli as fairway_cli
from fairway_cli.cli import EXIT_USAGE
from scheduler.models import ArrayGroup, Workload
from scheduler.services import do_submit_workload
from tests.bulk_setup import states
from tests.cli.inprocess import run_cli


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cancel_mine_with_yes_leaves_anothers_work(monkeypatch, researcher, mine, theirs):
    before = states()
    out = run_cli(monkeypatch, researcher, "cancel", "--mine", "--state", "pending", "--yes")
    assert out == "3 workloads match: 3 to cancel\ncanceled 3 workloads\n"
    after = states()
    assert {after[w.pk][0] for w in mine} == {"canceled"}
    assert all(after[w.pk] == before[w.pk] for w in theirs)


def test_many_are_sent_a_chunk_a_request(monkeypatch, researcher, mine):
    monkeypatch.setattr(fairway_cli, "BULK_CHUNK", 2)
    answer = json.loads(run_cli(monkeypatch, researcher, "cancel", "--mine", "--yes", "--json"))
    assert (answer["changed"], answer["ids"], answer["skipped"]) == (3, [w.pk for w in mine], 0)
    assert {s for s, _ in states().values()} == {"canceled"}


def test_many_skips_are_shown_by_the_first_ids(monkeypatch, researcher, teammate, submit_kwargs, theirs):
    monkeypatch.setattr(fairway_cli, "SKIPS_SHOWN", 1)
    out = run_cli(monkeypatch, researcher, "cancel", "--state", "pending", "--dry-run")
    assert f"2 workloads left as they are (forbidden): #{theirs[0].pk} (+1 more; --json lists them) — " in out


def test_a_dry_run_lists_them_and_changes_nothing(monkeypatch, researcher, mine, theirs):
    before = states()
    out = run_cli(monkeypatch, researcher, "hold", "--state", "pending", "--dry-run")
    ids = " ".join(f"#{w.pk}" for w in mine)
    assert out.startswith(f"5 workloads match: 3 to hold\n  {ids}\n")
    assert f"2 workloads left as they are (forbidden): #{theirs[0].pk} #{theirs[1].pk} — Only the owner" in out
    assert "dry run: nothing changed" in out
    assert states() == before
    answer = json.loads(run_cli(monkeypatch, researcher, "hold", "--mine", "--dry-run", "--json"))
    assert answer["ids"] == [w.pk for w in mine] and answer["dry_run"] is True


def test_without_yes_and_no_terminal_it_refuses(monkeypatch, researcher, mine):
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    err = run_cli(monkeypatch, researcher, "cancel", "--mine", expect=EXIT_USAGE)
    assert "3 workloads match: 3 to cancel" in err or "--yes" in err
    assert "--yes" in err
    assert {s for s, _ in states().values()} == {"pending"}


def test_it_asks_and_does_only_on_yes(monkeypatch, capsys, researcher, mine):
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    out = run_cli(monkeypatch, researcher, "hold", "--mine")
    assert "Hold these 3 workloads? [y/N] " in capsys.readouterr().err and "nothing changed" in out
    assert {h for _, h in states().values()} == {""}
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    out = run_cli(monkeypatch, researcher, "hold", "--mine")
    assert out.endswith("held 3 workloads\n")
    assert {h for _, h in states().values()} == {"user"}
    out = run_cli(monkeypatch, researcher, "release", "--mine", "--budget", "nlp", "--cluster", "default", "--yes")
    assert out.endswith("released 3 workloads\n")


def test_the_action_covers_only_what_was_counted(monkeypatch, researcher, mine, submit_kwargs):
    late: list[Workload] = []
    real = fairway_cli._confirmed

    def confirm_while_one_more_is_submitted(*args, **kwargs):
        late.append(do_submit_workload(researcher, **submit_kwargs(name="late")))
        return real(*args, **kwargs)

    monkeypatch.setattr(fairway_cli, "_confirmed", confirm_while_one_more_is_submitted)
    run_cli(monkeypatch, researcher, "cancel", "--mine", "--yes")
    assert Workload.objects.get(pk=late[0].pk).state == "pending"
    assert {w.state for w in Workload.objects.filter(pk__in=[w.pk for w in mine])} == {"canceled"}


def test_a_filter_matching_nothing_says_so(monkeypatch, researcher, mine):
    out = run_cli(monkeypatch, researcher, "cancel", "--mine", "--state", "running", "--yes")
    assert out == "no workload matches: nothing to cancel\n"


def test_usage_errors_change_nothing(monkeypatch, researcher, mine):
    before = states()
    assert "not both" in run_cli(monkeypatch, researcher, "cancel", str(mine[0].pk), "--mine", expect=EXIT_USAGE)
    assert "not both" in run_cli(monkeypatch, researcher, "hold", "--mine", "--owner", "x", expect=EXIT_USAGE)
    assert "--mine" in run_cli(monkeypatch, researcher, "cancel", expect=EXIT_USAGE)
    assert "No state" in run_cli(monkeypatch, researcher, "cancel", "--state", "runing", "--yes", expect=1)
    assert states() == before


def test_the_group_path_still_works(monkeypatch, researcher, submit_kwargs):
    do_submit_workload(researcher, **submit_kwargs(), array="0-2")
    group = ArrayGroup.objects.get()
    assert run_cli(monkeypatch, researcher, "hold", "--group", str(group.pk)) == (
        f"array group {group.pk}: 3 pending members held\n"
    )
    out = run_cli(monkeypatch, researcher, "release", "--group", str(group.pk), "--state", "pending", "--yes")
    assert out.endswith("released 3 workloads\n")
    assert run_cli(monkeypatch, researcher, "cancel", "--group", str(group.pk)) == (
        f"array group {group.pk}: 3 workloads canceled or stopping\n"
    )
