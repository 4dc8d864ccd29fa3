"""The job options of a submission (docs/jobs.md): mounts, wall-time limit, retries, arrays and
dependencies, each checked with a clear error (``config.errors.FieldProblem``) before anything
is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from config.errors import FieldProblem
from fairway_cli.numbers import duration_text
from scheduler import mounts as mount_catalog

ARRAY_RE = re.compile(r"^(?P<items>[0-9,\-]+)(?:%(?P<limit>[0-9]+))?$")
AFTER_RE = re.compile(r"\A#?(?P<id>[0-9]{1,18})(?::(?P<cond>ok|any))?\Z")  # "#12": as every surface writes it
MAX_AFTER = 64
MAX_ARRAY_INDEX = 2_147_483_647
"""The largest array index: what an integer column holds on every database (PostgreSQL's
``integer``); a larger one would fail when written instead of being refused."""


def _array_number(text: str, what: str) -> int:
    """An index of an array (ASCII digits, checked by the caller) as an int, at most
    ``MAX_ARRAY_INDEX``; ValueError with a sentence otherwise (before ``int()`` meets a
    thousands-digit string)."""
    if len(text) > len(str(MAX_ARRAY_INDEX)) or int(text) > MAX_ARRAY_INDEX:
        raise ValueError(f"{what} is at most {MAX_ARRAY_INDEX}")
    return int(text)


def parse_array(spec: str, most: int) -> tuple[list[int], int | None]:
    """``0-99``, ``1,3,5-7``, with an optional ``%N`` cap → (sorted indices, cap or None).

    Raises ValueError with a sentence for a bad spec, an empty or reversed range, more than
    ``most`` indices, an index above ``MAX_ARRAY_INDEX``, or a cap outside 1 to ``most`` (a cap
    of ``most`` or more caps nothing).
    """
    m = ARRAY_RE.match(spec.strip()) if isinstance(spec, str) else None
    if m is None:
        raise ValueError("an array is like 0-99, 1,3,5-7 or 0-99%10")
    from scheduler.models import ArrayGroup

    kept = ArrayGroup._meta.get_field("spec").max_length  # the group keeps it as submitted (brk50: a 500 past it)
    if len(spec.strip()) > kept:
        raise ValueError(f"an array is at most {kept} characters (ranges: 0-99 rather than 0,1,2,…)")
    indices: set[int] = set()
    for item in m.group("items").split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{item!r} is not an index or a range A-B")
        a = _array_number(lo, "an index")
        b = _array_number(hi, "an index") if sep else a
        if b < a:
            raise ValueError(f"the range {item} is reversed")
        if b - a + 1 > most:  # before building the range: 0-2147483647 is two billion
            raise ValueError(f"an array has at most {most} members")
        indices.update(range(a, b + 1))
        if len(indices) > most:  # distinct members: 0-599,400-999 is 1,000 (was refused as 1,200)
            raise ValueError(f"an array has at most {most} members")
    limit = m.group("limit")
    if limit is None:
        return sorted(indices), None
    if len(limit) > len(str(most)) or not 1 <= int(limit) <= most:
        raise ValueError(f"the %N cap is from 1 to {most}")
    return sorted(indices), int(limit)


@dataclass
class JobOptions:
    """The checked options; ``problems`` empty means they may be written."""

    problems: list[FieldProblem] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    max_runtime_s: int | None = None
    retries: int = 0
    after: list[tuple[int, str]] = field(default_factory=list)
    indices: list[int | None] = field(default_factory=lambda: [None])
    array: str | None = None
    limit: int | None = None

    def create_group(self, owner: Any, cluster: Any, name: str) -> Any:
        """The ArrayGroup of an array submission (None otherwise)."""
        from scheduler.models import ArrayGroup

        if self.array is None:
            return None
        return ArrayGroup.objects.create(owner=owner, cluster=cluster, name=name, spec=self.array, limit=self.limit)

    def create_dependencies(self, workloads: Sequence[Any]) -> None:
        """The ``after`` rows of every member of the submission, in one ``bulk_create`` (brk41: one
        per member made a 1000-member array with 64 dependencies a thousand INSERTs)."""
        from scheduler.models import WorkloadDependency

        WorkloadDependency.objects.bulk_create(
            [
                WorkloadDependency(workload=workload, after_id=pk, condition=cond)
                for workload in workloads
                for pk, cond in self.after
            ]
        )

    def describe(self, index: int | None) -> str:
        parts = []
        if index is not None:
            parts.append(f"array index {index}")
        if self.after:
            parts.append("after " + ", ".join(f"{pk}:{c}" for pk, c in self.after))
        return f" ({'; '.join(parts)})" if parts else ""

    def event_data(self, index: int | None) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.mounts:
            data["mounts"] = [m["name"] for m in self.mounts]
        if self.max_runtime_s is not None:
            data["max_runtime_s"] = self.max_runtime_s
        if self.retries:
            data["retries"] = self.retries
        if self.after:
            data["after"] = [f"{pk}:{c}" for pk, c in self.after]
        if index is not None:
            data["array"] = self.array
            data["array_index"] = index
        return data


def retries_problem(most: int) -> str:
    """The refusal of a retry count out of ``0..most``, in the words of every surface (the submit form's too)."""
    return f"retries is a whole number from 0 to {most}."


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def max_runtime_problem(max_runtime_s: Any, min_runtime_s: int) -> FieldProblem | None:
    """Why ``max_runtime_s`` (seconds, not None) cannot be a wall-time limit of a workload whose
    minimum runtime is ``min_runtime_s``, or None: a whole number >= 1 (``invalid_max_runtime``),
    at most ``FAIRWAY_MAX_RUNTIME_LIMIT_S`` (``max_runtime_too_long``), at least M
    (``max_runtime_below_min_runtime``: the limit would cut the protection it declared, DESIGN.md
    §4). The one rule of a submission and of a change of a running workload's limit."""
    limit = settings.FAIRWAY["MAX_RUNTIME_LIMIT_S"]
    if not _whole(max_runtime_s) or max_runtime_s < 1:
        return FieldProblem(
            "invalid_max_runtime", "max_runtime", "The wall-time limit is a whole number of seconds >= 1."
        )
    if max_runtime_s > limit:
        return FieldProblem(
            "max_runtime_too_long", "max_runtime", f"The wall-time limit is at most {duration_text(limit)}."
        )
    if max_runtime_s < min_runtime_s:
        return FieldProblem(
            "max_runtime_below_min_runtime",
            "max_runtime",
            f"The wall-time limit ({duration_text(max_runtime_s)}) must be at least the minimum runtime "
            f"({duration_text(min_runtime_s)}).",
        )
    return None


def check(
    owner: Any,
    *,
    cluster: Any,
    budget: Any,
    min_runtime_s: int,
    mounts: Sequence[str] = (),
    max_runtime_s: int | None = None,
    retries: int = 0,
    after: Sequence[str | int] = (),
    array: str | None = None,
) -> JobOptions:
    """Check the job options of one submission by ``owner`` (see :class:`JobOptions`)."""
    from scheduler.models import Workload
    from scheduler.services import workload_admin

    out = JobOptions()

    def refuse(code: str, where: str, message: str) -> None:
        out.problems.append(FieldProblem(code, where, message))

    cfg = settings.FAIRWAY
    if isinstance(mounts, str) or not isinstance(mounts, Sequence):  # {}, "", 0, false were none (in49)
        refuse("invalid_mount", "mounts", "mounts is a list of mount names")
    elif cluster is not None and mounts:
        resolved, problems = mount_catalog.resolve(owner, cluster, budget, mounts)
        for p in problems:
            refuse("invalid_mount", "mounts", p)
        out.mounts = resolved

    if max_runtime_s is not None:
        if problem := max_runtime_problem(max_runtime_s, min_runtime_s):
            out.problems.append(problem)
        else:
            out.max_runtime_s = max_runtime_s

    most = cfg["MAX_RETRIES"]
    if not _whole(retries) or not 0 <= retries <= most:
        refuse("invalid_retries", "retries", retries_problem(most))
    else:
        out.retries = retries

    if type(array) is int:  # array: 7 read "Bad array '7': an array is like 0-99, ..."; after: [7] is taken
        array = str(array)
    if array is not None and not isinstance(array, str):  # {}, [], false (in49)
        refuse("invalid_array", "array", "array is a string like 0-99%10.")
    elif array is not None:  # "" was taken as none (in49): parse_array refuses it
        try:
            indices, cap = parse_array(array, cfg["MAX_ARRAY_SIZE"])
        except ValueError as exc:
            refuse("invalid_array", "array", f"Bad array {str(array)[:64]!r}: {exc}.")
        else:
            out.indices = list(indices)
            out.array = array.strip()
            out.limit = cap

    if isinstance(after, str | int):
        after = [after]
    if not isinstance(after, Sequence) or len(after) > MAX_AFTER:
        refuse("invalid_after", "after", f"after is a list of at most {MAX_AFTER} entries ID[:ok|any].")
        return out
    wanted: dict[int, str] = {}
    for item in after:
        m = AFTER_RE.match(str(item).strip()) if isinstance(item, str | int) and not isinstance(item, bool) else None
        if m is None:
            refuse("invalid_after", "after", f"{str(item)[:40]!r} is not ID, ID:ok or ID:any.")
            continue
        pk, cond = int(m.group("id")), m.group("cond") or "ok"
        if wanted.setdefault(pk, cond) != cond:  # 12 and 12:any: the last one silently won (brk40)
            refuse(
                "invalid_after",
                "after",
                f"Workload {pk} is named twice ({pk}:{wanted[pk]} and {pk}:{cond}): name it once.",
            )
    if wanted:
        found = {
            w.pk: w
            for w in Workload.objects.filter(pk__in=list(wanted))
            .select_related("owner")
            .only("id", "owner__username", "state")
        }
        for pk, cond in sorted(wanted.items()):
            w = found.get(pk)
            if w is None:
                refuse("invalid_after", "after", f"No workload {pk} to wait for.")
            elif not (w.owner_id == getattr(owner, "pk", None) or workload_admin(owner)):
                # everyone sees the queue: "no workload 1 of yours" read as if #1 did not exist (try40)
                refuse(
                    "invalid_after",
                    "after",
                    f"Workload {pk} is {w.owner.username}'s: only your own workloads can be waited for.",
                )
            elif cond == "ok" and w.state in (Workload.State.FAILED, Workload.State.CANCELED):
                refuse(
                    "dependency_failed",
                    "after",
                    f"Workload {pk} has already {w.state}; {pk}:ok (what {pk} alone means) can never be met: "
                    f"write {pk}:any to start after it whatever its end.",
                )
            else:
                out.after.append((pk, cond))
    return out
