"""left56: ``fairway wait`` said "running → failed" without the exit code ``fairway show`` gives:
the list rows it reads carry the last attempt's end (``last_end``), in one query for the page."""

from __future__ import annotations

from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures
from tests.cli.test_cli_wait import become, fairway, submitted  # noqa: F401 -- fixtures

URL = "/api/v1/workloads/"


def _failed(researcher, submit_kwargs, cluster, code: int | None = 3) -> Workload:
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(cluster.pk)
    attempt = Attempt.objects.get(workload=w)
    assert lifecycle.attempt_started(attempt.host, attempt.pk)
    assert lifecycle.attempt_exited(attempt.host, attempt.pk, exit_code=code)
    run_tick(cluster.pk)
    w.refresh_from_db()
    assert w.state == Workload.State.FAILED
    return w


def test_the_list_row_carries_the_last_attempts_end_in_the_pages_queries(
    researcher, researcher_client, submit_kwargs, cluster, django_assert_max_num_queries
):
    w = _failed(researcher, submit_kwargs, cluster)
    pending = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    rows = {r["id"]: r for r in researcher_client.get(URL).json()["results"]}
    assert rows[w.pk]["last_end"] == {"reason": "failed", "exit_code": 3}
    assert rows[pending.pk]["last_end"] is None
    detail = researcher_client.get(f"{URL}{w.pk}/").json()
    assert detail["last_end"] == rows[w.pk]["last_end"]

    with django_assert_max_num_queries(20) as captured:
        researcher_client.get(URL)
    few = len(captured.captured_queries)
    for _ in range(3):
        _failed(researcher, submit_kwargs, cluster, code=1)
    with django_assert_max_num_queries(few):  # no query per row
        researcher_client.get(URL)


def test_wait_says_the_exit_code_as_show_does(
    fairway,  # noqa: F811
    researcher,
    submit_kwargs,
    cluster,
):
    w = _failed(researcher, submit_kwargs, cluster, code=3)
    code, out, _err = fairway("wait", str(w.pk))
    assert code == 1
    assert out.splitlines()[0] == f"#{w.pk} {w.name}: failed (exit 3)"
    _c, shown, _e = fairway("show", str(w.pk))
    assert "failed (exit 3)" in shown


def test_wait_names_an_end_reason_other_than_the_state(fairway, submitted, clock):  # noqa: F811
    w = submitted()
    clock(become(w, "running", pending_reason=""), become(w, "failed"))
    code, out, _err = fairway("wait", str(w.pk))  # no attempt: the state alone, as before
    assert code == 1 and f"#{w.pk} running → failed" in out.splitlines()
