"""left55: ``fairway release``, and a group's ``hold``, ``release`` and ``update``, say "Nothing to
change" where the API's answer says ``changed: false``, in ``fairway update``'s words
(``fairway_cli.words``)."""

from __future__ import annotations

import json

from fairway_cli.words import group_unchanged_text
from scheduler.models import ArrayGroup
from scheduler.services import do_submit_workload
from tests.cli.inprocess import run_cli


def test_a_groups_actions_that_change_nothing_say_so(monkeypatch, researcher, submit_kwargs):
    do_submit_workload(researcher, **submit_kwargs(), array="0-1")
    g = ArrayGroup.objects.get().pk

    def cli(*argv: str) -> str:
        return run_cli(monkeypatch, researcher, *argv)

    assert cli("release", "--group", str(g)) == f"{group_unchanged_text(g, 'release')}\n"
    assert group_unchanged_text(g, "release") == f"Nothing to change: no held member of array group {g} to release."
    assert cli("hold", "--group", str(g)) == f"array group {g}: 2 pending members held\n"
    assert cli("hold", "--group", str(g)) == f"Nothing to change: no pending member of array group {g} to hold.\n"
    assert cli("update", "--group", str(g), "-g", "4") == (
        f"Nothing to change: no pending member of array group {g} to change.\n"
    )
    assert json.loads(cli("--json", "release", "--group", str(g)))["changed"] is True


def test_release_answers_with_changed(monkeypatch, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(), hold=True)
    [answer] = json.loads(run_cli(monkeypatch, researcher, "--json", "release", str(w.pk)))
    assert (answer["hold"], answer["changed"]) == ("", True)
