"""``fairway exec``: one command run once inside one's own running attempt (Slurm's ``srun
--jobid=ID --overlap``, ``kubectl exec POD -- CMD``; docs/jobs.md, "Run a command in a running
workload").

The API asks the agent of the attempt's first (rank 0) host, or of the gang member ``rank`` asked
for (:func:`exec_host`), through the channel layer
(:func:`scheduler.gateway.request_exec`); the agent runs the command in the attempt's containment
(agent/runtime: its owner's identity, cgroup, namespaces and environment, secrets included) and
answers its exit code and output. Only the workload's owner may: the command runs as the owner,
with the owner's secrets in reach, so neither a budget's managers nor admins may run one as them.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agent.protocol import EXEC_MAX_OUTPUT, EXEC_MAX_TIMEOUT_S, Exec, ProtocolError, encode, one_persons_share
from config.errors import ServiceError, retry_after_s
from fairway_cli.words import COMMAND_TOO_LONG, HOLD_WORDS, LEAVE_OUT_ATTEMPT, LEAVE_OUT_RANK
from scheduler import gateway
from scheduler.models import Attempt, Host, Workload
from scheduler.services import already_final_words, command_problem

EXEC_DEFAULT_TIMEOUT_S = 60
EXEC_FORBIDDEN = (
    "Only the workload's owner may run a command in it: the command runs as the owner, with the owner's secrets."
)
PORT_FORBIDDEN = (
    "Only the workload's owner may reach a port in it: the connection is made as the owner, from inside the workload."
)
"""The forward's refusal of anyone else (try62: it said exec's "may run a command in it")."""
COMMAND_RUNS, PORT_REACHED = "a command runs", "a port is reached"
"""What :func:`not_running_words` says runs only in a running attempt: exec's, port-forward's."""
READOPTED_WORDS = (
    "Attempt {number} was started before its agent on host {host} restarted, and the agent could not read its "
    "environment, secrets included, back from its command (gone, or replaced; or the agent is older than "
    "that): it is kept only in memory, never on disk, so no command can run in it. Commands run again in the "
    "workload's next attempt; meanwhile its output is in fairway logs {pk}."
)
"""The refusal of a command in an attempt its agent re-adopted after a restart (docs/jobs.md, exl61)."""
NOT_BASE64 = "The workload's host sent bytes that are not base64."
"""Why a command's, session's or forwarded connection's output frame was refused (its agent's bug)."""
STDIN_AS_OUTPUT = "The workload's host sent a command's input (stdin) as its output."
"""Why a one-shot command's ``exec_data`` of ``stdin`` was refused (exec47)."""
AGENT_TOO_OLD = "The agent of host {host} is older than fairway exec: it must be upgraded to run commands in attempts."


_in_flight = 0
_in_flight_lock = threading.Lock()


def exec_slots() -> int:
    """Commands one web process waits on at once: a quarter of its request threads (at least 1).
    Each holds a thread up to its timeout (600 s at most): unbounded, a few ``sleep 600`` would hold
    every thread of the process and it would answer nothing else (429 ``exec_busy`` past it)."""
    return max(1, int(settings.FAIRWAY_WEB_SYNC_THREADS) // 4)


def exec_slots_per_user() -> int:
    """Of :func:`exec_slots`, how many one person's commands may hold at once: half (at least 1),
    so that one person's few ``sleep 600`` leave the others room (brk59: three of them answered
    everyone else ``exec_busy`` for ten minutes)."""
    return one_persons_share(exec_slots())


_in_flight_by_user: dict[int, int] = {}


@dataclass(frozen=True, slots=True)
class ExecAnswer:
    """What the command gave: its exit code (124: killed at its timeout), its output (each
    stream's first :data:`EXEC_MAX_OUTPUT` bytes) and whether some was dropped."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    truncated: bool
    timed_out: bool


def _refuse(code: str, message: str, status: int, field: str | None = None) -> ServiceError:
    return ServiceError(code, field, message, status=status)


def _rank(data: dict[str, Any]) -> int:
    """``rank`` of a body or first frame: a gang member's node rank (0, 1, ...), default 0."""
    rank = data.get("rank", 0)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise _refuse("invalid_rank", "The rank is a gang member's node rank (0, 1, ...).", 400, "rank")
    return rank


def exec_arguments(data: Any) -> tuple[list[str], int, int | None, int]:
    """The body of ``POST workloads/{id}/exec/`` checked: ``command`` (a submission's rule,
    :func:`scheduler.services.command_problem`), ``timeout`` (seconds, 1..600, default 60),
    ``attempt`` (a number, or null: the latest) and ``rank`` (a gang member's, default 0). 400 in
    the API's format otherwise."""
    if not isinstance(data, dict):
        raise _refuse("invalid", 'The body is a JSON object: {"command": [...]}.', 400, "non_field_errors")
    unknown = sorted(set(data) - {"command", "timeout", "attempt", "rank"})
    if unknown:
        raise _refuse("unknown_field", f"Unknown field(s): {', '.join(unknown)}.", 400, unknown[0])
    command = data.get("command")
    if (problem := command_problem(command)) is not None:
        raise _refuse("invalid_command", problem, 400, "command")
    timeout = data.get("timeout", EXEC_DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= EXEC_MAX_TIMEOUT_S:
        raise _refuse("invalid_timeout", f"The timeout is whole seconds, 1 to {EXEC_MAX_TIMEOUT_S}.", 400, "timeout")
    number = data.get("attempt")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
        raise _refuse("invalid_attempt", "The attempt is its number (1, 2, ...).", 400, "attempt")
    rank = _rank(data)
    try:  # what travels to the agent in one frame (multi-byte characters: 64 KiB of them may not)
        encode(Exec(attempt_id=1, command=list(command), timeout_s=timeout, max_output=EXEC_MAX_OUTPUT))
    except ProtocolError:
        raise _refuse("invalid_command", COMMAND_TOO_LONG, 400, "command") from None
    return list(command), timeout, number, rank


def not_running_words(
    workload: Workload, attempts: Any, attempt: Attempt | None, number: int | None, what: str = COMMAND_RUNS
) -> str:
    """``not_running``'s message, saying what to do (try59: "Workload 3 is not running (it has no
    running attempt)" of a finished one): a finished workload's output is in its logs; a pending
    one waits for its start; a wrong ``attempt`` names the running one; one starting, a moment.
    ``what`` runs only in a running attempt (:data:`COMMAND_RUNS`, :data:`PORT_REACHED`)."""
    pk = workload.pk
    if workload.state in Workload.FINAL_STATES:
        return (
            f"{already_final_words([workload.state])} {what[0].upper()}{what[1:]} only in a running attempt; "
            f"its logs keep what it wrote (fairway logs {pk})."
        )
    running = attempts.filter(started_at__isnull=False, ended_at__isnull=True).order_by("-number").first()
    if number is not None and running is not None:
        which = (
            f"Attempt {number} of workload {pk} has ended"
            if attempt is not None
            else f"Workload {pk} has no attempt {number}"
        )
        return f"{which}: its running attempt is {running.number} ({LEAVE_OUT_ATTEMPT})."
    if attempt is not None and attempt.started_at is None and attempt.ended_at is None:
        return f"Attempt {attempt.number} of workload {pk} is starting: try again once its host has started it."
    if workload.hold in HOLD_WORDS:  # it never starts while held (try60: "try again once it has started")
        who = "an admin releases it" if workload.hold == "admin" else f"it is released (fairway release {pk})"
        return (
            f"Workload {pk} is pending, {HOLD_WORDS[workload.hold]}: it starts only once {who}, and {what} "
            "only in a running attempt."
        )
    return (
        f"Workload {pk} is {workload.state}: {what} only in a running attempt, so try again once it has "
        f"started (its estimated start is on its page and in fairway show {pk})."
    )


def exec_host(attempt: Attempt, rank: int = 0) -> Host:
    """The host of ``attempt``'s gang member ``rank`` (0: its first host, ``Attempt.host``; a
    gang's parts share its wire id, so each member's agent knows it by the same id): 400
    ``invalid_rank`` naming the valid range past its members, 409 ``host_offline``."""
    hosts = [attempt.host]
    if rank:
        links = attempt.gpu_links.select_related("gpu__host").order_by("rank")
        by_rank = {link.rank: link.gpu.host for link in links}
        hosts = [by_rank[r] for r in sorted(by_rank)] or hosts
        if rank >= len(hosts):
            span = (
                f"one host: its rank is 0 ({LEAVE_OUT_RANK})"
                if len(hosts) == 1
                else f"{len(hosts)} hosts: rank 0 to {len(hosts) - 1}"
            )
            raise _refuse(
                "invalid_rank",
                f"Attempt {attempt.number} of workload {attempt.workload_id} runs on {span}.",
                400,
                "rank",
            )
    host = hosts[rank]
    if host.removed_at is not None or host.state == Host.State.OFFLINE:
        raise _refuse("host_offline", f"Host {host.name} of attempt {attempt.number} is offline.", 409)
    return host


def exec_target(user: Any, workload: Workload, number: int | None, rank: int = 0, port: bool = False) -> Attempt:
    """The running attempt (``number``, or the latest) of ``workload`` that its owner ``user`` may
    run a command in, on its gang member ``rank``'s host (:func:`exec_host`): 403 ``forbidden`` for
    anyone else, 409 ``not_running`` (no such attempt running: the agent's confirmed start and no
    end), ``host_offline``; 400 ``invalid_rank``."""
    if workload.owner_id != user.pk:
        # try59: said nobody what to do: the owner may run it (whose name every list shows)
        words = PORT_FORBIDDEN if port else EXEC_FORBIDDEN
        raise _refuse("forbidden", f"{words} To look inside it, ask its owner, {workload.owner.username}.", 403)
    attempts = Attempt.objects.filter(workload=workload).select_related("host")
    attempt = (attempts.filter(number=number) if number is not None else attempts.order_by("-number")).first()
    if attempt is None or attempt.started_at is None or attempt.ended_at is not None:
        what = PORT_REACHED if port else COMMAND_RUNS
        raise _refuse("not_running", not_running_words(workload, attempts, attempt, number, what), 409)
    exec_host(attempt, rank)
    return attempt


def do_exec(
    user: Any, workload: Workload, command: list[str], timeout: int, number: int | None, rank: int = 0
) -> ExecAnswer:
    """Run ``command`` in ``workload``'s running attempt (``number``, or its latest) on its gang
    member ``rank``'s host for its owner ``user``: 400 ``invalid_rank``; 403 ``forbidden`` for
    anyone else; 409 ``not_running`` (no such attempt running: the agent's confirmed start and no
    end), ``host_offline`` (its agent is not connected), ``agent_too_old``, ``exec_readopted`` (its
    agent restarted since the start and could not read its environment back, readopt46),
    ``exec_failed`` (the attempt's containment could not be entered, or the agent's runtime cannot
    run commands there); 503 ``exec_unavailable`` (the channel layer failed: nothing was sent, or
    the answer was lost: the command may have run); 504
    ``exec_timeout`` (no answer within the timeout and a few seconds)."""
    attempt = exec_target(user, workload, number, rank)
    host = exec_host(attempt, rank)
    global _in_flight
    with _in_flight_lock:
        mine = _in_flight_by_user.get(user.pk, 0)
        if mine >= exec_slots_per_user():
            raise _refuse(
                "exec_busy",
                f"You run {mine} command(s) on this server already, as many as one person may at once; "
                "try again when one has ended.",
                429,
            )
        if _in_flight >= exec_slots():
            raise _refuse("exec_busy", "This server runs as many commands as it may at once; try again shortly.", 429)
        _in_flight += 1
        _in_flight_by_user[user.pk] = mine + 1
    try:
        reply = gateway.request_exec(host.pk, attempt.wire_id, command, timeout, EXEC_MAX_OUTPUT)
    finally:
        with _in_flight_lock:
            _in_flight -= 1
            if (left := _in_flight_by_user.pop(user.pk, 1) - 1) > 0:
                _in_flight_by_user[user.pk] = left
    error = reply.get("error")
    if error is None:
        return ExecAnswer(
            int(reply["exit_code"]),
            _output(reply, "stdout"),
            _output(reply, "stderr"),
            bool(reply.get("truncated")),
            bool(reply.get("timed_out")),
        )
    raise agent_refusal(str(error), str(reply.get("message") or ""), host.name, attempt.number, workload.pk)


def _output(reply: dict[str, Any], stream: str) -> bytes:
    """A stream's bytes of the consumer's ``exec.reply`` (base64, exec47); a reply of a web process
    older than that has the text."""
    if f"{stream}_base64" in reply:
        return base64.b64decode(str(reply[f"{stream}_base64"]))
    return str(reply.get(stream, "")).encode()


def layer_unavailable(message: str, port: bool = False) -> ServiceError:
    """503 ``exec_unavailable`` of a command, session or forwarded connection that could not be
    sent to its agent: the channel layer (Redis) failed (``message``: what failed)."""
    undone = "no connection was made" if port else "the command did not run"
    return _refuse(
        "exec_unavailable", f"The server cannot reach the agents now ({message}); {undone}. Try again shortly.", 503
    )


def agent_refusal(error: str, message: str, host_name: str, number: int, workload_id: int = 0) -> ServiceError:
    """The refusal of a command (one-shot or interactive) its agent answered ``error`` to, or
    that got no answer: the API's codes and words."""
    if error == "exec_readopted":  # exl61: said the wire id, and nothing of what to do
        return _refuse("exec_readopted", READOPTED_WORDS.format(number=number, host=host_name, pk=workload_id), 409)
    if error == "exec_timeout":
        return _refuse("exec_timeout", f"The agent of host {host_name} did not answer in time ({message}).", 504)
    if error == "unavailable":
        return layer_unavailable(message)
    if error == "answer_lost":  # db61: Redis went away after the command was sent
        return _refuse(
            "exec_unavailable",
            f"The server lost the agent's answer ({message}); the command was sent and may have run."
            " Try again shortly.",
            503,
        )
    if error == "agent_too_old":
        return _refuse("agent_too_old", AGENT_TOO_OLD.format(host=host_name), 409)
    if error == "host_offline":
        return _refuse("host_offline", f"The agent of host {host_name} is not connected.", 409)
    if error in ("exec_not_running", "unknown_attempt"):
        return _refuse("not_running", f"Attempt {number} does not run on host {host_name}: {message}", 409)
    if error == "owner_busy":  # left60: one owner's share of the agent's slots (agent.client.MAX_EXECS)
        return _refuse(
            "exec_busy",
            f"You run {message} on host {host_name} already, as many as one person may there at once; "
            "try again when one has ended.",
            429,
        )
    if error == "busy":
        return _refuse("exec_busy", f"Host {host_name} runs too many commands at once; try again.", 429)
    return _refuse("exec_failed", f"The command could not run in attempt {number}: {message}", 409)


# --- interactive sessions (``fairway exec -it``, ``/ws/exec/``) -----------------------------------

TTY_DEFAULT_SIZE = (24, 80)


@dataclass(frozen=True, slots=True)
class TtyTarget:
    """Where an interactive session runs: the attempt (its wire id and number), its host (primary
    key and name), and what to run there on a terminal of ``rows`` × ``cols``."""

    wire_id: int
    number: int
    host_id: int
    host_name: str
    command: list[str]
    rows: int
    cols: int
    workload_id: int = 0
    tty: bool = True
    """On a terminal (``-it``), else pipes (``fairway exec -i``: stdin piped, stdout and stderr apart)."""


def token_user(header: str) -> Any:
    """The user of ``header`` (``Token <key>``, the API's ``Authorization``), by the API's own
    check (``accounts.auth.FairwayTokenAuthentication``); 401 ``not_authenticated`` otherwise."""
    from rest_framework.exceptions import AuthenticationFailed

    from accounts.auth import FairwayTokenAuthentication

    words = header.split()
    if len(words) != 2 or words[0].lower() != "token":
        raise _refuse("not_authenticated", "Give an API token: Authorization: Token <token>.", 401)
    try:
        user, _token = FairwayTokenAuthentication().authenticate_credentials(words[1].encode())
    except AuthenticationFailed as exc:
        # the API's code (brk48: an expired token, ``token_expired``, read "authentication_failed"
        # and the CLI said "not logged in" where the API's refusal says to log in again)
        code = exc.get_codes()
        raise _refuse(code if isinstance(code, str) else "authentication_failed", str(exc.detail), 401) from None
    return user


def _tty_size(data: dict[str, Any], name: str, default: int) -> int:
    value = data.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise _refuse("invalid_size", f"{name} is a whole number, 1 to 4096.", 400, name)
    return value


def _first_frame(
    user: Any, data: Any, fields: set[str], example: str, counted: bool = True
) -> tuple[int, int | None, int]:
    """What a websocket's first frame (``/ws/exec/``, ``/ws/port-forward/``) shares, checked: the
    throttle where ``counted`` (429 ``throttled``: it counts in ``FAIRWAY_THROTTLE_EXEC``), a JSON object of
    ``fields`` (and ``rank``) only, ``workload`` (an id), ``attempt`` (a number, or null: the
    latest) and ``rank`` (a gang member's, default 0)."""
    from types import SimpleNamespace

    from rest_framework.exceptions import Throttled

    from config.throttling import ExecRateThrottle

    throttle = ExecRateThrottle()
    if counted and not throttle.allow_request(SimpleNamespace(user=user, META={}), None):
        # the API's 429 of the same throttle (DRF's Throttled): its words and its Retry-After's seconds (ws47)
        throttled = Throttled(throttle.wait())
        raise ServiceError("throttled", None, str(throttled.detail), status=429, retry_after=retry_after_s(throttled))
    if not isinstance(data, dict):
        raise _refuse("invalid", f"The first frame is a JSON object: {example}.", 400)
    unknown = sorted(set(data) - fields - {"rank"})
    if unknown:
        raise _refuse("unknown_field", f"Unknown field(s): {', '.join(unknown)}.", 400, unknown[0])
    pk = data.get("workload")
    if isinstance(pk, bool) or not isinstance(pk, int) or pk < 1:
        raise _refuse("invalid_workload", "The workload is its id (a number).", 400, "workload")
    number = data.get("attempt")
    if number is not None and (isinstance(number, bool) or not isinstance(number, int) or number < 1):
        raise _refuse("invalid_attempt", "The attempt is its number (1, 2, ...).", 400, "attempt")
    return pk, number, _rank(data)


def _session_attempt(user: Any, pk: int, number: int | None, rank: int, port: bool = False) -> tuple[Attempt, Host]:
    """The running attempt of workload ``pk`` its owner ``user`` opens a session in, and its gang
    member ``rank``'s host (:func:`exec_target`, :func:`exec_host`); 404 ``not_found``."""
    workload = Workload.objects.filter(pk=pk).select_related("owner").first()
    if workload is None:
        raise _refuse("not_found", f"No workload {pk}.", 404)
    attempt = exec_target(user, workload, number, rank, port)
    return attempt, exec_host(attempt, rank)


def tty_target(user: Any, data: Any) -> TtyTarget:
    """The first frame of ``/ws/exec/`` (``{"workload", "attempt", "rank", "command", "tty": true,
    "rows", "cols"}``; ``"tty": false``: stdin piped, no terminal) checked for ``user`` as ``POST
    workloads/{id}/exec/`` is (its codes: ``forbidden``,
    ``not_running``, ``host_offline``, ``invalid_command``, ``invalid_attempt``, ``invalid_rank``;
    404 ``not_found``; 429 ``throttled``: the session counts in ``FAIRWAY_THROTTLE_EXEC``)."""
    from agent.protocol import ExecTty

    fields = {"workload", "attempt", "command", "tty", "rows", "cols"}
    pk, number, rank = _first_frame(user, data, fields, '{"workload": ID, "command": [...]}')
    tty = data.get("tty", True)
    if not isinstance(tty, bool):  # pf63: false pipes stdin to the command without a terminal
        raise _refuse("invalid_tty", "tty is true (a terminal) or false (stdin piped, no terminal).", 400, "tty")
    command = data.get("command")
    if (problem := command_problem(command)) is not None:
        raise _refuse("invalid_command", problem, 400, "command")
    rows = _tty_size(data, "rows", TTY_DEFAULT_SIZE[0])
    cols = _tty_size(data, "cols", TTY_DEFAULT_SIZE[1])
    try:
        encode(ExecTty(attempt_id=1, command=list(command), rows=rows, cols=cols, idle_s=1))
    except ProtocolError:
        raise _refuse("invalid_command", COMMAND_TOO_LONG, 400, "command") from None
    attempt, host = _session_attempt(user, pk, number, rank)
    return TtyTarget(attempt.wire_id, attempt.number, host.pk, host.name, list(command), rows, cols, pk, tty)


# --- forwarded connections (``fairway port-forward``, ``/ws/port-forward/``) ----------------------


@dataclass(frozen=True, slots=True)
class PortTarget:
    """Where a forwarded connection goes: the attempt (its wire id and number), its gang member's
    host (primary key and name), the workload's id and the TCP port inside it."""

    wire_id: int
    number: int
    host_id: int
    host_name: str
    workload_id: int
    port: int


def port_target(user: Any, data: Any, counted: bool = False) -> PortTarget:
    """The first frame of ``/ws/port-forward/`` (``{"workload", "attempt", "rank", "port"}``)
    checked for ``user`` as an interactive session's is (:func:`tty_target`'s codes; ``rank``: a
    port of that gang member's part); ``invalid_port`` outside 1..65535. ``counted``: the check a
    ``fairway port-forward`` sends once before it listens, the forward's one count in
    ``FAIRWAY_THROTTLE_EXEC``; its connections are not counted there (pf63: a browser's page opens
    several and keeps opening them), only at once in ``FAIRWAY_EXEC_MAX_SESSIONS`` and the agent's
    slots, nor is its later check of why it ended (cli46; decision: docs/jobs.md)."""
    example = '{"workload": ID, "port": 6006}'
    pk, number, rank = _first_frame(user, data, {"workload", "attempt", "port"}, example, counted=counted)
    port = data.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise _refuse("invalid_port", "The port is a whole number, 1 to 65535.", 400, "port")
    attempt, host = _session_attempt(user, pk, number, rank, port=True)
    return PortTarget(attempt.wire_id, attempt.number, host.pk, host.name, pk, port)


def port_refused_words(port: int, workload: int, why: str) -> str:
    """A forwarded connection nothing took (the agent's ``exec_port_refused``)."""
    return (
        f"Nothing listens on port {port} in workload {workload} ({why}): start the server there first "
        "(listening on 127.0.0.1 or 0.0.0.0), or check its port."
    )
