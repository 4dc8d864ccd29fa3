"""try40: a workload of a capped budget whose attempt runs unfunded reads the same on the page and
in ``fairway show``."""

from __future__ import annotations

from django.test import Client

from scheduler.models import Attempt, Workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def test_an_unfunded_attempt_reads_unfunded_in_show_and_on_the_page(
    monkeypatch, researcher, researcher_client, submission, cluster
):
    """Its page said "unfunded" for the attempt while ``fairway show`` said "unallocated"; and both
    said "allocated: protected and charged" of the workload above an attempt that is neither,
    because its budget had reached its cap (DESIGN.md §3.7)."""
    pk = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1, min_runtime="1h"), format="json").json()[
        "id"
    ]
    run_tick(cluster.pk)
    attempt = Workload.objects.get(pk=pk).attempts.get()
    # what the tick writes when the budget is capped (tests/tick/test_caps.py)
    Attempt.objects.filter(pk=attempt.pk).update(allocated=False, unfunded=True, protected_until=None)

    shown = run_cli(monkeypatch, researcher, "show", str(pk))
    header, _, attempts = shown.partition("attempts:\n")
    row = attempts.splitlines()[1]
    assert "unfunded" in row and "unallocated" not in row
    assert "this attempt runs unfunded" in header
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{pk}/").content.decode()
    assert "this attempt runs unfunded" in page

    # its cancel said "(unallocated: never charged)" of the unfunded attempt
    assert "(unfunded: not charged)" in run_cli(monkeypatch, researcher, "cancel", str(pk))

    # a funded attempt says nothing of the kind
    Attempt.objects.filter(pk=attempt.pk).update(allocated=True, unfunded=False)
    assert "unfunded" not in run_cli(monkeypatch, researcher, "show", str(pk))
    assert "this attempt runs unfunded" not in browser.get(f"/workloads/{pk}/").content.decode()


def test_logs_of_an_empty_log_say_so_on_stderr(monkeypatch, capsys):
    """``fairway logs 16`` of an attempt that printed nothing printed nothing at all, where the page
    says "(empty)": the reader could not tell an empty log from a command that did nothing. The
    note goes to stderr, so ``fairway logs ID > file`` still writes only the log."""
    from fairway_cli import cli as fairway_cli

    empty = {"attempt": 1, "parts": [{"rank": 0, "host": "h1", "offset": 0, "data": "", "eof": True, "error": ""}]}
    monkeypatch.setattr(fairway_cli.Api, "call", lambda self, method, path, **kw: empty)
    monkeypatch.setenv("FAIRWAY_URL", "http://in-process")
    monkeypatch.setenv("FAIRWAY_TOKEN", "in-process")
    assert fairway_cli.main(["logs", "16"]) == 0
    seen = capsys.readouterr()
    assert (seen.out, seen.err) == ("", "[#16 attempt 1: the log is empty]\n")
    # a log with text prints only the text
    empty["parts"][0]["data"] = "step 1\n"
    assert fairway_cli.main(["logs", "16"]) == 0
    assert capsys.readouterr() == ("step 1\n", "")


def test_a_cancel_of_a_running_allocated_attempt_says_released_once(
    monkeypatch, researcher, researcher_client, submission, cluster
):
    """try41: "it ends canceled once its GPUs are released (charged until its GPUs are released)"."""
    pk = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1, min_runtime="1h"), format="json").json()[
        "id"
    ]
    run_tick(cluster.pk)
    said = run_cli(monkeypatch, researcher, "cancel", str(pk))
    assert said.count("released") == 1, said
    assert "once its GPUs are released (charged until then)" in said, said
