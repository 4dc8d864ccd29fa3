"""State changes of the scheduler app, as named service functions (STYLE.md).

Each function validates first, changes rows in one transaction, records an event,
and asks for a tick and/or an agent push *after commit* (``scheduler.notify``).
Views, admin actions, management commands and consumers call these; they do not
save important rows themselves.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone

from accounts.models import Membership, User
from accounts.services import archived_budget_paths, is_manager, is_member, submit_budget_paths
from agent.protocol import HOST_NAME_RE, HOST_NAME_RULE, MAX_HOST_GPUS, MAX_MESSAGE_BYTES, MIN_MEMORY_BYTES
from budgets.models import Budget
from budgets.rules import SCHEDULE_AHEAD_MAX, archived_growth_problem, submission_problem
from budgets.rules import submitted_limit as budget_submitted_limit
from budgets.services import (
    ancestor_ids,
    archived_children_work,
    budget_hint,
    is_leaf,
    load_tree,
    resolve_budget,
    share_lock_budget,
)
from config.errors import FORBIDDEN, FieldProblem, ServiceError
from fairway_cli.numbers import duration_text, instant_text, parse_duration_s
from fairway_cli.words import LIMIT_PASSED, resubmitted_from_text
from scheduler import hardware_memo, histograms, jobspec
from scheduler.gpu_text import gpu_text_problem, invisible_problem, labels_problem, storable_text
from scheduler.models import (
    GPU,
    Attempt,
    AttemptGPU,
    Cluster,
    Host,
    HostEvent,
    JoinToken,
    Workload,
    WorkloadDependency,
    WorkloadEvent,
)
from scheduler.notify import push_hosts_on_commit, request_estimates_on_commit, request_tick_on_commit
from scheduler.policy.admission import SHARED_MEMORY_PROBLEM, HostTable, host_table, infeasible_in
from scheduler.policy.queues import submission_verdict
from scheduler.policy.types import Hold, OnCap, PendingReason
from scheduler.stop_rules import cancel_replaces

logger = logging.getLogger(__name__)

# --- errors ----------------------------------------------------------------------------


NOT_A_MEMBER = "You are not a member of budget {path} or of a budget above it."


class SubmissionError(ServiceError):
    """A refused submission. Codes: ``unknown_budget``, ``not_a_member``, ``not_a_leaf``,
    ``budget_archived``, ``unknown_cluster``, ``unknown_model``, ``too_many_gpus``,
    ``invalid_gpu_count``, ``invalid_min_runtime``, ``min_runtime_too_long``,
    ``invalid_command``, ``invalid_env``, ``invalid_name``, ``invalid_image``,
    ``image_unsupported`` (an image, and no host of the cluster that could take the workload can
    run one: their ``runtime`` label is ``process``), ``invalid_duration_hint``; jobs
    (docs/jobs.md): ``invalid_mount``, ``invalid_max_runtime``, ``max_runtime_too_long``,
    ``max_runtime_below_min_runtime``, ``invalid_retries``, ``invalid_array``, ``invalid_after``,
    ``dependency_failed``; ``budget_moved`` (the budget's place in the tree kept changing while
    the submission locked it: submit again, :data:`MOVE_RETRIES`); ``too_many_submitted`` (429:
    the owner holds the most pending + running workloads one user may, :func:`submitted_count`)."""


def not_a_member_problem(path: str, choices: Sequence[str], owner: str | None = None) -> str:
    """The refusal of a submission to a budget ``path`` the owner is no member of, naming the
    budgets ``choices`` the owner may submit to (try50: ``-b nlp`` by a member of nlp/olmo was told
    only what it may not do). ``owner``: the owner's name where someone else asks (a manager's move
    of a member's workload, brk49: "You are not a member" was said to the manager)."""
    if owner is not None:
        where = f"{owner} may submit to: {', '.join(choices)}." if choices else f"{owner} may submit to no budget."
        return (
            f"{owner} is not a member of budget {path} or of a budget above it (a workload moves only to a "
            f"budget its owner may submit to). {where}"
        )
    where = f"You may submit to: {', '.join(choices)}." if choices else "You may submit to no budget yet."
    return f"{NOT_A_MEMBER.format(path=path)} {where}"


def sole_budget_problem(choices: Sequence[str], archived: Sequence[str] = ()) -> str:
    """The refusal of a submission naming no budget when ``owner`` may submit to several or none;
    ``archived``: the archived leaves the owner was given (try56: "no budget yet" once leadership
    archived the owner's only budget read as if none had ever been given)."""
    if not choices and archived:
        return (
            f"Name a budget: you may submit to no budget (archived: {', '.join(archived)}; "
            "ask leadership for a membership of a live one)."
        )
    if not choices:
        return "Name a budget: you may submit to no budget yet."
    return f"Name a budget: you may submit to several: {', '.join(choices)}."


class CancelError(ServiceError):
    """A refused cancel: ``forbidden`` (403) or ``already_final`` (409)."""


class HoldError(ServiceError):
    """A refused hold or release (docs/jobs.md "Hold and release"): ``forbidden`` (403: not one
    who may cancel it, or an admin's hold released by someone who is not an admin),
    ``not_pending`` (409: it started or ended), ``not_held`` (409: a release of a workload on no
    hold)."""


class HostError(ServiceError):
    """A refused host change: ``invalid_host_name``, ``host_exists``, ``invalid_gpus``,
    ``duplicate_gpu``, ``mixed_models``, ``invalid_labels``, ``invalid_state``, ``host_removed``,
    ``host_busy``, ``inventory_pending``, ``invalid_reason``, ``invalid_at``."""


HOST_REASON_MAX = 500


def host_reason_problem(reason: object) -> str | None:
    """Why ``reason`` is no host-action reason (cordon, drain, drain now, resume, remove), or None:
    one line of at most :data:`HOST_REASON_MAX` characters without control characters (Unicode
    ``Cc``: NUL, newline, carriage return, tab, escape, DEL…; nor the line and paragraph
    separators). It goes whole into the server's log line and into ``state_reason`` on every
    surface: a newline forged a log line of its own (left45; NUL was a 500 on PostgreSQL, brk25).
    Refused at input rather than escaped in the log line: the reason stays as typed everywhere.
    The one rule of the API, the page, the CLI (through the API) and the services."""
    import unicodedata

    if not isinstance(reason, str) or len(reason) > HOST_REASON_MAX:
        return f"A reason is one line of at most {HOST_REASON_MAX} characters, without NUL or other control characters."
    bad = next((c for c in reason if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        return (
            f"A reason is one line of at most {HOST_REASON_MAX} characters, without NUL or other control characters"
            f" (line breaks, tabs, escapes); this one holds U+{ord(bad):04X}."
        )
    return None


def _check_host_reason(reason: object) -> None:
    if problem := host_reason_problem(reason):
        raise HostError("invalid_reason", "reason", problem)


# --- submission --------------------------------------------------------------------------

_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
IMAGE_REFERENCE_RE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[\w][\w.-]{0,127})?(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
"""A container image reference as Docker and Podman parse it (the grammar of
github.com/distribution/reference: ``[registry[:port]/]path[:tag][@digest]``, the path in lower
case, a name of at most 255 characters); anything else failed every start ("invalid reference
format": brk34)."""
IMAGE_PROBLEM = (
    "An image is a container image reference like registry/repository:tag (lower-case repository, no blanks)."
)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
RESERVED_ENV_PREFIX = "FAIRWAY_"
MAX_ENV_VARS = 256
MAX_ENV_VALUE_CHARS = 32 * 1024
MAX_COMMAND_CHARS = 64 * 1024
MAX_COMMAND_ARGS = 4096
MAX_ENV_NAME_CHARS = 1024  # the agent protocol's bound on an environment name
MAX_START_PAYLOAD_BYTES = MAX_MESSAGE_BYTES - 32 * 1024
"""Command and env travel to the agent in one ``start`` frame of at most ``MAX_MESSAGE_BYTES``
(UTF-8); the rest of the frame (GPU UUIDs, rendezvous variables, image) fits in 32 KiB."""
SECRET_MASK = "********"  # noqa: S105 -- the mask shown instead of a secret, not a password
SECRET_PLACEHOLDER = "<secret: give its value>"  # noqa: S105 -- stands for a value never shown back
"""A secret's value in a spec Fairway writes back (``GET workloads/{id}/spec/``, ``fairway show
--spec``): never the value. A submission holding it is refused (``secret_values_required``,
:func:`secret_values_problem`); a resubmission by the workload's owner puts the stored value
in its place server-side (``scheduler.resubmit``), anyone else's must give one."""
SECRET_VALUES_REQUIRED = "secret_values_required"  # noqa: S105 -- an error code


def secret_values_problem(names: Sequence[str]) -> SubmissionError:
    """The refusal of a submission whose secret variables ``names`` carry no value (the
    placeholder of a spec written back, or a secret another user's resubmission cannot copy)."""
    listed = ", ".join(names)
    return SubmissionError(
        SECRET_VALUES_REQUIRED,
        "env",
        f"Give the value of the secret variable{'s' * (len(names) != 1)} {listed}: a secret's value is never "
        "shown back, and only its owner's resubmission reuses it (fairway submit/resubmit -s NAME, "
        "the form's secret env, or the spec's env).",
    )


def normalize_env(env: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Accept ``{"NAME": "value"}`` or ``{"NAME": {"value": "...", "secret": true}}`` (mixed freely)
    and return the storage format ``{"NAME": {"value": str, "secret": bool}}``.

    Numbers are turned into strings. Raises SubmissionError ``invalid_env`` (field ``env``) on
    a bad name (must match ``[A-Za-z_][A-Za-z0-9_]*``), a reserved name (``FAIRWAY_*``,
    ``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``: the agent sets those), a bad value,
    more than 256 variables or a value over 32 KiB.
    """
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise SubmissionError("invalid_env", "env", 'env must be an object like {"NAME": "value"}.')
    if len(env) > MAX_ENV_VARS:
        raise SubmissionError("invalid_env", "env", f"At most {MAX_ENV_VARS} environment variables.")
    out: dict[str, dict[str, Any]] = {}
    unvalued: list[str] = []
    for name, raw in env.items():
        if not isinstance(name, str) or len(name) > MAX_ENV_NAME_CHARS or not ENV_NAME_RE.fullmatch(name):
            raise SubmissionError(
                "invalid_env", "env", f"{shown(name)} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)."
            )
        if name.startswith(RESERVED_ENV_PREFIX) or name in RESERVED_ENV_NAMES:
            raise SubmissionError("invalid_env", "env", f"{name} is set by Fairway and cannot be given.")
        secret = False
        value: Any = raw
        if isinstance(raw, Mapping):
            extra = set(raw) - {"value", "secret"}
            if "value" not in raw or extra:
                raise SubmissionError("invalid_env", "env", f'{name}: use {{"value": "...", "secret": true|false}}.')
            value = raw["value"]
            secret = raw.get("secret", False)
            if not isinstance(secret, bool):
                raise SubmissionError("invalid_env", "env", f"{name}: secret must be true or false.")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise SubmissionError("invalid_env", "env", f"{name}: the value must be a string.")
        if isinstance(value, float):  # 3.10 arrived as 3.1, 1e20 ran as "1e+20": its written form is lost (brk30)
            raise SubmissionError(
                "invalid_env", "env", f"{name}: a decimal number loses its written form (3.10 is 3.1): quote it."
            )
        value = str(value)
        if "\x00" in value or len(value) > MAX_ENV_VALUE_CHARS:
            raise SubmissionError("invalid_env", "env", f"{name}: the value is too long or contains a NUL byte.")
        if value == SECRET_PLACEHOLDER:  # a spec written back, its secret not filled in
            unvalued.append(name)
        out[name] = {"value": value, "secret": secret}
    if unvalued:
        raise secret_values_problem(unvalued)
    return out


MAX_DB_INT = 2**63 - 1
"""The largest id (bigint); integer inputs beyond it are refused before any query."""
MAX_GPU_COUNT = 2**31 - 1
"""``Workload.gpu_count``'s column bound (the cluster's size refuses far fewer)."""
CANCEL_FORBIDDEN = "Only the owner, a budget manager or an admin with the change_workload permission may cancel."
HOLD_FORBIDDEN = (
    "Only the owner, a budget manager or an admin with the change_workload permission may hold or release it."
)
"""The refusal of a cancel by someone else, for one workload or a group alike."""
LOGS_FORBIDDEN = (
    "Only the workload's owner, members of its budget and admins with the view_workload permission may read its logs."
)
"""The refusal of another's logs (``may_read_private``), on the API and the page."""
GPU_COUNT_PROBLEM = "gpu_count is an integer >= 1."
"""The refusal of a GPU count below 1, in the words of every surface (the submit form's too)."""
MAX_SHOWN_CHARS = 80
"""An input quoted back in an error message is cut to this many characters (it may be huge)."""


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, at most ``MAX_SHOWN_CHARS`` characters."""
    if isinstance(value, str | bytes) and len(value) > MAX_SHOWN_CHARS:
        value = value[:MAX_SHOWN_CHARS]  # no repr of a megabyte just to cut it
    elif isinstance(value, int) and value.bit_length() > 256:
        return "a very large integer"  # (repr of a 5,000-digit one even raises)
    elif not isinstance(value, str | bytes | int | float | bool | None):
        return f"a {type(value).__name__}"
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[: MAX_SHOWN_CHARS - 1] + "…"


def json_kind(value: Any) -> str:
    """What kind of (JSON) value ``value`` is, in words, for a message about a value of the wrong
    kind: ``null``, ``true or false``, ``a number``, ``a string``, ``a list``, ``a mapping``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _is_reference(value: Any, model: type) -> bool:
    """Whether ``value`` may name a row of ``model``: a name or path, an id, or the row itself
    (not a list, a mapping, null or true/false, which are refused in words, see :func:`json_kind`)."""
    return not isinstance(value, bool) and isinstance(value, str | int | model)


def _utf8_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def command_problem(command: Any) -> str | None:
    """Why ``command`` is not a command a workload may run (a non-empty argv of strings whose
    program is not blank, at most :data:`MAX_COMMAND_ARGS` arguments and :data:`MAX_COMMAND_CHARS`
    characters, no NUL), in words; None when it is. A submission's rule, and ``exec``'s."""
    if (
        isinstance(command, str | bytes)
        or not isinstance(command, Sequence)
        or not command
        or not all(isinstance(arg, str) for arg in command)
        or not command[0].strip()  # "   " was admitted, and every start failed to exec it
    ):
        problem = "The command is a non-empty list of strings (argv)."
        if isinstance(command, list | tuple) and command:
            # A spec file's [train.py, --steps, 1000]: YAML reads 1000 as a number. Say which one.
            n, arg = next(((n, a) for n, a in enumerate(command, 1) if not isinstance(a, str)), (0, ""))
            if isinstance(arg, bool | int | float):
                word = str(arg).lower() if isinstance(arg, bool) else shown(arg)
                problem = f"{problem[:-1]}: argument {n}, {word}, is not a string; quote it ('{word}')."
        return problem
    if (
        len(command) > MAX_COMMAND_ARGS
        or sum(len(a) for a in command) > MAX_COMMAND_CHARS
        or any("\x00" in a for a in command)
    ):
        return "The command is too long or contains a NUL byte."
    return None


def _start_payload_problem(command: Sequence[str], env: Mapping[str, Mapping[str, Any]]) -> FieldProblem | None:
    """A problem if command and env could not travel to the agent in one ``start`` message.

    Each limit on its own (64 KiB of command, 256 variables of 32 KiB) fits the protocol, but
    together, or in multi-byte characters, they may not: such a workload would be accepted,
    placed, and its start never sent (it would hold GPUs until the start timeout, four times).
    """
    command_bytes = _utf8_len(list(command))
    env_bytes = _utf8_len({name: spec["value"] for name, spec in env.items()})
    if command_bytes + env_bytes <= MAX_START_PAYLOAD_BYTES:
        return None
    field = "env" if env_bytes >= command_bytes else "command"
    return FieldProblem(
        f"invalid_{field}",
        field,
        f"The command and environment take {command_bytes + env_bytes} bytes (UTF-8) together; "
        f"at most {MAX_START_PAYLOAD_BYTES} fit in the message that starts the workload on its host.",
    )


def resolve_cluster(ref: Cluster | int | str | None) -> Cluster | None:
    """A Cluster, its id or its name; None means "the only cluster" when exactly one exists."""
    if isinstance(ref, Cluster):
        return ref
    if ref is None or ref == "":
        clusters = list(Cluster.objects.all()[:2])
        return clusters[0] if len(clusters) == 1 else None
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int):
        if not 0 < ref <= MAX_DB_INT:  # a larger one is no id, and would overflow the query
            return None
        return Cluster.objects.filter(pk=ref).first()
    if isinstance(ref, str):
        if "\x00" in ref:  # PostgreSQL cannot even compare text holding NUL
            return None
        return Cluster.objects.filter(name=ref.strip()).first()
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_FEASIBILITY_FIELD = {
    "unknown_model": "gpu_model",
    "too_many_gpus": "gpu_count",
    "invalid_gpu_count": "gpu_count",
    "too_many_cpus": "cpus",
    "too_much_memory": "memory",
    "invalid_shared_memory": "shared_memory",
    "invalid_request": "cpus",
}


def _hardware(cluster: Cluster, token: Any = None) -> list[tuple[str, int, int | None, int | None, Any]]:
    """``(model, GPUs, cpus, memory_bytes, labels)`` per registered (not removed) host of
    ``cluster`` and GPU model it has, what both submission checks below read: :func:`read_hardware`
    as this process last read it while no hardware changed (``scheduler.hardware_memo``; ``token``:
    its version, already read by the caller). Read-only."""
    from config.memo import READ
    from scheduler.hardware_memo import MEMO

    return MEMO.get(cluster.pk, lambda: read_hardware(cluster), READ if token is None else token)


def read_hardware(cluster: Cluster) -> list[tuple[str, int, int | None, int | None, Any]]:
    """:func:`_hardware` read from the database: one query."""
    return [
        (row["model"], row["n"], row["host__cpus"], row["host__memory_bytes"], row["host__labels"])
        for row in GPU.objects.registered()
        .filter(host__cluster=cluster, host__removed_at__isnull=True)
        .values("host_id", "model", "host__cpus", "host__memory_bytes", "host__labels")
        .annotate(n=Count("id"))
        .order_by()
    ]


_TABLES: dict[int, tuple[list[Any], HostTable]] = {}
"""The policy's :class:`HostTable` of each hardware list this process keeps (``scheduler.hardware_memo``
hands out the same read-only list while no hardware changed), by the list's identity (the list held
too, so that its id is not reused); a few, cleared past that."""


def _host_table(hardware: list[tuple[str, int, int | None, int | None, Any]]) -> HostTable:
    """:func:`scheduler.policy.admission.host_table` of ``hardware`` (:func:`_hardware`), made once
    per kept list: a submission judged its request against every host's row again (~0.02 ms at
    64 hosts, ~0.45 ms at 1,250)."""
    kept = _TABLES.get(id(hardware))
    if kept is not None and kept[0] is hardware:
        return kept[1]
    table = host_table((model, n, cpus, memory) for model, n, cpus, memory, _labels in hardware)
    if len(_TABLES) >= 16:
        _TABLES.clear()
    _TABLES[id(hardware)] = (hardware, table)
    return table


def _check_size(
    cluster: Cluster,
    gpu_model: str,
    gpu_count: int,
    cpus: int | None = None,
    memory: int | None = None,
    hardware: list[tuple[str, int, int | None, int | None, Any]] | None = None,
    shared_memory: int | None = None,
) -> tuple[str, FieldProblem | None]:
    """Reject a request no host of the cluster could ever satisfy (DESIGN.md §3.3), by the
    policy's rule (:func:`scheduler.policy.admission.infeasible_request`) and with its message.

    Counts registered (not removed) hosts whatever their state or GPU health: drains and
    faults pass, hardware does not. Returns the (possibly defaulted) model and a problem.
    ``hardware``: :func:`_hardware` of the cluster, already read.
    """
    hardware = _hardware(cluster) if hardware is None else hardware
    if not gpu_model:
        models = sorted({model for model, *_rest in hardware})
        # in the words of the refusal of a named model (policy.admission.infeasible_request): "Give a
        # GPU model (cluster has: none)." asked for a choice that did not exist (try42)
        if not models:
            message = f"Cluster {cluster.name} has no GPUs yet (it has: {_no_gpus_words(cluster)})."
            return gpu_model, FieldProblem("unknown_model", "gpu_model", message)
        if len(models) > 1:
            message = f"Give a GPU model: cluster {cluster.name} has {', '.join(models)}."
            return gpu_model, FieldProblem("unknown_model", "gpu_model", message)
        gpu_model = models[0]
    bad = infeasible_in(
        _host_table(hardware),
        gpu_model,
        gpu_count,
        cluster=cluster.name,
        cpus=cpus,
        memory=memory,
        shared_memory=shared_memory,
    )
    if bad is None:
        return gpu_model, None
    code, message = bad
    if not hardware and message.endswith("(it has: no registered hosts)."):
        message = message.replace("no registered hosts", _no_gpus_words(cluster))  # the policy knows no hosts
    return gpu_model, FieldProblem(code, _FEASIBILITY_FIELD[code], message)


def _no_gpus_words(cluster: Cluster) -> str:
    """What a cluster with no registered GPU has, in a submission's refusal: no hosts, or hosts whose
    GPUs are not registered (yet: an inventory awaiting approval) (fin43: "no registered hosts" was
    said of both)."""
    hosts = Host.objects.filter(cluster=cluster, removed_at__isnull=True)
    count = hosts.count()
    if not count:
        return "no registered hosts"
    pending = hosts.filter(pending_inventory__isnull=False).exists()
    gpus = "GPUs awaiting inventory approval" if pending else "no registered GPUs"
    return f"{count} registered host{'s' if count != 1 else ''}, {gpus}"


MAX_CPUS = 4096
CPUS_PROBLEM = f"cpus is a whole number of CPUs per host, 1-{MAX_CPUS}."
"""The refusal of a CPU request out of range, in the words of every surface (the submit form's too)."""
MAX_MEMORY_BYTES = 1 << 50  # 1 PiB: above any host
# The least memory a workload may ask, MIN_MEMORY_BYTES (agent.protocol: a host's memory is held
# to it too): below it the attempt's cgroup killed every try before its command ran (a Slurm user's
# ``--mem 32000``, megabytes there, is 32000 bytes here).


def _check_requests(cpus: object, memory: object, shm: object, refuse: Callable[[str, str, str], None]) -> bool:
    """Refuse malformed CPU, memory and shared-memory requests; True when all are well-formed."""
    ok = True
    if cpus is not None and (not _is_int(cpus) or not 1 <= cpus <= MAX_CPUS):  # type: ignore[operator]
        refuse("invalid_cpus", "cpus", CPUS_PROBLEM)
        ok = False
    for value, field, what, least in (
        (memory, "memory", "memory", MIN_MEMORY_BYTES),
        (shm, "shared_memory", "shared memory", 1),
    ):
        if value is not None and (not _is_int(value) or not least <= value <= MAX_MEMORY_BYTES):  # type: ignore[operator]
            span = f"{least >> 20}M to 1P; a number without a unit is bytes" if least > 1 else "1 byte to 1P"
            refuse(f"invalid_{field}", field, f"The {what} request is a size per host such as 32G ({span}).")
            ok = False
    if ok and shm is not None and memory is not None and shm > memory:  # type: ignore[operator]
        refuse("invalid_shared_memory", "shared_memory", f"{SHARED_MEMORY_PROBLEM}.")
        ok = False
    return ok


RUNTIME_LABEL = "runtime"
"""The host label naming the agent's runtime (``fairway-agent join`` sets it: ``docker``, ``process``)."""
IMAGELESS_RUNTIMES = frozenset({"process"})
"""Runtimes that cannot run a container image (the process runtime runs the command on the host)."""


def host_runs_images(labels: Mapping[str, Any] | None) -> bool:
    """False when the host's ``runtime`` label names a runtime without images; True otherwise
    (``docker``, or no label: a host registered before agents reported their runtime)."""
    runtime = (labels or {}).get(RUNTIME_LABEL)
    return not (isinstance(runtime, str) and runtime.strip().lower() in IMAGELESS_RUNTIMES)


def image_problem(
    cluster: Cluster, gpu_model: str, hardware: list[tuple[str, int, int | None, int | None, Any]] | None = None
) -> FieldProblem | None:
    """A problem if no registered host of ``cluster`` with ``gpu_model`` GPUs can run an image
    (``hardware``: :func:`_hardware` of the cluster, already read)."""
    hardware = _hardware(cluster) if hardware is None else hardware
    labels = [labels for model, _n, _cpus, _memory, labels in hardware if model == gpu_model]
    if not labels or any(host_runs_images(one) for one in labels):
        return None
    return FieldProblem(
        "image_unsupported",
        "image",
        f"No {gpu_model} host of cluster {cluster.name} can run a container image (their agents use the "
        "process runtime, which runs the command directly): leave the image empty.",
    )


def _id_and_seq(drawn: int | None = None) -> dict[str, Any]:
    """A new workload's ``seq``, equal to its id (unique and increasing in commit-independent id
    order: the tie-break of DESIGN.md §3.2), set by its INSERT, not by an UPDATE after it.

    PostgreSQL: the id drawn from the id column's sequence first (``nextval``: never given twice,
    in the order drawn, as the INSERT's own default would; ``drawn``: the one the budget's lock
    statement drew, :func:`_share_lock_budget`), then the INSERT with both. SQLite: the
    id ``AUTOINCREMENT`` gives, read inside the same INSERT (``sqlite_sequence``'s value plus one:
    that table holds the largest id ever given, and the INSERT holds the database's write lock).
    Another backend: empty, and the caller sets ``seq`` by an UPDATE after the INSERT.
    ``tests/services/test_submit_workload.py`` checks ``seq == id`` on both, after deletions too."""
    table = Workload._meta.db_table
    if connection.vendor == "postgresql":
        if drawn is None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT nextval(pg_get_serial_sequence(%s, 'id'))", [table])
                (drawn,) = cursor.fetchone()
        return {"id": drawn, "seq": drawn}
    if connection.vendor == "sqlite":
        sql = "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = %s), 0) + 1"
        return {"seq": RawSQL(sql, [table])}  # noqa: S611 -- a constant statement, the name a parameter
    return {}


MOVE_RETRIES = 5
"""How many times a submission reads its budget's chain of ancestors again when a move changed it
between the read and the lock (:func:`_share_lock_budget`); each retry needs another admin's move
committed in between, so the bound is never reached in practice. Then ``budget_moved``."""


def _chain_up(pk: int, parents: Mapping[int, int | None]) -> list[int] | None:
    """``pk`` and its ancestors, from ``pk`` up to the root, by ``parents`` (id → parent id); None
    when the walk leaves ``parents`` (an ancestor not read). A corrupt cycle stops at its repeat,
    as :func:`budgets.services.ancestor_ids` stops."""
    ids: list[int] = []
    node: int | None = pk
    while node is not None and node not in ids:
        if node not in parents:
            return None
        ids.append(node)
        node = parents[node]
    return ids


def _lock_chain(
    pk: int, chain: list[int], user_id: int | None, serialize: bool = False
) -> tuple[dict[int, int | None], bool, int | None, bool]:
    """One statement: the rows of ``chain`` (budget ``pk`` and the ancestors it was read with)
    share-locked in id order, their parent ids as locked (the latest committed: a move committed
    while the lock waited is read), whether ``pk`` is archived, on PostgreSQL the first workload id
    drawn (:func:`_id_and_seq`; None elsewhere), and whether ``user_id`` has a membership of one of
    ``chain`` (under ``FOR KEY SHARE`` of the one found, brk39; True for None). ``serialize``
    (PostgreSQL): also take ``user_id``'s submission lock (:data:`SUBMIT_LOCK_CLASS`), so that
    the count of :func:`submitted_count`, a later statement, sees that user's other submissions
    committed (lim42)."""
    if connection.vendor != "postgresql":  # one writer at a time: plain reads, one query as there
        held = Membership.objects.filter(user_id=user_id, budget_id__in=chain)
        rows = Budget.objects.filter(pk__in=chain).values_list("id", "parent_id", "archived_at", Exists(held))
        found = {row[0]: row for row in rows}
        if pk not in found:
            raise Budget.DoesNotExist(f"budget {pk}")
        member = user_id is None or bool(found[pk][3])
        return {i: row[1] for i, row in found.items()}, found[pk][2] is not None, None, member
    quote = connection.ops.quote_name
    table, archived_at = quote(Budget._meta.db_table), quote(Budget._meta.get_field("archived_at").column)
    parent_id, membership = quote(Budget._meta.get_field("parent").column), quote(Membership._meta.db_table)
    query = (
        f"SELECT id, {parent_id}, {archived_at} IS NOT NULL, "  # noqa: S608 -- the models' own names
        "CASE WHEN id = %s THEN nextval(pg_get_serial_sequence(%s, 'id')) END, "
        f"%s OR EXISTS (SELECT 1 FROM {membership} WHERE user_id = %s AND budget_id = ANY(%s) FOR KEY SHARE), "
        "CASE WHEN %s AND id = %s THEN pg_advisory_xact_lock(%s, %s)::text END "
        f"FROM {table} WHERE id = ANY(%s) ORDER BY id FOR SHARE"
    )
    params = [pk, Workload._meta.db_table, user_id is None, user_id or 0, chain]
    params += [serialize and user_id is not None, pk, SUBMIT_LOCK_CLASS, user_id or 0, chain]
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        rows = cursor.fetchall()
    found = {row[0]: row for row in rows}
    if pk not in found:
        raise Budget.DoesNotExist(f"budget {pk}")
    _id, _parent, archived, drawn, member, _locked = found[pk]
    return {i: row[1] for i, row in found.items()}, archived, drawn, member


def _share_lock_budget(
    pk: int, member: tuple[int, list[int]] | None = None, *, serialize: bool = False
) -> tuple[bool, int | None, bool]:
    """A submission's lock on its budget (the share lock of ``budgets.services.share_lock_budget``,
    docs/locking.md): whether the budget is archived, read under the lock, and, on PostgreSQL, the
    first workload id drawn in the same statement (:func:`_id_and_seq`: one round trip, not two);
    None elsewhere. Only the values the submission reads, from a cursor: no Budget built by a
    raw queryset (half of the statement's CPU).

    ``member``: (user id, the budget's and its ancestors' ids as the request's tree had them):
    whether that user still has a membership of one of them, read in the same statement under
    ``FOR KEY SHARE`` of the one it finds (brk39: a removal committed since the submission's first
    check refuses it, a later one waits for its commit). The statement share-locks the whole chain
    of ancestors, not the budget alone (left40): a move of the budget or of an ancestor (the
    admin's ``UPDATE`` of its parent, which conflicts with the share lock) committed before the
    lock changes a locked row's parent, and the chain is then read again from the database and
    locked again; a later move waits for the submission's commit. So the membership is judged by
    the tree as it is when the workload lands, not as the request read it (a member of the old
    parent submitted into a budget moved away from it). None: not asked (a superuser): the budget's
    row alone, True. ``serialize``: take the user's submission lock too (:func:`_lock_chain`).
    Raises ``SubmissionError("budget_moved")`` after :data:`MOVE_RETRIES` chains
    each moved before their lock."""
    if member is None:
        _parents, archived, drawn, _member = _lock_chain(pk, [pk], None)
        return archived, drawn, True
    user_id, chain = member
    for _ in range(MOVE_RETRIES):
        parents, archived, drawn, still_member = _lock_chain(pk, chain, user_id, serialize)
        if _chain_up(pk, parents) == chain:  # every locked row still points where the chain was read
            return archived, drawn, still_member
        # Moved since the tree was read: the chain as committed now (a plain read: rare).
        chain = _chain_up(pk, dict(Budget.objects.values_list("id", "parent_id"))) or [pk]
    raise SubmissionError(
        "budget_moved",
        "budget",
        f"Budget {Budget.objects.get(pk=pk).path} was moved in the budget tree while this was submitted; submit again.",
    )


SUBMIT_LOCK_CLASS = 0x4657_5355
"""First key of the advisory lock a user's submissions take one at a time while a submission
limit is set ("FWSU"; the tick's is "FWAY", a budget move's "FWBB"); the second is the user id."""

SUBMIT_LIMIT_CODE = "too_many_submitted"
"""The code of a submission refused by ``FAIRWAY_MAX_SUBMITTED_PER_USER`` or its budget's own limit (HTTP 429)."""

LIVE_STATES = tuple(state for state in Workload.State if state not in Workload.FINAL_STATES)
"""The states a workload counts in its owner's limit: pending and running (starting, preempting)."""


def submitted_count_oracle(user_id: int, cap: int) -> int:
    """:func:`submitted_count` as a queryset (the readable rule; the tests' oracle)."""
    return Workload.objects.filter(owner_id=user_id, state__in=LIVE_STATES).order_by().values("pk")[:cap].count()


def submitted_count(user_id: int, cap: int) -> int:
    """How many workloads of ``user_id`` are pending or running (:data:`LIVE_STATES`), counted up to
    ``cap``: one statement reading at most ``cap`` entries of the index ``workload_owner_state``
    (``SELECT COUNT(*) FROM (... LIMIT cap)``), so a user holding a million costs what one
    holding ``cap`` does. A constant statement from a cursor: the queryset's compilation was half
    of the check's CPU (:func:`submitted_count_oracle`, which ``tests/services/test_submit_limit.py``
    compares it with, and with a count in Python)."""
    with connection.cursor() as cursor:
        cursor.execute(_SUBMITTED_COUNT_SQL, [user_id, *LIVE_STATES, cap])
        (count,) = cursor.fetchone()
    return int(count)


_SUBMITTED_COUNT_SQL = (
    f"SELECT COUNT(*) FROM (SELECT 1 FROM {Workload._meta.db_table} "  # noqa: S608 -- the model's own names
    f"WHERE owner_id = %s AND state IN ({', '.join(['%s'] * len(LIVE_STATES))}) LIMIT %s) AS live"
)


SUBMIT_LIMIT_SETTING = "FAIRWAY_MAX_SUBMITTED_PER_USER, as Slurm's MaxSubmitJobs"
"""Where the limit of a refusal comes from when no budget sets its own (:func:`_check_submitted_limit`)."""


def _check_submitted_limit(
    owner: User, adding: int, limit: int, source: str = SUBMIT_LIMIT_SETTING, asker: User | None = None
) -> None:
    """Refuse (``too_many_submitted``, 429) a submission of ``adding`` workloads that would give
    ``owner`` more than ``limit`` pending + running ones (Slurm's MaxSubmitJobs; its reason
    QOSMaxSubmitJobPerUserLimit). ``source`` names where ``limit`` comes from: the setting, or the
    budget's own limit (thr47). ``adding`` 0: a pending workload's move into the budget, judged as a
    submission there with the moved one among those held (brk48). Run under the user's submission
    lock (:func:`_lock_chain`). ``asker``: who moves it, when not its owner (a manager: the refusal
    names the owner, brk49)."""
    held = submitted_count(owner.pk, limit + 1)
    if held + adding <= limit:
        return
    held_text = f"more than {limit:,} workloads" if held > limit else f"{held:,} workload{'s' * (held != 1)}"
    if adding == 0:
        who = "You have" if asker is None or asker.pk == owner.pk else f"{owner.username} has"
        raise SubmissionError(
            SUBMIT_LIMIT_CODE,
            "budget",
            f"{who} {held_text} pending or running, this one included; one user may have at most {limit:,} "
            f"({source}), so it cannot move there. Cancel some, or move it when some have ended.",
            status=429,
        )
    what = "this workload" if adding == 1 else f"this array of {adding:,}"
    raise SubmissionError(
        SUBMIT_LIMIT_CODE,
        None,
        f"You have {held_text} pending or running; one user may have at most {limit:,} "
        f"({source}), and {what} would go past it. "
        "Cancel some, or submit again when some have ended.",
        status=429,
    )


def _submitted_limit_of(owner: User, budget: Budget, given: int | None = None) -> tuple[int, str]:
    """The most pending + running workloads ``owner`` may hold when submitting to ``budget`` (the
    tree's row) and where that number comes from (a refusal's words): ``given`` (a trace replay's
    own), else the budget's own limit, else the setting (``budgets.rules.submitted_limit``); 0, none
    (superusers have none). One reading for a submission and a move (brk48)."""
    if owner.is_superuser:
        return 0, SUBMIT_LIMIT_SETTING
    if given is not None:
        return given, SUBMIT_LIMIT_SETTING
    own = budget.max_submitted_per_user  # the tree's copy: a save of the budget forgets it
    limit = budget_submitted_limit(own, settings.FAIRWAY["MAX_SUBMITTED_PER_USER"])
    return limit, (f"budget {budget.path}'s submission limit per user" if own is not None else SUBMIT_LIMIT_SETTING)


def _budget_said_at_submission(budget: Budget, tree: dict[int, Budget], *, allocated: bool) -> dict[str, Any]:
    """The pending reason a workload submitted into (or moved into, brk48b) ``budget`` is given at
    once, as a hold of its own is: the policy's :func:`submission_verdict` of the budget's chain
    (held, a cap that holds, a cap of 0 that runs it unfunded: tryout47b, rules48); {} where the
    tick decides."""
    chain = (tree[pk] for pk in ancestor_ids(budget, tree) if pk in tree)
    verdict = submission_verdict(
        ((b.path, b.hold, b.cap_gpu_hours, OnCap(b.on_cap)) for b in chain), allocated=allocated
    )
    said = verdict.pending() if verdict is not None else None
    return {"pending_reason": said[0], "pending_detail": said[1]} if said is not None else {}


def _is_image_reference(image: str) -> bool:
    """Whether ``image`` is a container image reference an engine takes (:data:`IMAGE_REFERENCE_RE`)."""
    m = IMAGE_REFERENCE_RE.fullmatch(image)
    return m is not None and len(m.group("name")) <= 255


@histograms.timed(histograms.SUBMISSION_DURATION, lambda w: (str(w.cluster_id),) if w.pk is not None else None)
def do_submit_workload(
    owner: User,
    *,
    name: str,
    budget: Budget | int | str | None,
    cluster: Cluster | int | str | None,
    gpu_model: str,
    gpu_count: int,
    image: str,
    command: Sequence[str],
    env: Mapping[str, Any] | None,
    min_runtime_s: int,
    submitted_at: datetime | None = None,
    duration_hint_s: int | None = None,
    dry_run: bool = False,
    tree: dict[int, Budget] | None = None,
    cpus: int | None = None,
    memory_bytes: int | None = None,
    shared_memory_bytes: int | None = None,
    mounts: Sequence[str] = (),
    max_runtime_s: int | None = None,
    retries: int = 0,
    after: Sequence[str | int] = (),
    array: str | None = None,
    memberships: dict[int, str] | None = None,
    hardware_token: Any = None,
    submitted_limit: int | None = None,
    resubmitted_from: Workload | None = None,
    hold: bool = False,
    archived_ok: bool = False,
) -> Workload:
    """Submit a workload; returns it pending, with ``seq`` equal to its id.

        ``archived_ok`` (with ``dry_run``): the request already lives in ``budget``
        (:func:`do_update_workload` checking a change that stays in it): the budget's archive, which
        refuses new work only, is not judged here; the update refuses growth itself
        (:func:`archived_growth`).

        ``hold``: submit it on a user hold (``sbatch -H``; docs/jobs.md "Hold and release"): it
        waits, reason ``held``, until released; an array's every member is held.

        ``dry_run``: validate exactly as a submission does and return the workload unsaved (no
        ``pk``, no event, no tick): what a quote (``scheduler.estimates.do_quote``) prices; its
        ``job_options`` (``jobspec.JobOptions``) carry the ``after`` list and the array.

        ``budget``: a Budget, id or path (``nlp/olmo``) — a live leaf that ``owner`` is a member
        of (or of an ancestor; superusers may use any); None or "": the only one ``owner`` may submit
        to (``accounts.services.submit_budget_paths``), refused with the choices when there are
        several. ``cluster``: a Cluster, id or name (None:
        the only cluster). ``min_runtime_s``: 0..``FAIRWAY["MAX_MINIMUM_RUNTIME_S"]`` seconds, 0 =
        unallocated. ``command``: non-empty argv list. ``env``: see ``normalize_env``.
        ``cpus``, ``memory_bytes``: requests per host (None: the host's per-GPU share, DESIGN.md
        §3.3), refused when no host could ever offer them; ``shared_memory_bytes``: the size of
        ``/dev/shm`` (None: the runtime's default), at most the memory request (left out: at most the
        least per-GPU share of a host that could hold the work, ``admission.infeasible_resources``).
        ``submitted_at``: server time unless given (trace replay). ``tree``: the budget tree the caller
        already loaded this request (``load_tree()``), to spare a query; ``memberships`` likewise
    (``accounts.services.user_memberships(owner)``), ``hardware_token`` the version of the kept
    hardware it read (``scheduler.hardware_memo.MEMO.token(request)``). Every bad field is reported at
        once: raises SubmissionError (see its codes) and creates nothing. Records a ``submitted``
        event and requests a tick of the cluster after commit.

        Jobs (docs/jobs.md): ``mounts`` names mounts of the cluster's catalog; ``max_runtime_s`` is
        the wall-time limit per attempt (M..``MAX_RUNTIME_LIMIT_S``); ``retries`` re-runs after a
        non-zero exit (0..``MAX_RETRIES``); ``after`` lists ``ID[:ok|any]`` the workload waits for;
        ``array`` (``0-99%10``) creates one workload per index in one ArrayGroup and returns the
        first (the others are ``workload.group.members``; ``workload.submitted_members`` lists
        every workload created, the first included, in index order); a ``dry_run`` returns one unsaved workload
        without group or dependencies.

        ``submitted_limit``: the most pending + running workloads ``owner`` may then hold (None:
        the budget's own, ``Budget.max_submitted_per_user``, else ``FAIRWAY_MAX_SUBMITTED_PER_USER``:
        ``budgets.rules.submitted_limit``; 0: no limit; superusers have none): a trace replay, which
        submits a whole lab's jobs as one user, chooses its own (``replay_trace --submit-limit``).

        ``resubmitted_from``: the workload this submission copies (``scheduler.resubmit``): kept on
        the new workload(s), and their ``submitted`` event says "resubmitted from #N"
        (``fairway_cli.words.resubmitted_from_text``).
    """
    problems: list[FieldProblem] = []

    def refuse(code: str, field: str, message: str) -> None:
        problems.append(FieldProblem(code, field, message))

    # A spec file's ``name: 123`` is a number: say so (the length rule read as if the name were too long)
    if not isinstance(name, str):
        refuse("invalid_name", "name", f"A name is a string (quote it), not {json_kind(name)}.")
    elif not name.strip() or len(name.strip()) > 200 or "\x00" in name:
        refuse("invalid_name", "name", "A name is 1-200 characters, without NUL.")
    elif problem := invisible_problem(name.strip()):  # "job\u202egnp.exe" showed as "jobexe.png" on the page
        refuse("invalid_name", "name", f"The name {problem}.")
    if not isinstance(image, str):
        refuse("invalid_image", "image", f"An image reference is a string (quote it), not {json_kind(image)}.")
    elif len(image) > 500 or "\x00" in image:
        refuse("invalid_image", "image", "An image reference is at most 500 characters, without NUL.")
    elif image and not _is_image_reference(image):
        refuse("invalid_image", "image", f"{IMAGE_PROBLEM} Not {shown(image)}.")

    tree = load_tree() if tree is None else tree
    if budget is None or budget == "":
        # None named: the one live leaf the owner may submit to, for the API, the page and the CLI
        # alike (the CLI alone picked it, the API said "This field is required.": num42)
        choices = submit_budget_paths(owner, tree, memberships)
        if len(choices) == 1:
            budget = choices[0]
        else:
            archived = [] if choices else archived_budget_paths(owner, tree, memberships)
            refuse("unknown_budget", "budget", sole_budget_problem(choices, archived))
    huge = _is_int(budget) and not 0 < budget <= MAX_DB_INT  # type: ignore[operator]
    the_budget = None if huge else resolve_budget(budget, tree)
    if the_budget is not None:
        the_budget = tree.get(the_budget.id, the_budget)  # a Budget passed in: use the tree's copy
    if budget is None or budget == "":
        pass  # refused above
    elif the_budget is None and not _is_reference(budget, Budget):
        refuse("unknown_budget", "budget", f"budget must be a budget path or id, not {json_kind(budget)}.")
    elif the_budget is None:
        refuse("unknown_budget", "budget", f"No budget {shown(budget)}.{budget_hint(budget, tree)}")
    elif not (owner.is_superuser or is_member(owner, the_budget, tree, memberships)):
        choices = submit_budget_paths(owner, tree, memberships)
        refuse("not_a_member", "budget", not_a_member_problem(the_budget.path, choices))
    elif placed := submission_problem(
        the_budget.path,
        has_children=not is_leaf(the_budget, tree),
        archived=the_budget.archived and not (archived_ok and dry_run),
        archived_children_work=archived_children_work(the_budget, tree),
    ):
        refuse(*placed)

    # The cluster and its hardware as this process keeps them (scheduler.hardware_memo): one cache
    # read of their version, no query while no cluster, host or GPU changed.
    hardware_token = hardware_memo.MEMO.token() if hardware_token is None else hardware_token
    the_cluster = hardware_memo.shared_cluster(cluster, hardware_token)
    if the_cluster is None and cluster and not _is_reference(cluster, Cluster):
        refuse("unknown_cluster", "cluster", f"cluster must be a cluster name or id, not {json_kind(cluster)}.")
    elif the_cluster is None:
        refuse("unknown_cluster", "cluster", f"No cluster {shown(cluster)}." if cluster else "Name a cluster.")
    hardware = _hardware(the_cluster, hardware_token) if the_cluster is not None else []  # for both checks

    if not _is_int(gpu_count) or gpu_count < 1:
        refuse("invalid_gpu_count", "gpu_count", GPU_COUNT_PROBLEM)
        gpu_count = 0  # not quoted by the size check below
    elif gpu_count > MAX_GPU_COUNT:  # was answered "an integer >= 1" (try32)
        refuse("too_many_gpus", "gpu_count", f"{shown(gpu_count)} GPUs is more than any cluster has.")
        gpu_count = 0
    # CPU, memory and shared-memory requests (DESIGN.md §3.3; docs/resources.md)
    requests_ok = _check_requests(cpus, memory_bytes, shared_memory_bytes, refuse)
    if not isinstance(gpu_model, str):
        refuse("unknown_model", "gpu_model", "gpu_model is a GPU model name such as A100.")
    elif gpu_model and (model_problem := gpu_text_problem(gpu_model)):  # "": the cluster's one model
        # The rule of a join's GPU models (ops35): "A100\u200b" or " A100" is not the model A100.
        refuse("unknown_model", "gpu_model", f"gpu_model {model_problem}.")
    else:
        if the_cluster is not None and _is_int(gpu_count) and gpu_count >= 1:
            gpu_model, problem = _check_size(
                the_cluster,
                gpu_model,
                gpu_count,
                cpus if requests_ok else None,
                memory_bytes if requests_ok else None,
                hardware,
                shared_memory_bytes if requests_ok else None,  # left-out memory: at most the share (brk46)
            )
            if problem is not None:
                problems.append(problem)

    if (
        isinstance(image, str)
        and image.strip()
        and the_cluster is not None
        and isinstance(gpu_model, str)
        and gpu_model
        and not any(p.field in ("image", "gpu_model") for p in problems)
    ):
        problem = image_problem(the_cluster, gpu_model, hardware)
        if problem is not None:
            problems.append(problem)

    max_m = settings.FAIRWAY["MAX_MINIMUM_RUNTIME_S"]
    if not _is_int(min_runtime_s) or min_runtime_s < 0:
        refuse("invalid_min_runtime", "min_runtime", "The minimum runtime is a whole number of seconds >= 0.")
    elif min_runtime_s > max_m:
        refuse(
            "min_runtime_too_long",
            "min_runtime",
            f"The minimum runtime is at most {duration_text(max_m)}: "
            "a longer one would make the work unpreemptible for too long.",
        )

    if (problem := command_problem(command)) is not None:
        refuse("invalid_command", "command", problem)

    stored_env: dict[str, dict[str, Any]] = {}
    env_ok = True
    try:
        stored_env = normalize_env(env)
    except SubmissionError as exc:
        problems.extend(exc.problems)
        env_ok = False
    if env_ok and not any(p.field == "command" for p in problems):
        problem = _start_payload_problem(command, stored_env)
        if problem is not None:
            problems.append(problem)

    if duration_hint_s is not None and (not _is_int(duration_hint_s) or not 0 <= duration_hint_s <= MAX_GPU_COUNT):
        refuse("invalid_duration_hint", "duration_hint", "duration_hint_s is a whole number of seconds >= 0.")
    if submitted_at is not None and timezone.is_naive(submitted_at):
        raise ValueError("submitted_at must be timezone-aware (UTC)")

    jobs = jobspec.check(
        owner,
        cluster=the_cluster,
        budget=the_budget if not any(p.field == "budget" for p in problems) else None,
        min_runtime_s=min_runtime_s if _is_int(min_runtime_s) else 0,
        mounts=mounts,
        max_runtime_s=max_runtime_s,
        retries=retries,
        after=after,
        array=array,
    )
    problems.extend(jobs.problems)
    if not any(p.field == "name" for p in problems) and jobs.indices[-1] is not None:
        # a member is named NAME[i]: the longest index must fit too (brk50: a 500 on PostgreSQL's varchar)
        suffix = f"[{jobs.indices[-1]}]"
        if len(name.strip()) + len(suffix) > 200:
            refuse(
                "invalid_name",
                "name",
                f"A name is 1-200 characters with the array's index: {len(name.strip())} and {suffix} make "
                f"{len(name.strip()) + len(suffix)} (at most {200 - len(suffix)} before {suffix}).",
            )
    if not isinstance(hold, bool):
        refuse("invalid_hold", "hold", "hold is true or false.")

    if problems:
        raise SubmissionError.from_problems(problems)
    assert the_budget is not None and the_cluster is not None  # noqa: S101 -- narrowed by the checks above

    fields = {
        "name": name.strip(),
        "owner": owner,
        "cluster": the_cluster,
        "gpu_model": gpu_model,
        "gpu_count": gpu_count,
        "image": image,
        "command": list(command),
        "env": stored_env,
        "min_runtime_s": min_runtime_s,
        "duration_hint_s": duration_hint_s,
        "cpus": cpus,
        "memory_bytes": memory_bytes,
        "shared_memory_bytes": shared_memory_bytes,
        "state": Workload.State.PENDING,
        "mounts": jobs.mounts,
        "max_runtime_s": jobs.max_runtime_s,
        "retries": jobs.retries,
        "resubmitted_from": resubmitted_from,
    }
    if hold:
        fields |= {
            "hold": Hold.USER,
            "held_by": owner,
            "pending_reason": PendingReason.HELD,
            "pending_detail": {"hold": Hold.USER},
        }
    elif not dry_run and not jobs.after:  # an `after` wait is the reason first (the policy's order)
        fields |= _budget_said_at_submission(the_budget, tree, allocated=min_runtime_s > 0)
    if dry_run:
        unsaved = Workload(budget=the_budget, submitted_at=submitted_at or timezone.now(), **fields)
        unsaved.job_options = jobs  # type: ignore[attr-defined] -- its after list and array, for a quote
        return unsaved
    with transaction.atomic():
        # Share-lock the budget so an archive running now either precedes (we refuse) or follows us,
        # while other submissions into it go on (docs/locking.md, "Budgets").
        member = None if owner.is_superuser else (owner.pk, ancestor_ids(the_budget, tree))
        limit, source = _submitted_limit_of(owner, the_budget, submitted_limit)
        archived, drawn, still_member = _share_lock_budget(the_budget.pk, member, serialize=bool(limit))
        if placed := submission_problem(the_budget.path, has_children=False, archived=archived):
            raise SubmissionError(*placed)  # budget_archived: archived since the tree was read
        if not still_member:  # removed since the check above (brk39), or the budget moved (left40)
            path = Budget.objects.get(pk=the_budget.pk).path  # where it is now (moved: not the tree's path)
            raise SubmissionError("not_a_member", "budget", NOT_A_MEMBER.format(path=path))
        if limit:  # after the lock: a statement of its own, so it sees the user's other submissions committed
            _check_submitted_limit(owner, len(jobs.indices), limit, source)
        locked = copy.copy(the_budget)  # the tree's row (shared by the process's requests: not changed)
        now = timezone.now()
        group = jobs.create_group(owner, the_cluster, name.strip())
        first: Workload | None = None
        members: list[Workload] = []
        for index in jobs.indices:
            member_env = dict(stored_env)
            if index is not None:
                member_env["FAIRWAY_ARRAY_INDEX"] = {"value": str(index), "secret": False}
            numbered, drawn = _id_and_seq(drawn), None
            workload = Workload.objects.create(
                **{
                    **fields,
                    "name": name.strip() if index is None else f"{name.strip()}[{index}]",
                    "env": member_env,
                },
                **numbered,
                budget=locked,
                submitted_at=submitted_at or now,
                group=group,
                array_index=index,
                held_at=now if hold else None,
            )
            if not numbered:  # another backend: the id first, then seq
                Workload.objects.filter(pk=workload.pk).update(seq=workload.pk)
            workload.seq = workload.pk
            workload.submitted_event = WorkloadEvent(  # type: ignore[attr-defined] -- written below, with the others
                workload=workload,
                at=now,
                kind="submitted",
                actor=owner,
                message=(f"{resubmitted_from_text(resubmitted_from.pk)}; " if resubmitted_from is not None else "")
                + f"submitted to {the_budget.path} on {the_cluster.name}"
                + jobs.describe(index),
                data={
                    "budget": the_budget.path,
                    "cluster": the_cluster.name,
                    "gpu_model": gpu_model,
                    "gpu_count": gpu_count,
                    "min_runtime_s": min_runtime_s,
                    **{
                        k: v
                        for k, v in (
                            ("cpus", cpus),
                            ("memory_bytes", memory_bytes),
                            ("shared_memory_bytes", shared_memory_bytes),
                        )
                        if v is not None
                    },
                    **jobs.event_data(index),
                    **({"resubmitted_from": resubmitted_from.pk} if resubmitted_from is not None else {}),
                },
            )
            first = first or workload
            members.append(workload)
        # Every member's event and dependencies in one bulk_create each, not a statement per member
        # (brk41: a 1000-member array cost three statements a member).
        events = [w.submitted_event for w in members]  # type: ignore[attr-defined]
        if hold:
            events += [_hold_event(w, owner, now, Hold.USER) for w in members]
        WorkloadEvent.objects.bulk_create(events)
        jobs.create_dependencies(members)
        request_tick_on_commit(the_cluster.id)
    assert first is not None  # noqa: S101 -- jobs.indices is never empty
    first.submitted_members = members  # type: ignore[attr-defined] -- every workload of this submission
    return first


# --- cancel --------------------------------------------------------------------------------


WORKLOAD_CANCEL_PERMISSION = "scheduler.change_workload"
"""What cancelling other people's work needs beside ``is_staff`` (lim42: any staff member, a
view-only one included, cancelled anyone's work; the rule of host actions, brk42)."""

WORKLOAD_READ_PERMISSIONS = ("scheduler.view_workload", "scheduler.change_workload")
"""Either lets a staff member read other people's logs and env values (the admin's rule: change
implies view)."""


def staff_may(actor: User, *perms: str) -> bool:
    """Whether ``actor`` is active staff holding one of ``perms`` (a superuser holds every one).
    Asked last, after the rules that need no query (the permissions are read once a request)."""
    return bool(actor.is_active and actor.is_staff and any(actor.has_perm(p) for p in perms))


def can_cancel(
    actor: User, workload: Workload, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> bool:
    """The owner, managers of the workload's budget or an ancestor, superusers and staff with
    :data:`WORKLOAD_CANCEL_PERMISSION` may cancel it. ``tree``, ``memberships``: already loaded
    this request (no query then)."""
    if not actor.is_authenticated:
        return False
    if actor.is_superuser or workload.owner_id == actor.pk:
        return True
    return is_manager(actor, workload.budget, tree, memberships) or staff_may(actor, WORKLOAD_CANCEL_PERMISSION)


def may_read_private(actor: User, workload: Workload, accessible: set[int] | frozenset[int]) -> bool:
    """Whether ``actor`` may read ``workload``'s logs and env values: its owner (always, as Slurm
    shows users their own jobs: leaving a budget governs new submissions, not the work already
    submitted), members of its budget or an ancestor (``accessible``: ``accounts.services.
    accessible_budget_ids``), superusers and staff with one of :data:`WORKLOAD_READ_PERMISSIONS`
    (README.md, the API's table of who may do what)."""
    if not actor.is_authenticated:
        return False
    if actor.is_superuser or workload.owner_id == actor.pk or workload.budget_id in accessible:
        return True
    return staff_may(actor, *WORKLOAD_READ_PERMISSIONS)


def cancel_refusal(
    actor: User, workload: Workload, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> CancelError | None:
    """Why ``actor`` may not cancel ``workload`` as it reads now, or None: ``forbidden`` (403: not
    one who may, :func:`can_cancel`), ``already_final`` (409). The rule of :func:`do_cancel_workload`
    (on the locked row) and of a bulk action's preview (``scheduler.bulk``)."""
    if not can_cancel(actor, workload, tree, memberships):
        return CancelError(FORBIDDEN, None, CANCEL_FORBIDDEN, status=403)
    if workload.state in Workload.FINAL_STATES:
        error = CancelError("already_final", "state", already_final_words([workload.state]), status=409)
        error.state = workload.state  # type: ignore[attr-defined]  # a bulk action's reason names the states
        return error
    return None


def _states_text(states: Sequence[str]) -> str:
    return states[0] if len(states) == 1 else f"{', '.join(states[:-1])} or {states[-1]}"


def already_final_words(states: Sequence[str], many: bool = False) -> str:
    """``already_final``'s message: of one workload, or (``many``) of a bulk action's skips, the
    states they met named once ("(succeeded or failed)": the sentence was said once per state, left56)."""
    if many:
        return f"These workloads have already ended ({_states_text(states)})."
    return f"The workload has already ended ({_states_text(states)})."


def not_pending_words(states: Sequence[str], many: bool = False) -> str:
    """A hold's or a release's ``not_pending`` message, as :func:`already_final_words`."""
    these = "these are" if many else "this one is"
    return f"Only a pending workload can be held or released; {these} {_states_text(states)}."


STATE_WORDS = {"already_final": already_final_words, "not_pending": not_pending_words}
"""The refusals whose message names the workload's state, by code: a bulk action words each once,
with the states its skips met (``scheduler.bulk.BulkOutcome``)."""


def cancel_changes(workload: Workload, attempt: Attempt | None) -> bool:
    """Whether a cancel of ``workload`` (not final; ``attempt``: its open attempt, None without one)
    changes it: pending or without an attempt it is canceled; else its attempt is asked to stop,
    unless a stop that ends it was issued already (:func:`~scheduler.stop_rules.cancel_replaces`:
    an earlier cancel, its timeout), which it keeps. The rule of :func:`do_cancel_workload` (on the
    locked rows) and of a bulk cancel's preview (``scheduler.bulk``; brk51: it counted such work
    changed and "asked to stop")."""
    if workload.state == Workload.State.PENDING or attempt is None:
        return True
    return cancel_replaces(attempt.stop_reason, retries_left=workload.retries_used < workload.retries)


def do_cancel_workload(actor: User, workload: Workload) -> Workload:
    """Cancel a workload.

    Pending (or with no open attempt): canceled at once, its nominations cleared, a tick
    requested. Starting/running/preempting: the open attempt gets ``stop_requested_at`` and
    ``stop_reason="canceled"`` and its hosts are pushed; the workload keeps its state until
    the agent reports the exit (DESIGN.md §4: a cancel is a stop like any other, charged until
    the release). A cancel overrides a preemption (or drain, GPU fault) stop already under way,
    so the workload ends instead of being requeued; a stop after which the workload ends anyway
    (``timeout``, a gang part's own exit) keeps its reason (:func:`scheduler.stop_rules.cancel_replaces`).
    Cancelling twice is harmless. Raises CancelError
    ``forbidden`` (403) or ``already_final`` (409).
    """
    return cancel_workload(actor, workload)[0]


def cancel_workload(actor: User, workload: Workload) -> tuple[Workload, bool]:
    """:func:`do_cancel_workload`, and whether it changed anything (:func:`cancel_changes` on the
    locked rows: false for one whose stop that ends it was already asked, a cancel by another
    meanwhile; left53: a bulk cancel counted those changed)."""
    with transaction.atomic():
        locked = Workload.objects.select_for_update().select_related("budget").get(pk=workload.pk)
        if (refusal := cancel_refusal(actor, locked)) is not None:
            raise refusal
        now = timezone.now()
        attempt = Attempt.objects.select_for_update().filter(workload=locked, ended_at__isnull=True).first()
        if locked.state == Workload.State.PENDING or attempt is None:
            GPU.objects.filter(nominated_for=locked).update_in_id_order(nominated_for=None)
            locked.state = Workload.State.CANCELED
            locked.finished_at = now
            locked.pending_reason = ""
            locked.pending_detail = {}
            locked.estimated_start, locked.estimate_unfunded = None, False
            locked.save(
                update_fields=[
                    "state",
                    "finished_at",
                    "pending_reason",
                    "pending_detail",
                    "estimated_start",
                    "estimate_unfunded",
                    "updated_at",
                ]
            )
            WorkloadEvent.objects.create(workload=locked, at=now, kind="canceled", actor=actor, message="canceled")
            request_tick_on_commit(locked.cluster_id)
        elif cancel_changes(locked, attempt):
            previous = attempt.stop_reason
            attempt.stop_requested_at = attempt.stop_requested_at or now
            attempt.stop_reason = Attempt.EndReason.CANCELED
            attempt.save(update_fields=["stop_requested_at", "stop_reason"])
            WorkloadEvent.objects.create(
                workload=locked,
                at=now,
                kind="cancel_requested",
                actor=actor,
                message=f"stop requested for attempt {attempt.number}",
                data={"attempt": attempt.pk, "replaces_stop": previous or None},
            )
            host_ids = AttemptGPU.objects.filter(attempt=attempt).values_list("gpu__host_id", flat=True)
            push_hosts_on_commit([attempt.host_id, *host_ids])
        else:
            return locked, False
    return locked, True


def can_cancel_group(actor: User, group: Any, members: list[Workload]) -> bool:
    """Whether ``actor`` may cancel array group ``group``: whether they may cancel one of its
    ``members`` (all of them, final or not: a foreign group is refused whether or not anything is
    left to cancel). One check per (owner, budget) among the members; a group without members
    is its owner's, superusers' and staff's with :data:`WORKLOAD_CANCEL_PERMISSION`."""
    if not members:
        return actor.is_authenticated and (
            actor.is_superuser or group.owner_id == actor.pk or staff_may(actor, WORKLOAD_CANCEL_PERMISSION)
        )
    distinct = {(w.owner_id, w.budget_id): w for w in members}
    return any(can_cancel(actor, w) for w in distinct.values())


def do_cancel_group(actor: User, group: Any) -> list[int]:
    """Cancel every member of an array group that is not final yet (one ``do_cancel_workload``
    each, so each member's cancel is the ordinary one); returns the ids of those canceled or asked
    to stop, in id order (as :func:`do_hold_group`). Raises CancelError ``forbidden`` (403) when
    ``actor`` may cancel none of them."""
    members = list(Workload.objects.filter(group=group).select_related("budget"))
    if not can_cancel_group(actor, group, members):
        raise CancelError(FORBIDDEN, None, CANCEL_FORBIDDEN, status=403)
    live = [w for w in members if w.state not in Workload.FINAL_STATES and can_cancel(actor, w)]
    done = []
    for w in sorted(live, key=lambda w: w.pk):
        try:
            do_cancel_workload(actor, w)
        except CancelError:
            continue  # it became final meanwhile
        done.append(w.pk)
    return done


# --- update of a pending workload ------------------------------------------------------------


class UpdateError(ServiceError):
    """A refused update of a workload (:func:`do_update_workload`): ``forbidden`` (403),
    ``not_pending`` (409: it has started or ended; of a started one only the wall-time limit
    changes), ``raise_needs_admin`` (403: a started workload's limit raised or removed by one who is
    no admin), ``budget_charged`` (409: a budget change of a
    workload that has run), ``not_updatable`` (400: a field that cannot change); the values
    themselves are refused with the submission's codes (:class:`SubmissionError`, 400)."""


UPDATABLE_FIELDS = (
    "name",
    "budget",
    "gpu_model",
    "gpu_count",
    "min_runtime_s",
    "max_runtime_s",
    "retries",
    "cpus",
    "memory_bytes",
    "shared_memory_bytes",
)
"""What :func:`do_update_workload` may change (service names; the API's ``min_runtime``,
``max_runtime``, ``memory``, ``shared_memory``), like Slurm's ``scontrol update`` of a pending job.
The image, command, env, mounts, dependencies, cluster and array stay as submitted (docs/jobs.md)."""

SCHEDULED_FIELDS = frozenset({"budget", "gpu_model", "gpu_count", "min_runtime_s", "cpus", "memory_bytes"})
"""The fields of :data:`UPDATABLE_FIELDS` the scheduler judges a pending workload on (the pending
rows ``snapshot._pending_rows`` reads; ``tests/tick/test_brk46_race.py`` checks they match): a
change of one clears the workload's reason, estimate and nominations, which were decided on the old
request. The others (name, retries, wall-time limit, shared memory) are read when it starts or ends;
a change of them alone keeps them (brk46: a rename of a workload awaiting its preemption gave up its
nominated GPUs, and the next tick stopped a second victim for it)."""

UPDATE_FORBIDDEN = (
    "Only those who may cancel a workload may change it: its owner, a budget manager or an admin with the "
    "change_workload permission."
)
MOVE_FORBIDDEN = (
    "Only its owner, an admin with the change_workload permission or a manager of {path} may move a workload "
    "into {path}: managing the budget it is in does not give a say in that one."
)


def may_move_into(actor: User, workload: Workload, budget: Budget, tree: dict[int, Budget] | None = None) -> bool:
    """Whether ``actor``, who may change ``workload`` (:func:`can_cancel`), may move it into
    ``budget``: its owner (whose membership there the move checks as a submission), superusers,
    staff with :data:`WORKLOAD_CANCEL_PERMISSION`, and managers of ``budget`` or an ancestor (brk50:
    a manager of its budget moved a member's work into another budget of the member's, charging a
    budget they have no say in)."""
    if actor.is_superuser or workload.owner_id == actor.pk:
        return True
    return is_manager(actor, budget, tree) or staff_may(actor, WORKLOAD_CANCEL_PERMISSION)


CHANGED_MEANWHILE = "changed_meanwhile"
CHANGED_SINCE_SHOWN = (
    "This workload was changed since this page was shown (another update): its request as it is now is shown "
    "below; make your change again."
)
UPDATE_RETRIES = 3
"""How many times an update reads the workload again when another update committed between its
read and its lock (each retry needs another update committed in between)."""


UPDATE_LABELS = {
    "name": "name",
    "budget": "budget",
    "gpu_model": "GPU model",
    "gpu_count": "GPUs",
    "min_runtime_s": "minimum runtime",
    "max_runtime_s": "wall-time limit",
    "retries": "retries",
    "cpus": "CPUs",
    "memory_bytes": "memory",
    "shared_memory_bytes": "shared memory",
}
"""The words of each field in an ``updated`` event's message (its data keeps the field names)."""


def _update_words(field: str, value: Any) -> str:
    """A value of an ``updated`` event's message, as people read it."""
    from scheduler.sizes import format_size

    if value is None:
        return "default" if field in ("cpus", "memory_bytes", "shared_memory_bytes") else "none"
    if field in ("min_runtime_s", "max_runtime_s"):
        return duration_text(value) if value else "0"
    if field in ("memory_bytes", "shared_memory_bytes"):
        return format_size(value)
    return str(value)


def _change_text(field: str, old: Any, new: Any) -> str:
    """One change as people read it: ``GPUs 4 → 8`` (an ``updated`` event's message, a refusal)."""
    return f"{UPDATE_LABELS[field]} {_update_words(field, old)} → {_update_words(field, new)}"


ARCHIVED_SHRINKS = (
    "gpu_count",
    "min_runtime_s",
    "max_runtime_s",
    "retries",
    "cpus",
    "memory_bytes",
    "shared_memory_bytes",
)
"""The fields a pending workload of an archived budget may lower (not raise): each asks for GPUs,
GPU-time (M commits ``gpus × M``, the wall-time limit and the retries bound the run) or room on a host."""


def archived_growth(diff: Mapping[str, tuple[Any, Any]]) -> list[str]:
    """The changes of ``diff`` (field → (old, new), :func:`_checked_update`'s) that add demand, in
    words, for a workload staying in an archived budget (docs/jobs.md "Changing a pending
    workload": archiving refuses new work only, DESIGN.md §3.7, so what asks no more may change).

    Adds demand: another GPU model (a request of other hardware), and a raise of a field of
    :data:`ARCHIVED_SHRINKS`. No limit (None) is more than any wall-time limit; the default CPUs,
    memory or shm (None, the host's per-GPU share, the runtime's) compares with no number without
    a host, so a change from or to it counts as growth too. The name never does."""
    grown = []
    for field, (old, new) in diff.items():
        if field == "gpu_model":
            grows = True
        elif field == "max_runtime_s":
            grows = old is not None and (new is None or new > old)
        elif field in ARCHIVED_SHRINKS:
            grows = old is None or new is None or new > old
        else:
            grows = False
        if grows:
            grown.append(_change_text(field, old, new))
    return grown


def do_update_workload(
    actor: User,
    workload: Workload,
    changes: Mapping[str, Any],
    *,
    tree: dict[int, Budget] | None = None,
    seen_version: int | None = None,
    pending_only: bool = False,
) -> Workload:
    """Change a pending workload's request (``changes``: some of :data:`UPDATABLE_FIELDS`, in
    :func:`do_submit_workload`'s terms; ``budget`` a path or id); returns it as written.

    Who: whoever may cancel it (:func:`can_cancel`). When: only while pending (``not_pending``,
    409). The merged request is checked by :func:`do_submit_workload` itself (``dry_run``: every
    rule of a submission — names, sizes, the policy's admission of the size on the cluster's
    hardware, M and the wall-time limit, retries, the owner's membership of a live leaf budget and,
    for a new budget, its mounts), so no rule is stated twice. A new budget is share-locked and the
    owner's membership read again under the lock, as a submission does (docs/locking.md), before
    the workload's row; a workload that has run keeps its budget (``budget_charged``: its attempts
    are charged there). The workload keeps its submission time and sequence (its place in its
    budget's queue, as Slurm keeps a job's age priority), its ``spec_version`` goes up (a tick whose
    snapshot read the old request starts nothing for it: ``tick._apply_starts``), its reason,
    estimate and nominations are cleared when a field the scheduler reads changed
    (:data:`SCHEDULED_FIELDS`; the next tick judges it again; a held one keeps its ``held``
    reason, which no size changes), and an ``updated`` event
    lists each field's old → new value. Nothing changed: no event, no new version.

    ``seen_version``: the ``spec_version`` of the request the caller showed, when it sends every
    field whatever it changed (the web form): another version is refused ``changed_meanwhile``
    (409), so a form shown before another update never writes its old values back over it.

    ``pending_only``: a started workload is refused ``not_pending`` whatever the changes (a group's
    update, whose members that started meanwhile are left as they are: brk51).

    A started workload (:data:`LIMIT_STATES`) may change only its wall-time limit
    (:func:`_update_limit_once`: lowered by whoever may cancel it, raised or removed by an admin;
    docs/jobs.md "The wall-time limit of a running workload"); any other field is ``not_pending``."""
    unknown = sorted(set(changes) - set(UPDATABLE_FIELDS))
    if unknown:
        raise UpdateError.from_problems(
            [
                FieldProblem(
                    "not_updatable",
                    name,
                    f"{name} cannot be changed after submission (only {', '.join(UPDATABLE_FIELDS)}): "
                    "cancel and submit again.",
                )
                for name in unknown
            ]
        )
    for _ in range(UPDATE_RETRIES):
        done = _update_once(
            actor, workload.pk, changes, load_tree() if tree is None else tree, seen_version, pending_only
        )
        if done is not None:
            return done
        tree = None  # another update committed meanwhile: read everything again
    raise UpdateError(
        CHANGED_MEANWHILE, None, "The workload kept changing while this update ran; try again.", status=409
    )


def _checked_update(
    current: Workload, changes: Mapping[str, Any], tree: dict[int, Budget], actor: User | None = None
) -> tuple[Workload, dict[str, tuple[Any, Any]]]:
    """``current``'s request with ``changes`` checked as a submission (:func:`do_submit_workload`'s
    ``dry_run``; a budget move of a workload that has run refused ``budget_charged``): the checked
    workload and what changes (field → (old, new)). Raises as :func:`do_update_workload` refuses;
    writes nothing (a group's update checks every member with it before any changes). ``actor``
    other than the owner: a move to a budget the owner is no member of names the owner (brk49)."""
    if "budget" in changes and changes["budget"] in (None, ""):
        raise SubmissionError("unknown_budget", "budget", "Name the budget to move the workload to.")
    own = tree.get(current.budget_id)
    if isinstance(changes.get("budget"), str) and own is not None and changes["budget"].strip().strip("/") == own.path:
        # its own path names its own budget (brk50: the edit form posts it; with that budget archived and
        # a new one of its path, the live one won and a rename moved the workload there)
        changes = {**changes, "budget": current.budget_id}
    given = {**{f: getattr(current, f) for f in UPDATABLE_FIELDS if f != "budget"}, **changes}
    new_budget = resolve_budget(changes["budget"], tree) if "budget" in changes else None
    moving = new_budget is not None and new_budget.pk != current.budget_id
    if moving and actor is not None and new_budget is not None and not may_move_into(actor, current, new_budget, tree):
        raise UpdateError(FORBIDDEN, "budget", MOVE_FORBIDDEN.format(path=new_budget.path), status=403)
    staying_archived = not moving and own is not None and own.archived  # judged by archived_growth below
    try:
        checked = do_submit_workload(
            current.owner,
            name=given["name"],
            budget=changes.get("budget", current.budget_id),
            cluster=current.cluster,
            gpu_model=given["gpu_model"],
            gpu_count=given["gpu_count"],
            image=current.image,
            command=current.command,
            env={},  # unchanged: its rules passed at submission (and FAIRWAY_ARRAY_INDEX is the server's own)
            min_runtime_s=given["min_runtime_s"],
            duration_hint_s=current.duration_hint_s,
            dry_run=True,
            tree=tree,
            cpus=given["cpus"],
            memory_bytes=given["memory_bytes"],
            shared_memory_bytes=given["shared_memory_bytes"],
            mounts=[m["name"] for m in current.mounts] if moving else (),  # a mount may be a budget's own
            max_runtime_s=given["max_runtime_s"],
            retries=given["retries"],
            archived_ok=staying_archived,
        )
    except SubmissionError as exc:
        if exc.code != "not_a_member" or actor is None or actor.pk == current.owner_id or new_budget is None:
            raise
        choices = submit_budget_paths(current.owner, tree)
        owner = current.owner.username
        raise SubmissionError("not_a_member", "budget", not_a_member_problem(new_budget.path, choices, owner)) from None
    after = {f: getattr(checked, f) for f in UPDATABLE_FIELDS if f != "budget"}
    diff = {f: (getattr(current, f), v) for f, v in after.items() if getattr(current, f) != v}
    if staying_archived and own is not None and (grew := archived_growth_problem(own.path, archived_growth(diff))):
        raise SubmissionError(*grew)
    if checked.budget.pk != current.budget_id:
        _refuse_if_charged(current)
        diff["budget"] = (current.budget.path, checked.budget.path)
    return checked, diff


def _update_once(
    actor: User,
    pk: int,
    changes: Mapping[str, Any],
    tree: dict[int, Budget],
    seen_version: int | None,
    pending_only: bool = False,
) -> Workload | None:
    """One try of :func:`do_update_workload`; None when another update committed between the read
    of the workload and its lock (the next try reads it again, and meets ``seen_version`` again)."""
    current = Workload.objects.select_related("budget", "owner", "cluster").get(pk=pk)
    if not can_cancel(actor, current, tree):
        raise UpdateError(FORBIDDEN, None, UPDATE_FORBIDDEN, status=403)
    if not pending_only and current.state in LIMIT_STATES and set(changes) <= set(RUNNING_UPDATABLE_FIELDS):
        return _update_limit_once(actor, current, changes.get("max_runtime_s", current.max_runtime_s), seen_version)
    _refuse_unless_pending(current)
    if seen_version is not None and seen_version != current.spec_version:
        raise UpdateError(CHANGED_MEANWHILE, None, CHANGED_SINCE_SHOWN, status=409)
    checked, diff = _checked_update(current, changes, tree, actor)
    if not diff:
        return current
    with transaction.atomic():
        if "budget" in diff:  # the submission's lock of its budget, before the workload's row (docs/locking.md)
            owner = current.owner
            member = None if owner.is_superuser else (owner.pk, ancestor_ids(checked.budget, tree))
            # judged as a submission there (brk48: work submitted where no limit holds moved past its limit)
            limit, source = _submitted_limit_of(owner, checked.budget)
            archived, _drawn, still_member = _share_lock_budget(checked.budget.pk, member, serialize=bool(limit))
            if placed := submission_problem(checked.budget.path, has_children=False, archived=archived):
                raise SubmissionError(*placed)
            if not still_member:
                path = checked.budget.path
                words = (
                    NOT_A_MEMBER.format(path=path)
                    if actor.pk == owner.pk
                    else not_a_member_problem(path, submit_budget_paths(owner), owner.username)
                )
                raise SubmissionError("not_a_member", "budget", words)
            if limit:
                _check_submitted_limit(owner, 0, limit, source, asker=actor)
        elif grown := archived_growth(diff):
            # its own budget's archive read again under its share lock, as a move's (brk52: archived
            # after the tree was read, a growth passed as one of a live budget)
            own = share_lock_budget(current.budget_id)
            if own.archived and (grew := archived_growth_problem(own.path, grown)):
                raise SubmissionError(*grew)
        locked = Workload.objects.select_for_update().get(pk=pk)
        _refuse_unless_pending(locked)
        if locked.spec_version != current.spec_version:
            return None
        if "budget" in diff:
            _refuse_if_charged(current)  # read again under the workload's lock
        now = timezone.now()
        fields: dict[str, Any] = {f: new for f, (_old, new) in diff.items() if f != "budget"}
        if "budget" in diff:
            fields["budget_id"] = checked.budget.pk
        scheduled = not SCHEDULED_FIELDS.isdisjoint(diff)
        if scheduled:  # judged on the old request: the next tick judges the new one
            fields.update(estimated_start=None, no_start_found=False, estimate_unfunded=False)
            if not (locked.hold and locked.pending_reason == PendingReason.HELD):
                fields.update(pending_reason="", pending_detail={})  # a held one still says held (try46)
                # a hold of its own and a dependency's wait are reasons before the budget's (the policy's order)
                if not locked.hold and not WorkloadDependency.objects.filter(workload_id=pk).exists():
                    # what a submission of the new request there says at once (brk48b: a move into a
                    # held or 0-cap downgrade budget said just "pending" until a tick)
                    allocated = fields.get("min_runtime_s", locked.min_runtime_s) > 0
                    fields.update(_budget_said_at_submission(checked.budget, tree, allocated=allocated))
        Workload.objects.filter(pk=pk).update(**fields, spec_version=locked.spec_version + 1, updated_at=now)
        if scheduled:
            GPU.objects.filter(nominated_for_id=pk).update_in_id_order(nominated_for=None)  # chosen for the old request
        WorkloadEvent.objects.create(
            workload_id=pk,
            at=now,
            kind="updated",
            actor=actor,
            message="changed " + ", ".join(_change_text(f, old, new) for f, (old, new) in diff.items()),
            data={"changes": {f: [old, new] for f, (old, new) in diff.items()}},
        )
        if scheduled:
            request_tick_on_commit(current.cluster_id)
    return Workload.objects.select_related("budget", "owner", "cluster").get(pk=pk)


# --- the wall-time limit of a running workload (Slurm's scontrol update TimeLimit=) ------------

LIMIT_STATES = (Workload.State.STARTING, Workload.State.RUNNING)
"""The states in which a workload's wall-time limit (and only it) may still change: its attempt
holds GPUs and no stop was issued (a preempting one ends or comes back pending first)."""

RUNNING_UPDATABLE_FIELDS = ("max_runtime_s",)
"""What :func:`do_update_workload` may change of a workload in :data:`LIMIT_STATES`; any other
field is refused ``not_pending`` as before (docs/jobs.md "The wall-time limit of a running workload")."""

RAISE_NEEDS_ADMIN = (
    "Only an admin (staff with the change_workload permission) may raise or remove the wall-time limit of a "
    "workload that has started; you may lower it."
)


LIMIT_STOP_ASKED = (
    "Its attempt was asked to stop (a cancel, or a gang part's exit): its wall-time limit no longer changes."
)


def limit_may_change(workload: Workload, attempt: Attempt | None) -> bool:
    """Whether the wall-time limit of ``workload`` (started; ``attempt``: its open attempt) may
    still change: starting or running and its attempt not asked to stop (brk51: a cancel, or a gang
    part's exit, leaves it running until its GPUs are released, and its limit changed). The rule of
    :func:`_update_limit_once` (on the locked row) and of the workload page's form."""
    return workload.state in LIMIT_STATES and (attempt is None or attempt.stop_requested_at is None)


def may_raise_limit(actor: User) -> bool:
    """Whether ``actor`` may raise (or remove) the wall-time limit of a started workload: the admins
    of :func:`may_release_admin_hold` (Slurm: only an operator raises a job's ``TimeLimit``)."""
    return may_release_admin_hold(actor)


def limit_raised(old: int | None, new: int | None) -> bool:
    """Whether a change of a wall-time limit from ``old`` to ``new`` (seconds; None: no limit)
    raises it: a larger one, or none where there was one."""
    return old is not None and (new is None or new > old)


def _update_limit_once(actor: User, current: Workload, new: Any, seen_version: int | None) -> Workload | None:
    """:func:`do_update_workload` of a started workload (:data:`LIMIT_STATES`), which may change only
    its wall-time limit: lowered by whoever may cancel it (never below M: :func:`jobspec.max_runtime_problem`,
    the submission's rule with its cap), raised or removed only by an admin (``raise_needs_admin``,
    403). A limit the attempt has already run past stops it at the next tick, a ``timeout`` (Slurm).
    None when another update committed between the read and the lock (the caller tries again)."""
    if seen_version is not None and seen_version != current.spec_version:
        raise UpdateError(CHANGED_MEANWHILE, None, CHANGED_SINCE_SHOWN, status=409)
    old = current.max_runtime_s
    if new == old:
        return current
    if new is not None and (problem := jobspec.max_runtime_problem(new, current.min_runtime_s)):
        raise SubmissionError.from_problems([problem])
    if limit_raised(old, new) and not may_raise_limit(actor):
        raise UpdateError("raise_needs_admin", "max_runtime", RAISE_NEEDS_ADMIN, status=403)
    with transaction.atomic():
        # The workload's row first, as the tick's stop_timed_out takes it (docs/locking.md): a stop
        # issued before this lock makes it preempting (refused below), one after it reads this limit.
        locked = Workload.objects.select_for_update().get(pk=current.pk)
        attempt = Attempt.objects.filter(workload_id=current.pk, ended_at__isnull=True).first()
        if not limit_may_change(locked, attempt):
            if locked.state in LIMIT_STATES:  # its attempt was asked to stop: it ends as asked
                raise UpdateError("not_pending", "state", LIMIT_STOP_ASKED, status=409)
            _refuse_unless_pending(locked)
        if locked.spec_version != current.spec_version:
            return None
        now = timezone.now()
        started = attempt.started_at if attempt is not None else None
        past = new is not None and started is not None and started + timedelta(seconds=new) <= now
        Workload.objects.filter(pk=current.pk).update(
            max_runtime_s=new, spec_version=locked.spec_version + 1, updated_at=now
        )
        words = "changed " + _change_text("max_runtime_s", old, new)  # the updated event's one wording
        WorkloadEvent.objects.create(
            workload_id=current.pk,
            at=now,
            kind="updated",
            actor=actor,
            message=words + (f" ({LIMIT_PASSED})" if past else ""),
            # passed: the limit is already run past (fairway update and the page say it stops now)
            data={
                "changes": {"max_runtime_s": [old, new]},
                "state": locked.state,
                **({"passed": True} if past else {}),
            },
        )
        if past:
            request_tick_on_commit(current.cluster_id)
        request_estimates_on_commit(current.cluster_id)  # the forward simulation ends it at its limit
    return Workload.objects.select_related("budget", "owner", "cluster").get(pk=current.pk)


def _refuse_if_charged(workload: Workload) -> None:
    """Refuse (``budget_charged``, 409) a budget change of a workload that has run: the window's
    usage and the statements charge its attempts to its workload's budget (``snapshot``,
    ``budgets.statement``), so a move would carry its past charges to the new budget."""
    if Attempt.objects.filter(workload_id=workload.pk, started_at__isnull=False).exists():
        raise UpdateError(
            "budget_charged",
            "budget",
            f"The workload has run and its attempts are charged to {workload.budget.path}: its budget stays "
            "(cancel and submit again to charge another).",
            status=409,
        )


def _refuse_unless_pending(workload: Workload) -> None:
    if workload.state != Workload.State.PENDING:
        raise UpdateError(
            "not_pending",
            "state",
            f"Only a pending workload can be changed; this one is {workload.state}"
            + (" (of a started one, only its wall-time limit)." if workload.state in LIMIT_STATES else "."),
            status=409,
        )


GROUP_NAME_NOT_UPDATABLE = "A group's members keep their names (NAME[i]): change one member's name alone."
"""Why a group's update refuses ``name`` (the service's refusal, and the API's before it)."""


def do_update_group(actor: User, group: Any, changes: Mapping[str, Any]) -> list[Workload]:
    """:func:`do_update_workload` of every pending member of array group ``group`` that ``actor``
    may change, one by one (a member that started meanwhile is left as it is); returns those
    changed. The members keep their own names (``name`` is refused: each is ``NAME[i]``). Raises
    ``forbidden`` (403) when ``actor`` may change none of its members; every member is checked
    (:func:`_checked_update`) before any changes, so a refusal of one (``budget_charged``, 409: a
    budget move meets a member that has run; a 400 of a member's own values) changes no member (one
    that starts or runs meanwhile is left as it is)."""
    if "name" in changes:
        raise UpdateError("not_updatable", "name", GROUP_NAME_NOT_UPDATABLE)
    members = list(Workload.objects.filter(group=group).select_related("budget", "owner", "cluster").order_by("pk"))
    if not can_cancel_group(actor, group, members):
        raise UpdateError(FORBIDDEN, None, UPDATE_FORBIDDEN, status=403)
    tree = load_tree()
    mine = [w for w in members if w.state == Workload.State.PENDING and can_cancel(actor, w, tree)]
    for w in mine:
        # Every member is checked before any changes: a refusal of one (a budget move of one that has
        # run, brk46; its own wall-time limit below the new minimum runtime, brk50) answered 400 or 409
        # after the members before it had changed. The refusal names the member.
        try:
            _checked_update(w, changes, tree, actor)
        except ServiceError as exc:
            named = type(exc).from_problems(
                [dataclasses.replace(p, message=f"{w.name} (#{w.pk}): {p.message}") for p in exc.problems]
            )
            named.status = exc.status
            raise named from None
    changed = []
    for w in mine:
        try:
            done = do_update_workload(actor, w, changes, tree=tree, pending_only=True)
        except UpdateError as exc:
            if exc.code not in ("not_pending", "budget_charged"):
                raise
            continue  # started, or ran and was requeued, since the members were read: left as it is
        if done.spec_version != w.spec_version:  # changed (one already as asked is not counted)
            changed.append(done)
    return changed


# --- hold and release (docs/jobs.md "Hold and release") -----------------------------------

HOLD_WORDS = {Hold.USER: "held by its owner", Hold.ADMIN: "held by an admin"}
"""A hold's kind in words (events, the page's reason); the short list words are
``fairway_cli.words.reason_words``'."""
RELEASE_ADMIN_HOLD = "Held by an admin: only an admin (staff with the change_workload permission) may release it."


def workload_admin(actor: User) -> bool:
    """Superusers and staff with :data:`WORKLOAD_CANCEL_PERMISSION`: the admins of everyone's
    work, whose holds are admin holds (:func:`may_release_admin_hold`) and who may name anyone's
    workload in ``after`` (``scheduler.jobspec.check``; auth47: ``is_staff`` alone did)."""
    return bool(actor.is_authenticated and (actor.is_superuser or staff_may(actor, WORKLOAD_CANCEL_PERMISSION)))


def may_release_admin_hold(actor: User) -> bool:
    """:func:`workload_admin`: the only ones who may release an admin's hold (Slurm's ``scontrol
    release`` of a job an operator held)."""
    return workload_admin(actor)


def hold_kind(
    actor: User, workload: Workload, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> str:
    """The kind of hold ``actor`` places on ``workload``, one who may cancel it (:func:`can_cancel`):
    its owner or a manager of its budget (or an ancestor) places a user hold, anyone else (an admin
    acting on someone else's work) an admin hold."""
    if workload.owner_id == actor.pk or is_manager(actor, workload.budget, tree, memberships):
        return Hold.USER
    return Hold.ADMIN


def hold_changes(
    actor: User, workload: Workload, tree: dict[int, Budget] | None = None, memberships: dict[int, str] | None = None
) -> bool:
    """Whether a hold by ``actor`` changes ``workload``'s: not already held as firmly (an admin's
    hold stands whoever holds it again; an admin's replaces a user hold). The service's rule and
    the page's "Hold" button's (brk47: an admin saw none on a user-held workload)."""
    return workload.hold != Hold.ADMIN and workload.hold != hold_kind(actor, workload, tree, memberships)


def _hold_event(workload: Workload, actor: User, now: datetime, kind: str) -> WorkloadEvent:
    return WorkloadEvent(
        workload=workload,
        at=now,
        kind="held",
        actor=actor,
        message=f"{HOLD_WORDS[Hold(kind)]} ({kind} hold)",
        data={"hold": kind},
    )


def hold_refusal(
    actor: User,
    workload: Workload,
    *,
    release: bool = False,
    tree: dict[int, Budget] | None = None,
    memberships: dict[int, str] | None = None,
) -> HoldError | None:
    """Why ``actor`` may not hold (``release``: release) ``workload`` as it reads now, or None: not
    one who may cancel it (``forbidden``), not pending (``not_pending``); a release also: no hold
    (``not_held``), an admin's hold and ``actor`` no admin (``forbidden``). The rule of
    :func:`do_hold_workload` and :func:`do_release_workload` (on the locked row) and of a bulk
    action's preview (``scheduler.bulk``)."""
    if not can_cancel(actor, workload, tree, memberships):
        return HoldError(FORBIDDEN, None, HOLD_FORBIDDEN, status=403)
    if workload.state != Workload.State.PENDING:
        error = HoldError("not_pending", "state", not_pending_words([workload.state]), status=409)
        error.state = workload.state  # type: ignore[attr-defined]  # a bulk action's reason names the states
        return error
    if release and not workload.hold:
        return HoldError("not_held", "hold", "The workload is not on hold.", status=409)
    if release and workload.hold == Hold.ADMIN and not may_release_admin_hold(actor):
        return HoldError(FORBIDDEN, None, RELEASE_ADMIN_HOLD, status=403)
    return None


def _lock_pending(actor: User, workload: Workload, *, release: bool = False) -> Workload:
    """``workload``'s row locked (docs/locking.md: workloads first), checked for a hold or a
    release by ``actor`` (:func:`hold_refusal`). Raises HoldError."""
    locked = Workload.objects.select_for_update().select_related("budget").get(pk=workload.pk)
    if (refusal := hold_refusal(actor, locked, release=release)) is not None:
        raise refusal
    return locked


def do_hold_workload(actor: User, workload: Workload) -> Workload:
    """Hold a pending workload (Slurm's ``scontrol hold``): it never starts until released, its
    reason is ``held`` (unless ``unschedulable`` or ``dependency`` come first, §3.8), it has no
    estimated start and drops a GPU nomination; its submission time and sequence stay, so a
    release puts it back in its place. The kind (:func:`hold_kind`): a user hold by its owner or
    a budget manager, an admin hold by an admin; an admin's hold replaces a user hold, and any
    other hold of a held workload changes nothing. Records a ``held`` event (who, when, which
    kind). Holding races the tick that starts it: both lock the row first, so either the hold
    commits first and the tick drops the start (``tick._apply_starts``) or the tick does and this
    refuses ``not_pending``. Raises HoldError ``forbidden`` (403), ``not_pending`` (409)."""
    return hold_workload(actor, workload)[0]


def hold_workload(actor: User, workload: Workload) -> tuple[Workload, bool]:
    """:func:`do_hold_workload`, and whether it changed anything (:func:`hold_changes` on the
    locked row: false for one held as firmly already, by another's hold committed meanwhile too;
    brk55: a bulk or group hold compared the hold with the row as read before the lock, the API's
    ``changed`` the version, and counted another's hold as theirs)."""
    with transaction.atomic():
        locked = _lock_pending(actor, workload)
        if not hold_changes(actor, locked):
            return locked, False  # already held as firmly: nothing changes
        kind = hold_kind(actor, locked)
        now = timezone.now()
        GPU.objects.filter(nominated_for=locked).update_in_id_order(nominated_for=None)
        locked.hold, locked.held_at, locked.held_by = kind, now, actor
        locked.estimated_start, locked.estimate_unfunded = None, False  # no estimate, nor any part of one
        locked.spec_version += 1  # a tick whose snapshot read it unheld starts nothing for it
        update = ["hold", "held_at", "held_by", "estimated_start", "estimate_unfunded", "spec_version", "updated_at"]
        if locked.pending_reason not in (PendingReason.UNSCHEDULABLE, PendingReason.DEPENDENCY):
            locked.pending_reason, locked.pending_detail = PendingReason.HELD, {"hold": kind}
            update += ["pending_reason", "pending_detail"]
        locked.save(update_fields=update)
        _hold_event(locked, actor, now, kind).save()
        request_tick_on_commit(locked.cluster_id)
    return locked, True


def do_release_workload(actor: User, workload: Workload) -> Workload:
    """Release a held pending workload (Slurm's ``scontrol release``): it is scheduled again at
    its original submission time and sequence (its place in its budget's queue; docs/jobs.md).
    Its reason is cleared until the tick it asks for gives the new one. Records a ``released``
    event. Raises HoldError ``forbidden`` (403: not one who may cancel it, or an admin hold and
    ``actor`` no admin: :func:`may_release_admin_hold`), ``not_pending`` or ``not_held`` (409)."""
    with transaction.atomic():
        locked = _lock_pending(actor, workload, release=True)
        now = timezone.now()
        previous = locked.hold
        locked.hold, locked.held_at, locked.held_by = Hold.NONE, None, None
        locked.spec_version += 1  # a tick whose snapshot read it held leaves its reason to the next
        # An estimates run while it was held found no start (nothing starts held work there): that
        # answer said "No start within the next 7 days" once it was released (try50); forgotten, as an update does
        locked.estimated_start, locked.no_start_found, locked.estimate_unfunded = None, False, False
        update = [
            "hold",
            "held_at",
            "held_by",
            "estimated_start",
            "no_start_found",
            "estimate_unfunded",
            "spec_version",
            "updated_at",
        ]
        if locked.pending_reason == PendingReason.HELD and "hold" in (locked.pending_detail or {}):
            locked.pending_reason, locked.pending_detail = "", {}
            update += ["pending_reason", "pending_detail"]
        locked.save(update_fields=update)
        WorkloadEvent.objects.create(
            workload=locked,
            at=now,
            kind="released",
            actor=actor,
            message=f"released ({previous} hold)",
            data={"hold": previous},
        )
        request_tick_on_commit(locked.cluster_id)
    return locked


def do_hold_group(actor: User, group: Any, *, release: bool = False) -> list[int]:
    """Hold (``release``: release) every pending member of an array group that ``actor`` may
    (one :func:`do_hold_workload` or :func:`do_release_workload` each, so each member's is the
    ordinary one: an admin's hold replaces a member's user hold, brk47); members that started
    meanwhile, are not held (release) or hold an admin's hold ``actor`` may not release are passed
    over. Returns the ids of those changed (try46: as :func:`do_update_group`'s answer names them).
    Raises HoldError ``forbidden`` (403) when ``actor`` may cancel none of its members
    (:func:`can_cancel_group`)."""
    members = list(Workload.objects.filter(group=group).select_related("budget").order_by("pk"))
    if not can_cancel_group(actor, group, members):
        raise HoldError(FORBIDDEN, None, HOLD_FORBIDDEN, status=403)
    done: list[int] = []
    for w in members:
        if w.state != Workload.State.PENDING or (release and not w.hold) or not can_cancel(actor, w):
            continue
        try:
            # a release that returns changed the hold (it raises otherwise); a hold says whether it did
            changed = bool(do_release_workload(actor, w)) if release else hold_workload(actor, w)[1]
        except HoldError:
            continue  # started meanwhile, or an admin's hold
        if changed:  # what the service changed, not the hold as read before its lock (brk55)
            done.append(w.pk)
    return done


# --- hosts ---------------------------------------------------------------------------------


def hash_host_token(token: str) -> str:
    """SHA-256 hex of a host token: what ``Host.token_hash`` stores (tokens are random, no salt needed)."""
    return hashlib.sha256(token.encode()).hexdigest()


def _new_host_token() -> tuple[str, str]:
    token = secrets.token_urlsafe(32)
    return token, hash_host_token(token)


GpuSpec = tuple[int, str, str, int]
"""``(index, uuid, model, memory_mb)``."""


MAX_GPU_INDEX = 1023
"""Largest GPU index (as the agent protocol allows)."""
MAX_GPU_MB = 2**31 - 1
"""Largest ``memory_mb`` (the column is a 32-bit integer on PostgreSQL)."""


def _show(value: object) -> str:
    """``repr`` of refused input, shortened, printable in any encoding."""
    return ascii(value)[:200]


def _check_gpus(gpus: Sequence[GpuSpec]) -> list[GpuSpec]:
    if isinstance(gpus, str | bytes) or not isinstance(gpus, Sequence) or not gpus:
        raise HostError("invalid_gpus", "gpus", "A host has at least one GPU: [(index, uuid, model, memory_mb)].")
    if len(gpus) > MAX_HOST_GPUS:  # its agent's hello could never list them all (brk31)
        raise HostError("invalid_gpus", "gpus", f"A host has at most {MAX_HOST_GPUS} GPUs (what an agent reports).")
    out: list[GpuSpec] = []
    for spec in gpus:
        try:
            index, uuid, model, memory_mb = spec
        except (TypeError, ValueError):
            raise HostError("invalid_gpus", "gpus", f"{_show(spec)} is not (index, uuid, model, memory_mb).") from None
        if not (_is_int(index) and 0 <= index <= MAX_GPU_INDEX and _is_int(memory_mb) and 0 <= memory_mb <= MAX_GPU_MB):
            raise HostError(
                "invalid_gpus",
                "gpus",
                f"{_show(spec)}: index is an integer 0-{MAX_GPU_INDEX}, memory_mb an integer 0-{MAX_GPU_MB}.",
            )
        for what, text in (("uuid", uuid), ("model", model)):
            if problem := gpu_text_problem(text):
                raise HostError("invalid_gpus", "gpus", f"{_show(spec)}: its {what} {problem}.")
        out.append((index, uuid, model, memory_mb))
    if len({g[0] for g in out}) != len(out) or len({g[1] for g in out}) != len(out):
        raise HostError("invalid_gpus", "gpus", "GPU indices and UUIDs must be unique.")
    if len({g[2] for g in out}) != 1:
        raise HostError("mixed_models", "gpus", "All GPUs of a host are of one model (DESIGN.md §3.3).")
    return out


def check_labels(labels: Mapping[str, Any] | None) -> dict[str, str]:
    """A host's labels as stored (None: none), by the one rule of a join, a registration, the
    admin's edit and a scenario file (:func:`scheduler.gpu_text.labels_problem`). Raises HostError
    ``invalid_labels`` naming what is wrong (a control or invisible character as ``U+XXXX``)."""
    if labels is None:
        return {}
    problem = labels_problem(labels)
    if problem is not None:
        raise HostError("invalid_labels", "labels", problem)
    return dict(labels)


def _refuse_taken(name: str, specs: Sequence[GpuSpec]) -> None:
    """HostError ``host_exists`` / ``duplicate_gpu`` when a host ``name`` or a GPU of ``specs`` is
    registered (a GPU of a removed host, or one an approved inventory removed, is free again,
    unless an attempt still holds it)."""
    taken = Host.objects.filter(name=name).values_list("removed_at", flat=True).first()
    if taken is not None:
        raise HostError(
            "host_exists", "name", f"A host named {name} was removed from its cluster: join under another name."
        )
    if Host.objects.filter(name=name).exists():
        raise HostError("host_exists", "name", f"A host named {name} is already registered.")
    # GPUs of a removed host go with the device to the host that reports them (as an inventory
    # approval takes them, lifecycle._register_gpus), unless an attempt still holds one.
    taken = list(
        GPU.objects.filter(uuid__in=[g[1] for g in specs])
        .filter(Q(host__removed_at__isnull=True, removed_at__isnull=True) | Q(attempt_links__open=True))
        .values_list("uuid", flat=True)
        .distinct()
    )
    if taken:
        raise HostError("duplicate_gpu", "gpus", f"GPU UUIDs already registered: {', '.join(sorted(taken))}.")


def do_register_host(
    cluster: Cluster,
    name: str,
    gpus: Sequence[GpuSpec],
    labels: Mapping[str, str] | None = None,
    *,
    actor: User | None = None,
) -> tuple[Host, str]:
    """Register a host and its GPUs in ``cluster``; returns the host and its plaintext token.

    The token (``secrets.token_urlsafe(32)``) is shown once: only its SHA-256 hex is stored.
    ``gpus``: ``[(index, uuid, model, memory_mb)]``, one model per host. The host starts
    ``offline`` (to return to ``active``) until its agent's first hello (``lifecycle.host_hello``;
    a heartbeat too): an active host nobody had heard from took placements and counted as idle
    capacity until the sweep noticed the silence (brk30, mend31). Raises HostError
    (``invalid_host_name``, ``host_exists``, ``invalid_gpus``, ``mixed_models``,
    ``duplicate_gpu``, ``invalid_labels``). Records a ``registered`` HostEvent, requests a tick.
    """
    if not isinstance(name, str) or not HOST_NAME_RE.fullmatch(name):
        raise HostError("invalid_host_name", "name", f"A host name is {HOST_NAME_RULE}.")
    specs = _check_gpus(gpus)
    clean_labels = check_labels(labels)
    token, digest = _new_host_token()
    with transaction.atomic():
        _refuse_taken(name, specs)
        try:
            # A savepoint: a registration of the same name or GPU in flight elsewhere (a join with
            # another cluster's token) passed the checks above before this one's insert committed;
            # its insert then failed on the unique index, a 500 (brk32). Checked again: the rule's answer.
            with transaction.atomic():
                host = Host.objects.create(
                    cluster=cluster,
                    name=name,
                    labels=clean_labels,
                    token_hash=digest,
                    state=Host.State.OFFLINE,  # until its agent's first hello (the docstring)
                    state_before_offline=Host.State.ACTIVE,
                )
                # what _refuse_taken left registered (GPUs of removed hosts) stays with its host's history
                GPU.objects.filter(uuid__in=[g[1] for g in specs]).leave_to_history()
                GPU.objects.bulk_create(
                    [GPU(host=host, index=i, uuid=u, model=m, memory_mb=mem) for i, u, m, mem in sorted(specs)]
                )
        except IntegrityError:
            _refuse_taken(name, specs)
            raise
        HostEvent.objects.create(
            host=host,
            at=timezone.now(),
            kind="registered",
            actor=actor,
            message=f"registered with {len(specs)} × {specs[0][2]}",
            data={"gpus": len(specs), "model": specs[0][2], "labels": clean_labels},
        )
        request_tick_on_commit(cluster.id)
    return host, token


def host_removed_error(host: Host) -> HostError:
    """The refusal (``host_removed``) of every action on a host removed from its cluster: a state
    change, an inventory approval, a token rotation or revocation, a second removal (brk44: the
    approval and the token's rotation and revocation took a removed host)."""
    return HostError("host_removed", None, f"Host {host.name} was removed from the cluster.")


def do_rotate_host_token(actor: User | None, host: Host) -> str:
    """Give ``host`` a new token (the old one stops working at once); returns the plaintext.
    Raises HostError ``host_removed`` for a removed host (its agent is refused with 4410 for good).

    The host's open agent connections are closed at once (after commit; any the message
    misses is fenced by the bumped ``link_generation``: sent nothing, closed at its next flush)."""
    token, digest = _new_host_token()
    _replace_host_token(actor, host, digest, "token_rotated", "rotated")
    _log_host_action(actor, host, "rotated the token of {host}")
    return token


def do_revoke_host_token(actor: User | None, host: Host) -> None:
    """Revoke ``host``'s token: no agent connects with it any more, its open connections are closed
    at once (as :func:`do_rotate_host_token`). :func:`do_rotate_host_token` issues a new one.
    Raises HostError ``host_removed`` for a removed host."""
    _replace_host_token(actor, host, "revoked:" + secrets.token_hex(24), "token_revoked", "revoked")
    _log_host_action(actor, host, "revoked the token of {host}")


def _log_host_action(actor: User | None, host: Host, what: str, reason: str = "") -> None:
    """The one server log line of a host action (fin43): who, which host, what, and the reason.
    Written when the surrounding transaction commits (left44): an action a caller's transaction
    rolls back (an admin action over several hosts, a failed request) logs nothing, so the log
    never claims what did not happen. Outside any transaction it is written at once."""
    who = actor.get_username() if actor is not None else "the system"
    cluster = Cluster.objects.filter(pk=host.cluster_id).values_list("name", flat=True).first()
    where = f"host {host.name} (cluster {cluster})"
    what = what.replace("{host}", where) if "{host}" in what else f"{what} {where}"
    line = ("%s %s%s", who, what, f": {reason}" if reason else "")
    transaction.on_commit(lambda: logger.info(*line))


def _replace_host_token(actor: User | None, host: Host, digest: str, kind: str, reason: str) -> None:
    from django.db.models import F

    from scheduler import gateway

    with transaction.atomic():
        # Not of a removed host (brk44): its new token was refused for good, and the old one, held by
        # its agent, was then refused as unknown (4401, retried for ever) instead of as removed (4410).
        mine = Host.objects.filter(pk=host.pk, removed_at__isnull=True)
        if not mine.update(token_hash=digest, link_generation=F("link_generation") + 1):
            raise host_removed_error(host)
        generation = Host.objects.values_list("link_generation", flat=True).get(pk=host.pk)
        HostEvent.objects.create(
            host=host, at=timezone.now(), kind=kind, actor=actor, message="open agent connections closed"
        )
        transaction.on_commit(lambda: gateway.close_host_links([host.pk], reason, before=generation))
    host.token_hash, host.link_generation = digest, generation


def removal_problem(host: Host) -> str | None:
    """Why ``host`` cannot be removed now, or None: it still holds an open attempt (``host_busy``
    of :func:`do_remove_host`, and the admin's confirmation page beforehand: lead47, it offered the
    removal and the refusal came after)."""
    open_attempts = Attempt.objects.filter(gpu_links__gpu__host=host, gpu_links__open=True).distinct().count()
    if not open_attempts:
        return None
    if host.state == Host.State.DRAINING:  # try56: it was told "drain it first"
        return (
            f"Host {host.name} is draining and still holds {open_attempts} attempt(s): remove it once "
            f"it is drained (or drain it now: `fairway hosts drain-now {host.name}`)."
        )
    return (
        f"Host {host.name} still holds {open_attempts} attempt(s): drain it first, then remove it "
        "once it is drained (or offline and empty)."
    )


def do_remove_host(actor: User | None, host: Host, reason: str = "") -> Host:
    """Take ``host`` out of its cluster for good (a decommissioned machine): ``removed_at`` is set,
    so it leaves placement, the cluster's GPU count (every entitlement) and the pyramid's
    registered time from now on, its agent is refused and its open connections are closed; its
    attempts, events and usage stay in the history. Records a ``removed`` HostEvent and requests
    a tick. Raises HostError ``host_removed`` (already) or ``host_busy`` (409: an attempt is open
    there: drain it first), ``invalid_reason``. Its name stays taken: a machine that comes back joins
    under another name, and its GPUs move to that host (:func:`_refuse_taken`).
    """
    from django.db.models import F

    from scheduler import gateway

    _check_host_reason(reason)
    from scheduler.tick import wait_for_tick

    with transaction.atomic():
        wait_for_tick(host.cluster_id)  # before the host's row lock (docs/locking.md)
        locked = Host.objects.select_for_update().get(pk=host.pk)
        if locked.removed_at is not None:
            raise host_removed_error(locked)
        if (words := removal_problem(locked)) is not None:
            raise HostError("host_busy", None, words, status=409)
        now = timezone.now()
        # a queryset update: it forgets the hardware the web processes keep (HostQuerySet.memo_fields)
        Host.objects.filter(pk=locked.pk).update(
            removed_at=now,
            link_generation=F("link_generation") + 1,
            drain_at=None,  # a scheduled drain goes with it
            drain_at_now=False,
            drain_at_by=None,
            drain_at_reason="",
        )
        GPU.objects.filter(host=locked).update_in_id_order(nominated_for=None)
        generation = Host.objects.values_list("link_generation", flat=True).get(pk=locked.pk)
        HostEvent.objects.create(
            host=locked,
            at=now,
            kind="removed",
            actor=actor,
            message=reason,
            data={"state": locked.state, "gpus": locked.gpus.registered().count()},
        )
        transaction.on_commit(lambda: gateway.close_host_links([locked.pk], "removed", before=generation))
        request_tick_on_commit(locked.cluster_id)
    locked.removed_at, locked.link_generation = now, generation
    _log_host_action(actor, locked, "removed", reason)
    return locked


def authenticate_host_token(token: str) -> Host | None:
    """The registered (not removed) host whose token this is, or None."""
    if not isinstance(token, str) or not token or not _is_text(token):
        return None
    return Host.objects.filter(token_hash=hash_host_token(token), removed_at__isnull=True).first()


def _is_text(value: object, *, nul: bool = False) -> bool:
    """A str that PostgreSQL can store and UTF-8 can encode (:func:`scheduler.gpu_text.storable_text`)."""
    return storable_text(value, nul=nul)


# --- joining hosts (agent install, DESIGN.md §5) ------------------------------------------

JOIN_TOKEN_MAX_TTL = timedelta(days=30)


class JoinError(ServiceError):
    """A refused join: bad, used or expired join token (403), or a refused host registration."""


def do_create_join_token(
    actor: User | None, cluster: Cluster, ttl: timedelta = timedelta(hours=1), note: str = ""
) -> tuple[JoinToken, str]:
    """Create a single-use join token for ``cluster`` valid for ``ttl``; returns it and its plaintext.

    The plaintext (``fwj_`` + ``secrets.token_urlsafe(32)``) is shown once: only its SHA-256 hex is
    stored. Raises JoinError ``invalid_ttl`` unless 0 < ttl <= 30 days.
    """
    if not isinstance(ttl, timedelta) or not timedelta(0) < ttl <= JOIN_TOKEN_MAX_TTL:
        raise JoinError("invalid_ttl", "ttl", "A join token lives more than 0 s and at most 30 days.")
    token = "fwj_" + secrets.token_urlsafe(32)
    now = timezone.now()
    row = JoinToken.objects.create(
        cluster=cluster,
        token_hash=hash_host_token(token),
        created_at=now,
        expires_at=now + ttl,
        created_by=actor,
        note=str(note)[:256],
    )
    return row, token


def do_join_host(
    join_token: str, name: str, gpus: Sequence[GpuSpec], labels: Mapping[str, str] | None = None
) -> tuple[Host, str]:
    """Exchange a join token for a host token: register host ``name`` with ``gpus`` in the token's
    cluster (:func:`do_register_host`), ``offline`` until its agent's first hello, and spend the
    token, in one transaction.

    Raises JoinError ``invalid_join_token`` (403: unknown, used or expired; one message for all three)
    or the HostError of the registration (the token is then not spent).
    """
    refused = JoinError(
        "invalid_join_token", "token", "The join token is unknown, already used or expired.", status=403
    )
    if not _is_text(join_token) or not join_token:
        raise refused
    with transaction.atomic():
        row = (
            JoinToken.objects.select_for_update()
            .select_related("cluster")
            .filter(token_hash=hash_host_token(join_token))
            .first()
        )
        if row is None or row.used_at is not None or row.expires_at <= timezone.now():
            raise refused
        # Offline until its agent's first hello, as every registered host; the install script
        # starts the agent right after.
        host, token = do_register_host(row.cluster, name, gpus, labels, actor=row.created_by)
        row.used_at, row.host = timezone.now(), host
        row.save(update_fields=["used_at", "host"])
        HostEvent.objects.create(
            host=host, at=row.used_at, kind="joined", message=f"joined with join token {row.pk}", data={"token": row.pk}
        )
    return host, token


# Operator-settable states; ``drained`` is reached by the policy, ``offline`` by silence.
SETTABLE_HOST_STATES = (Host.State.ACTIVE, Host.State.CORDONED, Host.State.DRAINING)

HOST_ACTIONS: dict[str, tuple[str, bool]] = {
    "cordon": (Host.State.CORDONED, False),
    "drain": (Host.State.DRAINING, False),
    "drain-now": (Host.State.DRAINING, True),
    "resume": (Host.State.ACTIVE, False),
}
"""An operator's verbs on a host (the web page's buttons): the state each sets, and its drain_now."""


def _returns_as(host: Host) -> str:
    """The state an operator's change applies to: an offline host's state once its agent is back."""
    if host.state == Host.State.OFFLINE:
        return host.state_before_offline or Host.State.ACTIVE
    return host.state


def _state_target(current: str, state: str, drain_now: bool) -> str:
    """The state ``state`` sets on a host now ``current``: draining an empty (drained) host keeps it
    drained, a drain now too (nothing to drain now: left59, the tick's scheduled one flipped it)."""
    if state == Host.State.DRAINING and current == Host.State.DRAINED:
        return Host.State.DRAINED
    return state


def _inventory_pending(host: Host) -> str:
    """Why ``host`` cannot be resumed while its agent's GPU inventory awaits approval."""
    return (
        f"Host {host.name}'s agent reports GPUs that differ from the registered ones: approve "
        "its GPU inventory (hosts admin) or let the agent report the registered GPUs; it resumes then."
    )


def host_action_problem(host: Host, verb: str) -> str | None:
    """Why operator action ``verb`` (a key of :data:`HOST_ACTIONS`) does not apply to ``host`` now,
    or None: a removed host takes none; one that would change nothing is no action (resume of an
    active host, or of an offline one that returns as active; a second cordon; drain of a draining
    or drained host), nor is drain now of a drained, empty host. The one rule of the cluster page's
    buttons and of the web action that refuses the others (``do_set_host_state`` stays idempotent
    for the API and the admin: a repeat there is a no-op)."""
    if host.removed_at is not None:
        return host_removed_error(host).message
    state, drain_now = HOST_ACTIONS[verb]
    current = _returns_as(host)
    target = _state_target(current, state, drain_now)
    if current == Host.State.DRAINED and drain_now:
        return f"Host {host.name} is drained (empty): there is nothing to drain now."
    if verb == "drain" and current == Host.State.DRAINING:  # of a drain now too: not a way to slow it
        return f"Host {host.name} is draining already."
    if verb == "resume" and host.drain_at is not None:  # a resume cancels the scheduled drain, of an active host too
        refused = target != current and host.pending_inventory is not None  # as do_set_host_state refuses
        return _inventory_pending(host) if refused else None
    if target == current and host.drain_now == drain_now:
        where = f"offline and returns as {current}" if host.state == Host.State.OFFLINE else current
        return f"Host {host.name} is {where}: nothing to {verb.replace('-', ' ')}."
    if target == Host.State.ACTIVE and host.pending_inventory is not None:  # as do_set_host_state refuses
        return _inventory_pending(host)
    return None


HOST_OPERATOR_PERMISSION = "scheduler.change_host"
"""What operating a host (cordon, drain, drain now, resume, remove) needs beside ``is_staff``, on
every surface: the admin's actions, the hosts API (``fairway hosts``) and the clusters page
(docs/deploy.md; brk42: the API and the page took any staff member, a view-only one included)."""

HOST_OPERATOR_REFUSAL = "Only admins with the change_host permission cordon, drain, resume or remove hosts."


def may_operate_hosts(user: User | None) -> bool:
    """Whether ``user`` may cordon, drain, drain now, resume or remove hosts: staff holding
    :data:`HOST_OPERATOR_PERMISSION` (a superuser holds every permission)."""
    return bool(user is not None and user.is_active and user.is_staff and user.has_perm(HOST_OPERATOR_PERMISSION))


def host_actions(host: Host) -> list[str]:
    """The verbs of :data:`HOST_ACTIONS` that apply to ``host`` now (:func:`host_action_problem`)."""
    return [verb for verb in HOST_ACTIONS if host_action_problem(host, verb) is None]


def do_set_host_state(actor: User | None, host: Host, state: str, reason: str = "", *, drain_now: bool = False) -> Host:
    """Cordon, drain, drain now (``state="draining", drain_now=True``) or resume (``"active"``) a host.

    An offline host keeps ``offline`` and gets the new state as the one to return to. Draining
    a drained host changes nothing. Records a HostEvent (``cordoned``, ``draining``,
    ``drain_now``, ``resumed``) with the actor and reason — drain now is audited (DESIGN.md §6)
    — and requests a tick and a push of the host after commit. A resume also cancels a scheduled
    drain (:func:`do_schedule_drain`), of an active host too, and a drain one it covers
    (:func:`_covers_scheduled_drain`; :func:`scheduled_drain_note` says which). Raises HostError
    ``invalid_state``, ``invalid_reason`` (over 500 characters or holding NUL: the web form passed
    NUL through, a 500 on PostgreSQL), ``host_removed`` or ``inventory_pending`` (resuming a host
    whose agent's GPU inventory awaits an admin's approval: the approval resumes it, docs/deploy.md).
    """
    _check_host_reason(reason)
    if state not in SETTABLE_HOST_STATES:
        raise HostError("invalid_state", "state", f"State must be one of {', '.join(SETTABLE_HOST_STATES)}.")
    if drain_now and state != Host.State.DRAINING:
        raise HostError("invalid_state", "drain_now", "drain_now only goes with state=draining.")
    from scheduler.tick import wait_for_tick

    with transaction.atomic():
        wait_for_tick(host.cluster_id)  # before the host's row lock (docs/locking.md)
        locked = Host.objects.select_for_update().get(pk=host.pk)
        if locked.removed_at is not None:
            raise host_removed_error(locked)
        if locked.drain_at is not None and (covered := _covers_scheduled_drain(locked, state, drain_now)):
            _unschedule_drain(actor, locked, reason, f"canceled by a {covered}")
        kind = _change_host_state(actor, locked, state, reason, drain_now)
    if kind is not None:
        what = {"resumed": "resumed", "cordoned": "cordoned", "drain_now": "drained now", "draining": "drained"}[kind]
        _log_host_action(actor, locked, what, reason)
    return locked


def _covers_scheduled_drain(host: Host, state: str, drain_now: bool) -> str:
    """The action (``resume``, ``drain``, ``drain now``) that cancels ``host``'s scheduled drain,
    or "": a resume cancels it, a drain now any, a drain a scheduled drain (the host drains
    already: at its time it would change nothing) but not a drain now (which still stops what
    runs then); a cordon keeps it (docs/deploy.md, "Scheduled drains")."""
    if state == Host.State.ACTIVE:
        return "resume"
    if state == Host.State.DRAINING and drain_now:
        return "drain now"
    if state == Host.State.DRAINING and not host.drain_at_now:
        return "drain"
    return ""


def scheduled_drain_note(before: Host, after: Host) -> str:
    """What an operator's cordon, drain, drain now, resume or cancel-drain of ``before`` (the host as read before
    it) did to its scheduled drain, ``after`` being the host it returned: "its drain scheduled at
    08:00:00 UTC is canceled" (or "stands"), "" when none was scheduled. The one wording of the
    CLI, the API's ``scheduled_drain_change``, the clusters page and the admin (left59: a resume
    cancelled it unsaid)."""
    if before.drain_at is None:
        return ""
    what = "drain now" if before.drain_at_now else "drain"
    fate = "stands" if after.drain_at == before.drain_at else "is canceled"
    return f"its {what} scheduled at {instant_text(before.drain_at)} {fate}"


def _change_host_state(
    actor: User | None,
    locked: Host,
    state: str,
    reason: str,
    drain_now: bool,
    scheduled: Mapping[str, Any] | None = None,
) -> str | None:
    """:func:`do_set_host_state`'s change of ``locked`` (row-locked, not removed, under the
    cluster's tick lock): the one rule of an operator's change, immediate or scheduled
    (:func:`apply_due_drains`; ``scheduled`` goes into its event's data). Returns the kind of the
    event recorded, or None when it changes nothing."""
    offline = locked.state == Host.State.OFFLINE
    current = _returns_as(locked)
    target = _state_target(current, state, drain_now)
    if target == current and (locked.drain_now or not drain_now or target == Host.State.DRAINED):
        # the same state, or a drain of one drained now: never a way to slow it (brk56); a drained
        # host is empty: nothing to drain now (the page's rule, host_action_problem; left59)
        return None
    if target == Host.State.ACTIVE and locked.pending_inventory is not None:
        raise HostError("inventory_pending", "state", _inventory_pending(locked), status=409)
    if offline:
        locked.state_before_offline = target
    else:
        locked.state = target
    locked.drain_now = drain_now
    locked.save(update_fields=["state", "state_before_offline", "drain_now"])
    kind = {
        Host.State.ACTIVE: "resumed",
        Host.State.CORDONED: "cordoned",
        Host.State.DRAINING: "drain_now" if drain_now else "draining",
        Host.State.DRAINED: "draining",
    }[target]
    data: dict[str, Any] = {"from": current, "to": target, "drain_now": drain_now, "offline": offline}
    if scheduled is not None:
        data["scheduled"] = dict(scheduled)
    HostEvent.objects.create(host=locked, at=timezone.now(), kind=kind, actor=actor, message=reason, data=data)
    request_tick_on_commit(locked.cluster_id)
    push_hosts_on_commit([locked.pk])
    return kind


# --- scheduled drains (docs/deploy.md, "Scheduled drains") ---------------------------------------

SCHEDULED_DRAIN_MAX = SCHEDULE_AHEAD_MAX
"""How far ahead a drain may be scheduled: a typed year (2062 for 2026) is refused, not kept for
ever (``budgets.rules.SCHEDULE_AHEAD_MAX``: a temporary share's end alike)."""

SCHEDULED_DRAIN_FORM = (
    "an ISO 8601 UTC time such as 2026-12-10T08:00Z (or with an offset: +01:00), or in a duration from now: in 2h"
)


def drain_in(value: object, now: datetime | None = None) -> datetime:
    """The instant a duration ``value`` from ``now`` names (:func:`~fairway_cli.numbers.parse_duration_s`:
    ``7200``, ``2h``, ``1d 6h``): the API's ``in`` (``fairway hosts --in``) and a drain time typed
    ``in 2h`` (:func:`drain_time`: the clusters page's and the admin's field; admin47). Past the
    furthest schedulable time, :func:`drain_time` refuses it naming the time asked for (brk56: it
    named 367 days ahead), not an overflow (10**9 s: about 31 years). Raises ValueError."""
    return (now or timezone.now()) + timedelta(seconds=min(parse_duration_s(value), 10**9))


def drain_time(value: object, now: datetime | None = None) -> datetime:
    """The instant a drain is scheduled for, from ``value`` (an aware datetime, ISO 8601 text
    with its zone: ``2026-12-10T08:00Z``, or ``in`` and a duration from now: ``in 2h``, :func:`drain_in`),
    checked: after ``now`` and at most :data:`SCHEDULED_DRAIN_MAX` ahead. The one reading of the API's
    ``at``, the page's and the admin's field (the CLI's ``--at`` and ``--in`` go through the API). Raises
    HostError ``invalid_at``: unreadable, without a zone (refused, not read as UTC: a local time typed so
    would drain hours early or late), past, or too far."""
    from django.utils.dateparse import parse_datetime

    now = now or timezone.now()
    at: datetime | None
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str) and _is_text(value) and len(value) <= 64:
        text = value.strip()
        try:
            at = drain_in(text[3:], now) if text[:3].lower() == "in " else parse_datetime(text)
        except ValueError:
            at = None
    else:
        at = None
    if at is None:
        raise HostError("invalid_at", "at", f"A drain's time is {SCHEDULED_DRAIN_FORM}; {str(value)[:64]!r} is not.")
    if at.tzinfo is None:
        raise HostError("invalid_at", "at", f"A drain's time names its zone: {SCHEDULED_DRAIN_FORM}.")
    # whole seconds, as the policy reads it (snapshot.epoch, floored) and every surface shows it (try59: "--in 1h"
    # at 02:48:07.69 showed 02:48:08 on the host, rounded up, and 02:48:07 in the pending reason); checked as kept:
    # a time later than now within this second was kept at or before now, a drain "scheduled" in the past (lt61)
    at = at.replace(microsecond=0)
    try:
        shown = instant_text(at, absolute=True)
    except OverflowError:  # before year 1 or after 9999 in UTC (brk56: a 500 writing it)
        shown = str(value)[:64]
    if at <= now:
        raise HostError(
            "invalid_at", "at", f"A drain is scheduled for a later time: {shown} is past (drain it now instead)."
        )
    if at > now + SCHEDULED_DRAIN_MAX:
        raise HostError(
            "invalid_at", "at", f"A drain is scheduled at most {SCHEDULED_DRAIN_MAX.days} days ahead: {shown} is later."
        )
    return at


SCHEDULABLE_VERBS = ("drain", "drain-now")
"""The host actions a time schedules (the API's ``at``/``in``, ``fairway hosts --at/--in``, the
clusters page's and the admin's time field)."""


def unscheduled_verb_problem(host: Host, verb: str) -> str | None:
    """Why a time given with host action ``verb`` is refused, or None: a time schedules a drain or
    a drain now only (brk58: the clusters page cordoned at once, the time typed dropped unsaid)."""
    if verb in SCHEDULABLE_VERBS:
        return None
    return (
        f"Host {host.name}: a time schedules a drain or a drain now, not a {verb.replace('-', ' ')}; nothing changed."
    )


def scheduled_drain(host: Host) -> dict[str, Any] | None:
    """``host``'s scheduled drain as ``{"at", "drain_now", "by", "reason", "summary"}`` (``by``: the
    admin who scheduled it, None once that user is deleted), or None. ``summary`` is the one
    wording of it: the API, ``fairway hosts``, the clusters page and the admin show it."""
    if host.drain_at is None:
        return None
    by = host.drain_at_by.get_username() if host.drain_at_by is not None else None
    what = "drain now" if host.drain_at_now else "drain"
    summary = f"{what} scheduled at {instant_text(host.drain_at)}" + (f" by {by}" if by else "")
    if host.drain_at_reason:
        summary += f": {host.drain_at_reason}"
    return {
        "at": host.drain_at,
        "drain_now": host.drain_at_now,
        "by": by,
        "reason": host.drain_at_reason,
        "summary": summary,
    }


def _unschedule_drain(actor: User | None, locked: Host, reason: str, why: str) -> None:
    """Forget ``locked``'s scheduled drain (row-locked), recording a ``drain_unscheduled`` event."""
    at, drain_now = locked.drain_at, locked.drain_at_now
    locked.drain_at, locked.drain_at_now, locked.drain_at_by, locked.drain_at_reason = None, False, None, ""
    locked.save(update_fields=["drain_at", "drain_at_now", "drain_at_by", "drain_at_reason"])
    HostEvent.objects.create(
        host=locked,
        at=timezone.now(),
        kind="drain_unscheduled",
        actor=actor,
        message=reason or why,
        data={"at": at.isoformat() if at else None, "drain_now": drain_now, "why": why},
    )
    request_tick_on_commit(locked.cluster_id)  # the policy reads the schedule (PassState.drain_allows)
    when = instant_text(at, absolute=True)
    _log_host_action(actor, locked, f"canceled the drain of {{host}} scheduled at {when} ({why})", reason)


def do_schedule_drain(actor: User | None, host: Host, at: object, reason: str = "", *, drain_now: bool = False) -> Host:
    """Schedule a drain (``drain_now``: a drain now) of ``host`` at ``at`` (:func:`drain_time`),
    replacing the one scheduled before. Until then the host starts no allocated work whose
    protection would end after ``at`` (docs/deploy.md "Scheduled drains"); at ``at`` the
    tick drains it as :func:`do_set_host_state` would (:func:`apply_due_drains`). Records a
    ``drain_scheduled`` event (who, the time, the one replaced). Raises HostError ``invalid_at``,
    ``invalid_reason``, ``host_removed``, ``invalid_state`` (the drain would change nothing now:
    the host drains already, :func:`host_action_problem`). Admins only, as every host action:
    the surfaces check :func:`may_operate_hosts`."""
    _check_host_reason(reason)
    when = drain_time(at)
    verb = "drain-now" if drain_now else "drain"
    with transaction.atomic():
        locked = Host.objects.select_for_update().get(pk=host.pk)
        if locked.removed_at is not None:
            raise host_removed_error(locked)
        if problem := host_action_problem(locked, verb):
            raise HostError("invalid_state", "at", problem, status=409)
        replaced = locked.drain_at
        locked.drain_at, locked.drain_at_now, locked.drain_at_by = when, drain_now, actor
        locked.drain_at_reason = reason
        locked.save(update_fields=["drain_at", "drain_at_now", "drain_at_by", "drain_at_reason"])
        HostEvent.objects.create(
            host=locked,
            at=timezone.now(),
            kind="drain_scheduled",
            actor=actor,
            message=reason,
            data={
                "at": when.isoformat(),
                "drain_now": drain_now,
                "replaces": replaced.isoformat() if replaced else None,
            },
        )
        # the policy reads the schedule: before it no allocated start whose protection crosses it
        request_tick_on_commit(locked.cluster_id)
    what = "drain now" if drain_now else "drain"
    _log_host_action(actor, locked, f"scheduled a {what} of {{host}} at {instant_text(when, absolute=True)}", reason)
    return locked


def no_drain_scheduled_text(host: Host) -> str:
    """The words of a cancel of ``host``'s scheduled drain when none is: the clusters page refuses
    it (it offers only what changes something), the admin says it."""
    return f"Host {host.name} has no drain scheduled: nothing to cancel."


def do_cancel_scheduled_drain(actor: User | None, host: Host, reason: str = "") -> Host:
    """Cancel ``host``'s scheduled drain (a resume cancels it too); with none scheduled, a no-op
    (no event), as the API's repeat of any change and Kubernetes' uncordon of an uncordoned node
    (left59: it was a 409 ``no_scheduled_drain``; docs/deploy.md). Raises HostError
    ``host_removed`` or ``invalid_reason``."""
    _check_host_reason(reason)
    with transaction.atomic():
        locked = Host.objects.select_for_update().get(pk=host.pk)
        if locked.removed_at is not None:
            raise host_removed_error(locked)
        if locked.drain_at is not None:
            _unschedule_drain(actor, locked, reason, "canceled")
    return locked


def due_drains(cluster_id: int, now: datetime) -> QuerySet[Host]:
    """The hosts of ``cluster_id`` whose scheduled drain is due at ``now``: the tick's unlocked
    check (``tick._steps_due``) before :func:`apply_due_drains`, which reads them again under the
    tick's lock, so a tick with none due opens no transaction for them."""
    return Host.objects.filter(cluster_id=cluster_id, drain_at__lte=now)


def apply_due_drains(cluster_id: int, now: datetime) -> list[int]:
    """Drain the hosts of ``cluster_id`` whose scheduled drain is due at ``now``, as the admin who
    scheduled it would have with :func:`do_set_host_state` (the one rule: :func:`_change_host_state`);
    returns their ids. Run by the tick before its snapshot, in a transaction of its own under the
    cluster's tick lock (``tick.run_tick``): each host is row-locked (id order), its schedule read
    again and cleared in the transaction that applies it, so a drain is applied at most once, a
    second tick finds nothing, and a host removed meanwhile is left alone (its schedule dropped)."""
    due = list(
        Host.objects.filter(cluster_id=cluster_id, drain_at__lte=now).order_by("pk").values_list("pk", flat=True)
    )
    applied: list[int] = []
    for pk in due:
        locked = Host.objects.select_for_update().filter(pk=pk).first()
        if locked is None or locked.drain_at is None or locked.drain_at > now:
            continue  # cancelled, replaced or applied since the read
        at, by, drain_now, reason = locked.drain_at, locked.drain_at_by, locked.drain_at_now, locked.drain_at_reason
        locked.drain_at, locked.drain_at_now, locked.drain_at_by, locked.drain_at_reason = None, False, None, ""
        locked.save(update_fields=["drain_at", "drain_at_now", "drain_at_by", "drain_at_reason"])
        if locked.removed_at is not None:
            continue
        # when it was asked: the reason on the host says it, beside when it began (lt61)
        asked = (
            HostEvent.objects.filter(host=locked, kind="drain_scheduled")
            .order_by("-at", "-pk")
            .values_list("at", flat=True)
            .first()
        )
        scheduled = {
            "at": at.isoformat(),
            "by": by.get_username() if by is not None else None,
            "asked_at": asked.isoformat() if asked is not None else None,
        }
        kind = _change_host_state(by, locked, Host.State.DRAINING, reason, drain_now, scheduled)
        what = "drain now" if drain_now else "drain"
        if kind is None:
            HostEvent.objects.create(
                host=locked,
                at=timezone.now(),
                kind="drain_unscheduled",
                actor=by,
                message=f"the {what} scheduled at {instant_text(at, absolute=True)} changed nothing: "
                f"the host was {_returns_as(locked)} already",
                data={"at": at.isoformat(), "drain_now": drain_now, "why": "moot"},
            )
            continue
        applied.append(locked.pk)
        done = "drained now" if drain_now else "drained"
        _log_host_action(by, locked, f"{done} {{host}} as scheduled at {instant_text(at, absolute=True)}", reason)
    return applied


# --- clusters ------------------------------------------------------------------------------


def unknown_cluster_words(names: Iterable[str]) -> str:
    """The words of a command given cluster names that do not exist: the names, the clusters there
    are (or none yet) and where one comes from (tryout36). ``create_join_token`` and ``run_tick``
    say it alike (try50: ``run_tick nope`` said "no such cluster: nope" alone)."""
    known = list(Cluster.objects.order_by("name").values_list("name", flat=True)[:20])
    there = f"the clusters are: {', '.join(known)}" if known else "there is no cluster yet"
    return f"no such cluster: {', '.join(sorted(names))} ({there}); an admin creates one at /admin/ → Clusters → Add"


def do_create_cluster(name: str, description: str = "") -> Cluster:
    """Create a cluster (or return the existing one of that name: idempotent)."""
    with transaction.atomic():
        cluster, _created = Cluster.objects.get_or_create(name=name, defaults={"description": description})
    return cluster
