"""``fairway wait``, ``submit --wait`` and ``resubmit --wait`` against a live server (docs/jobs.md
"Wait for workloads"). The wait's clock is a fake one (``clock``, tests/cli/conftest.py): each
pause it takes moves the workloads on by one scripted step, so no test sleeps."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import requests
from django.utils import timezone

from fairway_cli.cli import (
    EXIT_API,
    EXIT_INTERRUPTED,
    EXIT_NOT_SUCCEEDED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    FINAL_WORKLOAD_STATES,
    SUCCEEDED,
    main,
)
from scheduler.models import ArrayGroup, Workload
from scheduler.services import do_submit_workload
from tests.cli.test_cli import REPO, cli, logged_in  # noqa: F401 -- the live-server fixtures


def become(w: Workload, state: str, **fields: Any) -> Callable[[], None]:
    """A step: ``w`` is in ``state`` now (final states with their finish time)."""

    def step() -> None:
        final = {"finished_at": timezone.now()} if state in FINAL_WORKLOAD_STATES else {}
        Workload.objects.filter(pk=w.pk).update(state=state, **final, **fields)

    return step


def together(*steps: Callable[[], None]) -> Callable[[], None]:
    return lambda: [step() for step in steps] and None


def nothing() -> None:
    return None


@pytest.fixture
def submitted(researcher, submit_kwargs) -> Callable[..., Workload]:
    """A pending workload, waiting for GPUs with an estimated start."""

    def make(name: str = "pretrain") -> Workload:
        w = do_submit_workload(researcher, **submit_kwargs(name=name))
        start = timezone.now().replace(hour=23, minute=30, second=0, microsecond=0)
        Workload.objects.filter(pk=w.pk).update(pending_reason="insufficient_gpus", estimated_start=start)
        return w

    return make


@pytest.fixture
def fairway(logged_in):  # noqa: F811 -- the imported fixture
    """``fairway(*argv)`` → (exit code, stdout, stderr), logged in as the researcher."""
    return logged_in


def test_final_states_are_the_servers() -> None:
    """The CLI's copy of the final states (it imports nothing of the server) is the model's."""
    assert tuple(Workload.FINAL_STATES) == FINAL_WORKLOAD_STATES
    assert SUCCEEDED == Workload.State.SUCCEEDED


def test_wait_says_each_change_backs_off_and_exits_0_when_every_one_succeeded(fairway, submitted, clock):
    a, b = submitted("pretrain"), submitted("eval")
    fake = clock(
        become(a, "running", pending_reason=""),
        nothing,
        nothing,
        together(become(a, "succeeded"), become(b, "running", pending_reason="")),
        become(b, "succeeded"),
    )

    code, out, err = fairway("wait", str(a.pk), f"#{b.pk}", str(a.pk))

    assert code == EXIT_OK, err
    assert out.splitlines() == [
        f"#{a.pk} pretrain: pending (not enough GPUs · by 23:30:00 UTC)",
        f"#{b.pk} eval: pending (not enough GPUs · by 23:30:00 UTC)",
        f"#{a.pk} pending → running",
        f"#{a.pk} running → succeeded",
        f"#{b.pk} pending → running",
        f"#{b.pk} running → succeeded",
        "all 2 succeeded",
    ]
    # 2 s, again 2 s after a change, then 1.5x while nothing moves, 2 s again after a change
    assert fake.sleeps == [2.0, 2.0, 3.0, 4.5, 2.0]


def test_the_pause_backs_off_to_fifteen_times_the_first(fairway, submitted, clock):
    w = submitted()
    fake = clock(*[nothing] * 12, become(w, "succeeded"))

    code, _out, err = fairway("wait", str(w.pk))

    assert code == EXIT_OK, err
    assert max(fake.sleeps) == 30.0 and fake.sleeps[-3:] == [30.0, 30.0, 30.0]


def test_a_failed_or_canceled_workload_exits_1_naming_them(fairway, submitted, clock):
    a, b, c = submitted("a"), submitted("b"), submitted("c")
    clock(together(become(a, "succeeded"), become(b, "failed"), become(c, "canceled")))

    code, out, err = fairway("wait", str(a.pk), str(b.pk), str(c.pk))

    assert code == EXIT_NOT_SUCCEEDED == 1, err
    assert out.splitlines()[-1] == f"1 of 3 succeeded; not: #{b.pk} failed, #{c.pk} canceled"


def test_a_reason_that_changes_while_pending_is_said_an_estimate_alone_is_not(fairway, submitted, clock):
    w = submitted()
    later = timezone.now() + timedelta(hours=1)
    clock(
        lambda: Workload.objects.filter(pk=w.pk).update(estimated_start=later),
        become(w, "pending", pending_reason="fair_share"),
        become(w, "succeeded"),
    )

    code, out, err = fairway("wait", str(w.pk))

    assert code == EXIT_OK, err
    assert out.splitlines()[1].startswith(f"#{w.pk} pending → pending (other budgets go first · by ")
    assert len(out.splitlines()) == 4


def test_timeout_exits_124_and_never_sleeps_past_it(fairway, submitted, clock):
    w = submitted()
    fake = clock()  # nothing ever moves

    code, out, err = fairway("wait", str(w.pk), "--timeout", "10s")

    assert code == EXIT_TIMEOUT == 124, err
    assert fake.sleeps == [2.0, 3.0, 4.5, 0.5]  # the last pause ends at the deadline
    assert out.splitlines()[-1] == f"timed out after 10s; still not final: #{w.pk} pending"
    assert Workload.objects.get(pk=w.pk).state == "pending"  # the work goes on


def test_json_prints_one_document_of_the_final_states(fairway, submitted, clock):
    a, b = submitted("a"), submitted("b")
    clock(together(become(a, "succeeded"), become(b, "failed")))

    code, out, err = fairway("wait", str(a.pk), str(b.pk), "--json")

    assert code == EXIT_NOT_SUCCEEDED, err
    assert json.loads(out) == {
        "workloads": [{"id": a.pk, "name": "a", "state": "succeeded"}, {"id": b.pk, "name": "b", "state": "failed"}],
        "timed_out": False,
        "exit_code": 1,
    }


def test_an_unknown_id_is_refused_before_any_wait(fairway, submitted, clock):
    w = submitted()
    fake = clock()

    code, out, err = fairway("wait", str(w.pk), "999998", "#999999")

    assert code == EXIT_API
    assert err == "fairway: no workload #999998, #999999: nothing waited for\n"
    assert out == "" and fake.sleeps == []


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("wait",), "give one or more workload ids or --group ID"),
        (("wait", "1", "--group", "1"), "not both"),
        (("wait", "x1"), "'x1' is not a workload id"),
        (("wait", "1", "--timeout", "soon"), "'soon' is not a duration"),
        (("wait", "1", "--timeout", "0"), "must be at least 1s"),
        (("submit", "--wait-timeout", "1h", "-M", "0", "--", "true"), "--wait-timeout goes with --wait"),
        (("submit", "--wait", "--quote", "-M", "0", "--", "true"), "nothing to --wait for"),
        (("resubmit", "1", "--wait", "--quote"), "nothing to --wait for"),
    ],
)
def test_usage_errors_exit_2_and_wait_for_nothing(clock, capsys, monkeypatch, argv, says):
    """Refused before any request: no server runs here."""
    monkeypatch.setenv("FAIRWAY_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FAIRWAY_TOKEN", "t")
    fake = clock()
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    assert code == EXIT_USAGE
    assert says in err.getvalue() + capsys.readouterr().err  # argparse's own errors go to sys.stderr
    assert fake.sleeps == [] and out.getvalue() == ""


def test_wait_for_a_group_and_an_unknown_group(fairway, researcher, clock):
    code, out, err = fairway(
        "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--array", "0-2", "--name", "sweep", "--", "true"
    )
    assert code == EXIT_OK, err
    group = ArrayGroup.objects.get()
    first, second, third = group.members.order_by("array_index")
    clock(
        together(become(first, "succeeded"), become(second, "running")),
        together(become(second, "succeeded"), become(third, "failed")),
    )

    code, out, err = fairway("wait", "--group", str(group.pk))

    assert code == EXIT_NOT_SUCCEEDED, err
    lines = out.splitlines()
    assert lines[:3] == [
        f"#{w.pk} sweep[{w.array_index}]: pending (not considered yet)" for w in (first, second, third)
    ]
    assert lines[-1] == f"2 of 3 succeeded; not: #{third.pk} failed"

    code, _out, err = fairway("wait", "--group", "999999")
    assert (code, err) == (EXIT_API, "fairway: no group 999999\n")


def test_submit_wait_waits_for_its_array_and_resubmit_wait_for_the_new_one(fairway, clock):
    def every_member(state: str) -> Callable[[], None]:
        return lambda: Workload.objects.exclude(state=state).update(state=state, finished_at=timezone.now())

    clock(every_member("succeeded"))
    code, out, err = fairway(
        "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--array", "0-1", "--name", "sweep", "--wait", "--", "true"
    )

    assert code == EXIT_OK, err
    first, second = ArrayGroup.objects.get().members.order_by("array_index")
    lines = out.splitlines()
    assert lines[0].startswith(f"submitted 2 members #{first.pk}–#{second.pk}")
    assert lines[-3:] == [f"#{first.pk} pending → succeeded", f"#{second.pk} pending → succeeded", "all 2 succeeded"]

    clock(every_member("failed"))
    code, out, err = fairway("resubmit", str(first.pk), "--wait", "--json")

    assert code == EXIT_NOT_SUCCEEDED, err + out
    again = Workload.objects.get(resubmitted_from=first)
    assert json.loads(out)["workloads"] == [{"id": again.pk, "name": again.name, "state": "failed"}]


def test_a_busy_or_unreachable_server_is_asked_again_after_its_retry_after(fairway, submitted, clock, monkeypatch):
    w = submitted()
    real = requests.Session.request
    answers: list[Any] = []

    def request(self: requests.Session, method: str, url: str, **kwargs: Any) -> Any:
        if answers:
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        return real(self, method, url, **kwargs)

    def throttled() -> requests.Response:
        response = requests.Response()
        response.status_code = 429
        response.headers["Retry-After"] = "7"
        response._content = b'{"detail": "Request was throttled.", "code": "throttled"}'
        return response

    monkeypatch.setattr(requests.Session, "request", request)
    fake = clock(
        lambda: answers.append(throttled()),
        lambda: answers.append(requests.ConnectionError("refused")),
        nothing,
        become(w, "succeeded"),
    )

    code, out, err = fairway("wait", str(w.pk))

    assert code == EXIT_OK, err
    assert "[Request was throttled: asking again in 7s]" in out.splitlines()
    assert len([line for line in out.splitlines() if line.startswith("[")]) == 1  # one line per outage
    assert fake.sleeps[:3] == [2.0, 7.0, 10.5]  # the Retry-After, then backing off from it
    assert out.splitlines()[-1] == "1 succeeded"


def test_ctrl_c_exits_130_and_leaves_the_work(fairway, submitted, clock):
    w = submitted()

    def interrupt() -> None:
        raise KeyboardInterrupt

    clock(interrupt)
    code, _out, err = fairway("wait", str(w.pk))

    assert code == EXIT_INTERRUPTED == 130
    assert err == "fairway: interrupted: stopped waiting; the workloads go on (`fairway cancel ID` stops one)\n"
    assert Workload.objects.get(pk=w.pk).state == "pending"


def test_sigint_to_a_real_fairway_wait_exits_130_without_a_traceback(fairway, submitted):
    w = submitted()
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the logged_in fixture's config and server
    env.pop("FAIRWAY_TOKEN", None)
    proc = subprocess.Popen(  # noqa: S603 -- our own module
        [sys.executable, "-m", "fairway_cli", "wait", str(w.pk), "--interval", "0.05"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a shell gives it: an xdist worker (or a run started in the background) ignores
        # SIGINT, and so would its children (as test_port_forward_e2e's)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509 -- takes no lock
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # it is waiting now
        proc.send_signal(signal.SIGINT)
        _rest, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert first.startswith(f"#{w.pk} pretrain: pending")
    assert proc.returncode == 130
    assert "Traceback" not in err and "interrupted: stopped waiting" in err
