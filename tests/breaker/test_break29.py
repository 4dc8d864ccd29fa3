"""break29: faults found trying Fairway as a new user and with hostile input; each case names what it was."""

from __future__ import annotations

import pytest

from tests.api.test_accounting import preempted_once  # noqa: F401 -- a fixture


def test_a_running_attempt_shows_its_charge_so_far_as_its_workload_counts_it(preempted_once, researcher, client):  # noqa: F811
    """A running funded attempt's ``charged_gpu_seconds`` was 0 in ``workloads/{id}/`` (the stored
    charge, written when it ends) and "–" on the page's attempts table, while the same workload's
    ``accounting`` (API, page, ``fairway ls``) already counted its GPUs × run so far: two
    surfaces, two numbers. The attempt's row says what the workload's total counts for it."""
    from rest_framework.test import APIClient

    w, _at = preempted_once
    api = APIClient()
    api.force_authenticate(researcher)
    body = api.get(f"/api/v1/workloads/{w.pk}/").json()
    charges = [a["charged_gpu_seconds"] for a in body["attempts"]]
    assert charges == [4 * 3600, 4 * 1800]  # closed: 4 GPUs × 1 h; open: 4 GPUs × 30 min so far
    assert sum(charges) / 3600 == body["accounting"]["charged_gpu_hours"]
    client.force_login(researcher)
    page = client.get(f"/workloads/{w.pk}/").content.decode()
    assert "4.00 GPU-h" in page and "2.00 GPU-h" in page


@pytest.mark.parametrize(
    ("url", "detail"),
    [
        ("/api/v1/workloads/999/", "No workload 999."),
        ("/api/v1/workloads/999/logs/", "No workload 999."),
        ("/api/v1/groups/999/", "No array group 999."),
        ("/api/v1/budgets/999/", "No budget 999."),
    ],
)
def test_an_unknown_id_is_named_in_the_404(researcher_client, cluster, url, detail):
    """``fairway show 999``, ``cancel 999`` and ``logs 999`` said only "fairway: Not found.
    (not_found)": which of the workload, its attempt or the server's URL was missing, it did not
    say (the hosts API already named an unknown host)."""
    response = researcher_client.get(url)
    assert response.status_code == 404
    assert response.json() == {"detail": detail, "code": "not_found"}
    cancel = researcher_client.post("/api/v1/workloads/999/cancel/")
    assert cancel.json() == {"detail": "No workload 999.", "code": "not_found"}


def test_a_bad_logs_parameter_is_named(researcher_client, submission, cluster):
    """``logs/?attempt=abc`` was refused under ``tail`` ("attempt and tail are integers.")."""
    wid = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    for param in ("attempt", "tail"):
        response = researcher_client.get(f"/api/v1/workloads/{wid}/logs/", {param: "abc"})
        assert response.status_code == 400
        assert response.json() == {param: [f"{param} is an integer."], "code": "invalid"}


@pytest.mark.parametrize("program", ["trai\x00n.py", "   "])
def test_a_bad_program_is_refused_as_the_command_not_as_a_name_never_given(
    researcher_client, submission, cluster, program
):
    """``command: ["trai\\0n.py"]`` without a name was refused twice, the second time as
    ``invalid_name`` ("A name is 1-200 characters, without NUL."), the code of the answer, for the
    name the server derived from the program; ``["   ", "x"]`` was admitted, named "   " (a
    refusal ``invalid_name`` once given as its name) and every start failed to run it."""
    from scheduler.models import Workload

    body = submission(command=[program, "x"])
    body.pop("name", None)
    response = researcher_client.post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 400
    assert "name" not in response.json(), response.json()
    assert response.json()["code"] == "invalid_command"
    assert not Workload.objects.exists()


def test_a_chain_after_a_failed_workload_never_starts(researcher, submit_kwargs):
    """``a`` failed; ``b`` waited for ``a:ok`` and ``c`` for ``b:ok``. The tick that canceled ``b``
    (``settle_dependencies``) then took its snapshot, in which ``c``'s dependency had ended and
    so no longer held it back: ``c`` was placed and ran, after a workload that never succeeded
    (live: "#11 dep2 succeeded" after "#10 canceled"). A dependency ended failed or canceled
    under ``:ok`` keeps its dependent waiting until a tick cancels it."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler import lifecycle
    from scheduler.models import Attempt, Workload
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick
    from tests.services.test_jobs import _start

    a = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="a"))
    b = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="b", after=[f"{a.pk}:ok"]))
    c = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="c", after=[f"{b.pk}:ok"]))
    t0 = timezone.now()
    attempt = _start(a, t0)
    lifecycle.attempt_exited(attempt.host, attempt.pk, 1, now=t0 + timedelta(seconds=5))

    run_tick(a.cluster_id, now=t0 + timedelta(seconds=10))
    b.refresh_from_db()
    c.refresh_from_db()
    assert b.state == Workload.State.CANCELED
    assert (c.state, c.pending_reason) == (Workload.State.PENDING, "dependency")
    assert not Attempt.objects.filter(workload=c).exists()

    run_tick(a.cluster_id, now=t0 + timedelta(seconds=15))
    c.refresh_from_db()
    assert c.state == Workload.State.CANCELED
    assert not Attempt.objects.filter(workload=c).exists()


@pytest.mark.parametrize(
    ("field", "value", "kind"), [("name", 123, "a number"), ("name", ["a"], "a list"), ("image", 5, "a number")]
)
def test_a_name_or_image_of_the_wrong_kind_says_so(researcher_client, submission, cluster, field, value, kind):
    """A spec's ``name: 123`` (YAML reads a number) was refused "A name is 1-200 characters,
    without NUL." and ``image: 5`` "An image reference is at most 500 characters, without NUL.":
    rules the value seemed to keep. The refusal says it is not a string."""
    from scheduler.models import Workload

    response = researcher_client.post("/api/v1/workloads/", submission(**{field: value}), format="json")
    assert response.status_code == 400
    assert f"is a string (quote it), not {kind}." in response.json()[field][0]
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        # DRF throttled every request: the whole API (and its login) answered 429
        ("FAIRWAY_THROTTLE_USER", "0/min", "not a rate like 30/min"),
        ("FAIRWAY_THROTTLE_LOGIN", "00/s", "not a rate like 30/min"),
        # read by config/heap.py with int(): a ValueError traceback at the web process's start;
        # 0 switched the web processes' automatic garbage collection off
        ("FAIRWAY_GC_YOUNG_THRESHOLD", "abc", "is not an integer"),
        ("FAIRWAY_GC_YOUNG_THRESHOLD", "0", "must be >= 1"),
    ],
)
def test_a_setting_that_would_stop_the_service_is_refused_naming_it(monkeypatch, name, value, words):
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured) as error:
        load_settings(monkeypatch, **{name: value})
    assert str(error.value).startswith(f"{name}=") and words in str(error.value)
    monkeypatch.delenv(name)
    assert load_settings(monkeypatch, **{name: "700" if "GC" in name else "1/min"})["FAIRWAY"]["GC_YOUNG_THRESHOLD"] > 0


SCENARIO_HEAD = "name: x\nhosts: [{name: h1, gpus: 8}]\nbudgets: [{path: A, shares: 1}]\n"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        # the step's first expectation was dropped: the file passed without it being checked
        (
            SCENARIO_HEAD + "pending: [{id: A1, budget: A, gpus: 1, min_runtime: 1h}]\n"
            "steps:\n  - tick: {}\n    expect: {started: [B9]}\n    expect: {started: [A1]}\n",
            "line 8: 'expect' is given twice (also on line 7)",
        ),
        # nested aliases ("billion laughs") in a description: the command ran out of memory
        (
            SCENARIO_HEAD
            + "description:\n  - &a0 [x, x, x, x, x, x, x, x, x]\n"
            + "".join(f"  - &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))
            + "steps: [{tick: {}}]\n",
            "line 6: aliases (*name) are not allowed",
        ),
    ],
)
def test_a_scenario_file_with_a_key_twice_or_an_alias_is_refused(tmp_path, text, words):
    from scheduler.scenarios.spec import ScenarioError, load_scenario

    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert words in str(info.value), str(info.value)


@pytest.mark.parametrize(
    ("param", "value", "words"),
    [("budget", "nlp/olmoo", "No budget"), ("state", "runing", "No state"), ("cluster", "h200", "No cluster")],
)
def test_the_workloads_page_names_a_bad_filter_and_lists_nothing(
    researcher, submit_kwargs, client, researcher_client, param, value, words
):
    """``/workloads/?budget=nlp/olmoo`` (a typo, a stale bookmark) listed every workload as if they
    were that budget's, saying nothing, where ``GET workloads/?budget=nlp/olmoo`` answers 400
    naming it. The page names the filter and lists none."""
    from scheduler.services import do_submit_workload

    do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="mine"))
    api = researcher_client.get("/api/v1/workloads/", {param: value})
    assert api.status_code == 400 and words in api.json()[param][0]
    client.force_login(researcher)
    page = client.get("/workloads/", {param: value})
    assert page.status_code == 400
    text = page.content.decode()
    assert 'id="filter-errors"' in text and words in text
    assert "/workloads/1/" not in text
    rows = client.get("/workloads/", {param: value}, headers={"HX-Request": "true", "HX-Target": "workload-rows"})
    assert rows.status_code == 200 and words in rows.content.decode()
    assert "mine" in client.get("/workloads/").content.decode()


def test_a_submit_page_posted_twice_creates_one_workload(researcher, cluster, client):
    """A double click on Submit (or a reload that resends the form) posted the page twice: two
    workloads, both queued and both charged. The page carries a token; its second POST creates
    nothing and leads to the first one's workload. A refused POST leaves the token free."""
    import re

    from scheduler.models import Workload
    from tests.web.test_pages import _form

    client.force_login(researcher)
    page = client.get("/submit/").content.decode()
    tokens = set(re.findall(r'name="submit_token" value="([^"]+)"', page))
    assert len(tokens) == 1  # the same in both forms of one page
    token = tokens.pop()
    bad = client.post("/submit/", {**_form(gpu_count="0"), "submit_token": token})
    assert bad.status_code == 400 and not Workload.objects.exists()
    first = client.post("/submit/", {**_form(), "submit_token": token})
    assert first.status_code == 302
    (workload,) = Workload.objects.all()
    second = client.post("/submit/", {**_form(), "submit_token": token})
    assert (second.status_code, second["Location"]) == (302, f"/workloads/{workload.pk}/")
    assert Workload.objects.count() == 1
    fresh = re.search(r'name="submit_token" value="([^"]+)"', client.get("/submit/").content.decode()).group(1)
    assert fresh != token
    assert client.post("/submit/", {**_form(), "submit_token": fresh}).status_code == 302
    assert Workload.objects.count() == 2


def test_a_submission_without_an_answer_is_not_called_unreachable(monkeypatch, tmp_path):
    """``fairway submit`` on a busy server whose answer took longer than the CLI waits said
    "cannot reach SERVER: ReadTimeout. Is the server running there?": the server had it, and
    running it again queued a second workload. The message says it may have been done."""
    import io

    import requests

    from fairway_cli.cli import EXIT_UNREACHABLE, main

    def timed_out(self, method, url, **kwargs):
        raise requests.ReadTimeout("read timed out")

    monkeypatch.setattr(requests.Session, "request", timed_out)
    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("FAIRWAY_URL", "http://fairway.invalid")
    monkeypatch.setenv("FAIRWAY_TOKEN", "x")
    out, err = io.StringIO(), io.StringIO()
    code = main(["submit", "-b", "nlp/olmo", "-M", "1h", "--", "true"], out=out, err=err)
    assert code == EXIT_UNREACHABLE
    assert "no answer from http://fairway.invalid to POST workloads/" in err.getvalue()
    assert "may have done it" in err.getvalue() and "Is the server running" not in err.getvalue()
    err = io.StringIO()
    assert main(["ls"], out=io.StringIO(), err=err) == EXIT_UNREACHABLE  # a read: nothing was done
    assert "cannot reach" in err.getvalue()


def test_a_held_workload_names_the_budget_on_hold(researcher, submit_kwargs, org_tree, researcher_client):
    """ "Its budget (or a budget above it) is on hold" left a researcher of nlp/olmo to find which
    of nlp/olmo, nlp and the root leadership had held. The reason names it."""
    from budgets.services import do_set_hold
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    do_set_hold(org_tree["nlp"], True)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(w.cluster_id)
    body = researcher_client.get(f"/api/v1/workloads/{w.pk}/").json()
    assert body["pending_reason"] == "held"
    assert body["why_pending"] == ["Budget nlp is on hold: no new work of it starts until leadership releases it."]
