"""Submit a workload again (docs/jobs.md "Submit again").

A resubmission is an ordinary submission (``scheduler.services.do_submit_workload``: membership,
feasibility, the per-user limit, every check) of the old workload's **spec**, :func:`workload_spec`,
with the caller's overrides laid over it. The spec is the one ``GET /api/v1/workloads/{id}/spec/``
and ``fairway show ID --spec`` write and the submit form is prefilled with: a resubmission submits
what they show. Nothing of the rules is restated here but the one that is resubmission's own:
**a secret's value never passes from one user to another** (:func:`resubmission_kwargs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accounts.models import User
from config.errors import FORBIDDEN
from fairway_cli.numbers import duration_text
from scheduler.api.serializers import default_name, parse_duration_s
from scheduler.models import Workload
from scheduler.services import SECRET_PLACEHOLDER, SubmissionError, may_read_private

RESUBMIT_FORBIDDEN = (
    "Only the workload's owner, members of its budget and admins with the view_workload permission may "
    "read its spec or submit it again."
)
"""The refusal of a resubmission (or of a spec) by someone who may not read the workload's env
(``scheduler.services.may_read_private``)."""


def spec_duration(seconds: int) -> int | str:
    """``seconds`` as a spec writes it: ``2h`` where that reads back exactly, else the seconds."""
    text = duration_text(seconds)
    try:
        return text if parse_duration_s(text) == seconds else seconds
    except ValueError:
        return seconds


def exact_duration_text(seconds: int | None) -> str:
    """:func:`spec_duration` as a form's text field holds it; empty for None."""
    return "" if seconds is None else str(spec_duration(seconds))


def _array_index_name(workload: Workload) -> str:
    """A member's name without its ``[i]`` (the group's name), which an array submission adds back."""
    suffix = f"[{workload.array_index}]"
    return workload.name[: -len(suffix)] if workload.name.endswith(suffix) else workload.name


def workload_spec(workload: Workload, budget_path: str) -> dict[str, Any]:
    """The submission that makes ``workload`` again, in the API's fields (what ``fairway submit -f``
    and ``POST workloads/`` take): name, budget, cluster, GPUs, image, command, env, minimum runtime,
    requests, mounts by name (resolved again at submission), wall-time limit, retries. Not its
    dependencies (``after``: the work it waited for has ended or may not be the point) nor its array
    group: a member comes back as ``array: "<its index>"``, one workload of that index in a group of
    its own (its name and ``FAIRWAY_ARRAY_INDEX`` as it ran). A secret's value is
    :data:`~scheduler.services.SECRET_PLACEHOLDER`, never the value."""
    env: dict[str, Any] = {}
    for name, entry in (workload.env or {}).items():
        if workload.array_index is not None and name == "FAIRWAY_ARRAY_INDEX":
            continue  # set by the array below
        if entry.get("secret"):
            env[name] = {"value": SECRET_PLACEHOLDER, "secret": True}
        else:
            env[name] = entry.get("value", "")
    spec: dict[str, Any] = {
        "name": workload.name if workload.array_index is None else _array_index_name(workload),
        "budget": budget_path,
        "cluster": workload.cluster.name,
        "gpu_model": workload.gpu_model,
        "gpu_count": workload.gpu_count,
        "image": workload.image,
        "command": list(workload.command or []),
        "env": env,
        "min_runtime": spec_duration(workload.min_runtime_s),
        "cpus": workload.cpus,
        "memory": workload.memory_bytes,
        "shared_memory": workload.shared_memory_bytes,
        "mounts": [m["name"] for m in workload.mounts or []],
        "max_runtime": spec_duration(workload.max_runtime_s) if workload.max_runtime_s else None,
        "retries": workload.retries,
        "array": str(workload.array_index) if workload.array_index is not None else None,
    }
    return {k: v for k, v in spec.items() if not (k in SPEC_LEFT_OUT_EMPTY and v in (None, "", [], {}))}


SPEC_LEFT_OUT_EMPTY = ("image", "env", "cpus", "memory", "shared_memory", "mounts", "max_runtime", "array")
"""The keys of :func:`workload_spec` left out when empty (the schema's optional ones:
``WorkloadSpecSerializer``)."""


def _merged_env(old: Mapping[str, Any], given: Any) -> Any:
    """The spec's env with ``given`` laid over it by name (a name given replaces that variable;
    ``null`` drops it); ``null`` itself (no env, as it clears any optional field) and anything but
    a mapping are passed on for the submission to take or refuse."""
    if not isinstance(given, Mapping):
        return given
    env = dict(old)
    for name, value in given.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _unvalued_secret(entry: Any) -> bool:
    """An env entry that is a secret without a value: the placeholder, or blank (the form's
    prefilled ``NAME=``)."""
    return isinstance(entry, Mapping) and entry.get("secret") is True and entry.get("value") in ("", SECRET_PLACEHOLDER)


def resubmission_data(
    actor: User,
    old: Workload,
    overrides: Mapping[str, Any],
    *,
    budget_path: str,
    accessible: set[int] | frozenset[int],
    keep_secrets: bool = True,
    whole_env: bool = False,
) -> dict[str, Any]:
    """The submission (the API's fields, for its parser: ``WorkloadSubmitSerializer``) that
    submits ``old`` again as ``actor``: ``overrides`` (the same fields) over :func:`workload_spec`.
    The caller passes the parsed submission to ``do_submit_workload`` with
    ``resubmitted_from=old``.

    ``overrides["env"]`` is laid over the old env by name, or, with ``whole_env`` (the submit
    form, which shows the whole env), replaces it. Raises SubmissionError ``forbidden`` (403) for
    whoever may not read ``old``'s env (``may_read_private``); every other refusal (a 400 by
    field, ``too_many_submitted`` 429, ...) is the parser's and the submission service's own.

    The secret rule: a secret of ``old`` left without a value (placeholder or blank) gets ``old``'s
    stored value only when ``actor`` is its owner and ``keep_secrets``; otherwise it keeps the
    placeholder, which the submission refuses (``secret_values_required``, naming each): a
    secret's value never passes from one user to another.

    A new ``command`` without a ``name`` where ``old``'s name was its command's default
    (``default_name``) leaves the name to the new command's default, as a submission's (words46:
    ``fairway resubmit 6 -- echo again`` was named ``sh``, after the old command)."""
    if not may_read_private(actor, old, accessible):
        raise SubmissionError(FORBIDDEN, None, RESUBMIT_FORBIDDEN, status=403)
    spec = workload_spec(old, budget_path)
    if "command" in overrides and "name" not in overrides and spec["name"] == default_name(old.command):
        del spec["name"]
    data: dict[str, Any] = {**spec, **{k: v for k, v in overrides.items() if k != "env"}}
    if "env" in overrides:
        data["env"] = overrides["env"] if whole_env else _merged_env(spec.get("env", {}), overrides["env"])
    stored = old.env or {}
    may_copy = keep_secrets and actor.pk == old.owner_id
    env = data.get("env")
    if isinstance(env, Mapping):
        env = dict(env)
        for name, entry in env.items():
            if _unvalued_secret(entry) and (stored.get(name) or {}).get("secret"):
                value = stored[name].get("value", "") if may_copy else SECRET_PLACEHOLDER
                env[name] = {"value": value, "secret": True}
        data["env"] = env
    return {k: v for k, v in data.items() if v is not None or k in overrides}
