"""left55: the web page's hold and a group's hold or release that change nothing (a stale page's
button) say so in the CLI's words (``fairway_cli.words``), not "Held …" / "Held 0 workloads"."""

from __future__ import annotations

from fairway_cli.words import group_unchanged_text
from scheduler.models import ArrayGroup, WorkloadEvent
from scheduler.services import do_hold_workload, do_submit_workload


def _said(response) -> list[str]:
    """The messages of a POST's redirect, shown (so consumed) by the page it leads to."""
    return [str(m) for m in response.context["messages"]]


def test_holding_a_held_workload_again_says_nothing_changed(browser, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs())
    do_hold_workload(researcher, w)
    response = browser.post(f"/workloads/{w.pk}/hold/", follow=True)

    assert _said(response) == [f"{w.name} (#{w.pk}) already held by you: nothing changed"]
    assert WorkloadEvent.objects.filter(workload=w, kind="held").count() == 1


def test_a_groups_hold_or_release_that_changes_nothing_says_so(browser, researcher, submit_kwargs):
    do_submit_workload(researcher, **submit_kwargs(), array="0-1")
    g = ArrayGroup.objects.get().pk
    client = browser

    assert _said(client.post(f"/groups/{g}/release/", follow=True)) == [group_unchanged_text(g, "release")]
    assert _said(client.post(f"/groups/{g}/hold/", follow=True)) == [f"Held 2 workloads of array group {g}."]
    assert _said(client.post(f"/groups/{g}/hold/", follow=True)) == [group_unchanged_text(g, "hold")]
