"""left52: the CLI's corners: a submission whose wait cannot read it at once, ``--quote`` without
``-M``, an update that changes nothing, a bulk verb with no filter, a statement of a leaf name."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
from django.utils import timezone

from fairway_cli.cli import EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE
from fairway_cli.words import nothing_to_change_text
from scheduler.models import Workload
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures


@pytest.fixture
def fairway(logged_in):  # noqa: F811 -- the imported fixture
    return logged_in


def throttled() -> requests.Response:
    response = requests.Response()
    response.status_code = 429
    response.headers["Retry-After"] = "7"
    response._content = b'{"detail": "Request was throttled.", "code": "throttled"}'
    return response


@pytest.fixture
def flaky_reads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Answers (responses or exceptions) given, in order, to the next GET requests instead of the server."""
    real = requests.Session.request
    answers: list[Any] = []

    def request(self: requests.Session, method: str, url: str, **kwargs: Any) -> Any:
        if method == "GET" and answers:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return real(self, method, url, **kwargs)

    monkeypatch.setattr(requests.Session, "request", request)
    return answers


SUBMIT = ("submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--name", "once", "--wait", "--", "true")


def succeed_all() -> None:
    Workload.objects.update(state="succeeded", finished_at=timezone.now())


def test_submit_wait_asks_again_when_its_first_read_is_throttled_or_unanswered(fairway, clock, flaky_reads):
    flaky_reads += [throttled(), requests.ConnectionError("refused")]
    fake = clock(lambda: None, lambda: None, succeed_all)

    code, out, err = fairway(*SUBMIT)

    assert code == EXIT_OK, err
    w = Workload.objects.get()  # submitted once, never again
    lines = out.splitlines()
    assert lines[0].startswith(f"submitted #{w.pk} once")
    assert lines[1] == f"[#{w.pk} was submitted; Request was throttled: asking again in 7s]"
    assert len([line for line in lines if line.startswith("[")]) == 1  # one line per outage
    assert lines[-1] == "1 succeeded"
    assert fake.sleeps[:2] == [7.0, 10.5]  # the Retry-After, then backing off from it as the polls do


def test_submit_wait_that_never_reads_its_workload_says_it_was_submitted(fairway, clock, flaky_reads):
    flaky_reads += [requests.ConnectionError("refused")] * 50
    clock()

    code, out, err = fairway(*SUBMIT[:-2], "--wait-timeout", "1m", "--json", "--", "true")

    w = Workload.objects.get()
    assert code == EXIT_TIMEOUT, err
    assert out == ""
    assert err.startswith(f"fairway: timed out after 1m; #{w.pk} was submitted, but could not be read: cannot reach")


def test_resubmit_wait_asks_again_too(fairway, clock, flaky_reads, researcher, submit_kwargs):
    from scheduler.services import do_submit_workload

    first = do_submit_workload(researcher, **submit_kwargs(name="first"))
    Workload.objects.filter(pk=first.pk).update(state="failed", finished_at=timezone.now())
    flaky_reads += [throttled()]
    clock(succeed_all)

    code, out, err = fairway("resubmit", str(first.pk), "--wait", "--json")

    assert code == EXIT_OK, err
    again = Workload.objects.get(resubmitted_from=first)
    assert json.loads(out)["workloads"] == [{"id": again.pk, "name": again.name, "state": "succeeded"}]


def test_submit_wait_of_an_array_asks_again_too(fairway, clock, flaky_reads):
    flaky_reads += [throttled(), throttled()]
    clock(succeed_all)

    code, out, err = fairway(*SUBMIT[:-2], "--array", "0-1", "--wait", "--", "true")

    assert code == EXIT_OK, err
    group = Workload.objects.first().group_id  # type: ignore[union-attr]
    assert f"[array group {group} was submitted; Request was throttled: asking again in 7s]" in out.splitlines()
    assert out.splitlines()[-1] == "all 2 succeeded"


def test_ctrl_c_while_asking_again_says_it_was_submitted(fairway, clock, flaky_reads):
    flaky_reads += [throttled()]

    def interrupt() -> None:
        raise KeyboardInterrupt

    clock(interrupt)
    code, _out, err = fairway(*SUBMIT)

    w = Workload.objects.get()
    assert (code, err) == (130, f"fairway: interrupted: stopped waiting; #{w.pk} was submitted\n")


def test_a_refusal_of_the_first_read_says_it_was_submitted(fairway, clock, flaky_reads):
    refused = requests.Response()
    refused.status_code = 403
    refused._content = b'{"detail": "No.", "code": "permission_denied"}'
    flaky_reads += [refused]
    clock()

    code, _out, err = fairway(*SUBMIT)

    w = Workload.objects.get()
    assert code == 1
    assert err.startswith(f"fairway: #{w.pk} was submitted, but ")


def test_update_to_the_same_values_says_nothing_to_change_as_the_web_page_does(fairway, researcher_client):
    code, _out, err = fairway("submit", "-b", "nlp/olmo", "-m", "A100", "-g", "4", "-M", "2h", "--", "true")
    assert code == EXIT_OK, err
    w = Workload.objects.get()

    code, out, err = fairway("update", str(w.pk), "-g", "4", "-M", "2h")

    assert (code, err) == (EXIT_OK, "")
    assert out == f"{nothing_to_change_text(w.pk)}\n" == f"Nothing to change: #{w.pk} already asks that.\n"
    same = researcher_client.patch(f"/api/v1/workloads/{w.pk}/", {"gpu_count": 4}, format="json").json()
    assert same["changed"] is False
    answer = researcher_client.patch(f"/api/v1/workloads/{w.pk}/", {"gpu_count": 2}, format="json").json()
    assert (answer["changed"], answer["gpu_count"]) == (True, 2)


@pytest.mark.parametrize("verb", ["cancel", "hold", "release"])
def test_a_bulk_dry_run_without_a_filter_is_refused_as_the_api_refuses(monkeypatch, researcher, submit_kwargs, verb):
    """The default unfinished states are not a filter: ``--dry-run`` alone previewed the whole queue."""
    from scheduler.services import do_submit_workload
    from tests.cli.inprocess import run_cli

    do_submit_workload(researcher, **submit_kwargs())

    err = run_cli(monkeypatch, researcher, verb, "--dry-run", expect=EXIT_USAGE)

    assert err == (
        "fairway: name at least one filter (--mine, --owner, --state, --budget, --cluster, --group): a bulk "
        f"{verb} never takes the whole queue (the unfinished states it takes by default narrow nothing)\n"
    )
    assert "1 workload match" in run_cli(monkeypatch, researcher, verb, "--dry-run", "--mine")
    assert "match" in run_cli(monkeypatch, researcher, verb, "--dry-run", "--state", "pending")


def test_a_statement_of_a_leafs_name_suggests_its_paths_as_history_does(monkeypatch, researcher, org_tree):
    """``fairway statement olmo`` said only "`fairway budgets` lists them"; history's sentence names
    nlp/olmo (``budgets.services.unknown_budget_words``): one rule, ``fairway_cli.words.budget_hint_text``."""
    from budgets.services import do_create_budget, unknown_budget_words
    from tests.cli.inprocess import run_cli

    err = run_cli(monkeypatch, researcher, "statement", "olmo", expect=1)

    assert err == f"fairway: {unknown_budget_words('olmo')}\n"
    assert err == "fairway: No budget 'olmo'. Budgets are named by their path: did you mean nlp/olmo?\n"
    do_create_budget(name="olmo", parent=org_tree["vision"])
    err = run_cli(monkeypatch, researcher, "statement", "/OLMO/", expect=1)
    assert err.endswith("did you mean nlp/olmo or vision/olmo?\n")
    err = run_cli(monkeypatch, researcher, "statement", "nlp/gpt", expect=1)
    assert err == "fairway: No budget 'nlp/gpt'. `fairway budgets` lists them.\n"


def test_submit_quote_without_m_prices_the_servers_ladder(fairway):
    code, out, err = fairway("submit", "--quote", "-b", "nlp/olmo", "-g", "2", "-m", "A100", "--", "python")

    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert [row.split()[0] for row in lines[2:7]] == ["0", "30m", "2h", "8h", "1d"]
    assert "*" not in out  # no line is "your minimum runtime"
    assert Workload.objects.count() == 0
    code, _out, err = fairway("submit", "-b", "nlp/olmo", "-m", "A100", "--", "python")
    assert code == 2 and "the minimum runtime: -M DURATION" in err and "--quote ...` without -M" in err
