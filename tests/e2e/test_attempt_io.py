"""What an attempt sees and leaves behind (DESIGN.md §5): its environment, the preemption notice it
reads on SIGTERM, and its log, tailed through the API from the agent that runs it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from scheduler.models import Attempt, Workload

pytestmark = [pytest.mark.timeout(60)]

# On SIGTERM: print the preemption notice, then exit 0 (a clean checkpoint-and-exit).
_TRAP = 'trap \'echo "notice: $(cat "$FAIRWAY_PREEMPT_FILE" | tr "\\n" " ")"; exit 0\' TERM; '
_SHELL_JOB = (
    _TRAP
    + 'echo "env: $FAIRWAY_ATTEMPT $FAIRWAY_WORKLOAD_ID $NNODES $NODE_RANK $WORLD_SIZE"; '
    + ("while :; do sleep 0.1; done")
)


def _get(stack: Any, path: str, token: str | None = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(  # noqa: S310 -- http:// of the local test server
        f"{stack.base_url}{path}", headers={"Authorization": f"Token {token or stack.token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:  # noqa: S310 -- see above
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _cancel(stack: Any, workload_id: int) -> None:
    req = urllib.request.Request(  # noqa: S310 -- http:// of the local test server
        f"{stack.base_url}/api/v1/workloads/{workload_id}/cancel/",
        data=b"{}",
        headers={"Authorization": f"Token {stack.token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 -- see above
        assert resp.status == 202  # a stop was issued to the running attempt


def test_log_tail_through_the_api_and_the_preemption_notice_on_stop(stack):
    from accounts.models import User
    from accounts.services import create_api_token

    # Given a running workload whose command prints its env and, on SIGTERM, its preemption notice
    wid = stack.submit("org/alpha", gpus=1, min_runtime=0, duration=0, command=["sh", "-c", _SHELL_JOB], env={})
    attempt = stack.wait_until(
        lambda: Attempt.objects.filter(workload_id=wid, started_at__isnull=False).first(), 20, "the start"
    )
    stack.wait_until(lambda: "env:" in stack.attempt_log(attempt.pk), 10, "the first output")

    # When a member asks for the log tail through the API
    status, body = _get(stack, f"/api/v1/workloads/{wid}/logs/?tail=4096")

    # Then it comes live from the agent, with the per-attempt and rendezvous env
    assert status == 200, body
    assert (body["workload"], body["attempt"], body["attempt_id"]) == (wid, 1, attempt.pk)
    (part,) = body["parts"]
    assert (part["host"], part["rank"], part["eof"], part["error"]) == ("h1", 0, False, None)
    assert f"env: {attempt.wire_id} {wid} 1 0 1" in part["data"]  # FAIRWAY_ATTEMPT is the wire id

    # and a non-member is refused, a missing attempt is a 404, a bad tail a 400
    outsider = User.objects.create_user("olga", password="not-used")
    _, other_token = create_api_token(outsider)
    assert _get(stack, f"/api/v1/workloads/{wid}/logs/", other_token)[0] == 403
    assert _get(stack, f"/api/v1/workloads/{wid}/logs/?attempt=7")[1]["code"] == "no_attempt"
    assert _get(stack, f"/api/v1/workloads/{wid}/logs/?tail=-1")[0] == 400

    # When the workload is canceled: the agent writes the notice, then sends SIGTERM
    _cancel(stack, wid)
    stack.wait_until(lambda: Workload.objects.get(pk=wid).state == Workload.State.CANCELED, 20, "the cancel")
    attempt.refresh_from_db()

    # Then the workload read the deadline (now + grace) and the reason from FAIRWAY_PREEMPT_FILE
    log = stack.attempt_log(attempt.pk)
    assert "notice: FAIRWAY_PREEMPT_DEADLINE=" in log and "FAIRWAY_PREEMPT_REASON=canceled" in log, log
    deadline = int(log.split("FAIRWAY_PREEMPT_DEADLINE=")[1].split()[0])
    assert abs(deadline - (attempt.stop_requested_at.timestamp() + 5)) < 3  # GRACE_PERIOD_S is 5 in the stack
    assert attempt.exit_code == 0 and attempt.end_reason == "canceled"
    # and the complete log is still served after the end
    status, body = _get(stack, f"/api/v1/workloads/{wid}/logs/")
    assert status == 200 and body["parts"][0]["eof"] is True and "notice:" in body["parts"][0]["data"]
