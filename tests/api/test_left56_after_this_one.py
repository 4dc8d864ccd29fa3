"""left56: "why pending"'s numbers count the pending workload's own ``gpus × M`` in its budget's
committed and ratio (rule 2 compares the ratio after admission, DESIGN.md §3.2), so they differ
from ``fairway budgets`` at the same moment: every surface labels that side "after this one"
(``fairway_cli.words.side_label``), the numbers unchanged."""

from __future__ import annotations

from rest_framework.test import APIClient

from tests.api.test_why_pending_numbers import blocked  # noqa: F401 -- the fixture
from tests.cli.inprocess import run_cli


def test_every_surface_says_after_this_one_for_the_waiting_side(blocked, researcher, researcher_client, monkeypatch):  # noqa: F811
    waiting, _rivals = blocked
    numbers = researcher_client.get(f"/api/v1/workloads/{waiting.pk}/").json()["pending_explanation"]["numbers"]
    mine, theirs = numbers["budget"], numbers["other_budget"]
    assert (mine["after_this_one"], mine["label"]) == (True, "nlp, after this one")
    assert (theirs["after_this_one"], theirs["label"]) == (False, "vision")
    tree = researcher_client.get("/api/v1/budgets/tree/").json()[0]["budgets"]
    budgets = {b["path"]: b for b in tree}
    # the numbers are rule 2's: this workload's 8 GPUs × 1 h on top of what `fairway budgets` shows
    # (less what the seconds between the two readings took off the running work's protection)
    assert abs(mine["committed_gpu_hours"] - budgets["nlp"]["committed_gpu_hours"] - 8.0) < 0.05

    page = APIClient()
    page.force_login(researcher)
    html = page.get(f"/workloads/{waiting.pk}/").content.decode()
    assert "<td>nlp, after this one</td>" in html and "<td>vision</td>" in html

    out = run_cli(monkeypatch, researcher, "show", str(waiting.pk))
    assert f"    nlp, after this one: used {mine['used_text']} GPU-h, committed {mine['committed_text']} GPU-h" in out
    assert "    vision: used " in out
