"""Storage mounts: the admin's per-cluster catalog and who may use which (docs/jobs.md "Mounts").

Host paths are set by admins only; a workload names mounts, never paths. A ``{user}`` host path
(access ``home``) expands to the submitting user's name, which must be a plain POSIX-style name
(:data:`USER_RE`): with no ``/`` and no leading ``.`` the expansion cannot leave its directory.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from typing import Any

USER_RE = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\Z")
"""A user name that may be put into a ``{user}`` path: no slash, no leading dot, at most 64."""

NAME_RE = re.compile(r"\A[A-Za-z0-9_-]{1,64}\Z")
MAX_MOUNTS = 16


def path_problem(path: str, *, allow_user: bool) -> str | None:
    """Why ``path`` is no catalog path (absolute, normalised, no ``..``, no NUL), or None."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        return "an absolute path without NUL"
    if ":" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
        # docker binds are "host:container:mode": a colon (or a line break) failed every start (brk30)
        return "no ':' and no control characters (a docker bind is host:container:mode)"
    parts = path.split("/")
    if any(p in ("..", ".") for p in parts):
        return "no '.' or '..' components"
    if posixpath.normpath(path) != path.rstrip("/") and path != "/":
        return "a normalised path (no '//', no trailing '/')"
    if "{" in path.replace("{user}", "") or "}" in path.replace("{user}", ""):
        return "no braces other than {user}"
    if "{user}" in path and not allow_user:
        return "{user} is allowed only in the host path"
    return None


SYSTEM_DIRS = ("/proc", "/sys", "/dev", "/etc", "/run", "/var/run", "/usr", "/bin", "/sbin", "/lib*", "/boot")
"""A container's own system directories: no catalog mount may sit at or under one (docs/jobs.md)."""

_SYSTEM_RE = re.compile(r"\A/(proc|sys|dev|etc|run|var/run|usr|bin|sbin|lib(32|64|x32)?|boot)(/|\Z)")


def container_path_problem(path: str) -> str | None:
    """Why ``path`` is no catalog container path, or None: :func:`path_problem`, not ``/`` (docker:
    "destination can't be '/'") and not at or under one of :data:`SYSTEM_DIRS` (brk30: ``/proc``,
    ``/dev``, ``/etc/passwd`` were stored, a bind over them breaks or subverts the container)."""
    problem = path_problem(path, allow_user=False)
    if problem:
        return problem
    if path == "/":
        return "the container's root cannot be a mount point"
    if _SYSTEM_RE.match(path):
        return f"{path} is at or under a system directory of the container ({', '.join(SYSTEM_DIRS)})"
    return None


def resolve(owner: Any, cluster: Any, budget: Any, names: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """The mounts ``names`` of ``cluster``'s catalog as ``owner`` may use them with ``budget``.

    Returns (resolved mounts, problems); a problem is a sentence naming the mount. An unknown
    mount, one of a budget the owner's workload is not under, a ``{user}`` mount for a user
    name that cannot be expanded safely, a repeated name or too many mounts are refused.
    """
    from budgets.services import ancestor_ids, load_tree
    from scheduler.models import Mount

    problems: list[str] = []
    if isinstance(names, str) or not isinstance(names, Sequence):
        return [], ["mounts is a list of mount names"]
    if len(names) > MAX_MOUNTS:
        return [], [f"at most {MAX_MOUNTS} mounts"]
    from scheduler.services import json_kind

    not_names = [n for n in names if not isinstance(n, str)]
    if not_names:
        return [], [f"mounts: each entry is a mount name, not {json_kind(not_names[0])}"]
    bad = [n for n in names if not NAME_RE.match(n)]
    if bad:
        return [], [f"{bad[0][:64]!r} is not a mount name (1-64 letters, digits, - or _)"]
    if len(set(names)) != len(names):
        return [], ["a mount is named twice"]
    if not names:
        return [], []
    catalog = {
        m.name: m for m in Mount.objects.filter(cluster=cluster, name__in=list(names)).prefetch_related("budgets")
    }
    tree = load_tree()
    out: list[dict[str, Any]] = []
    paths: set[str] = set()
    for name in names:
        m = catalog.get(name)
        if m is None:
            problems.append(f"No mount {name!r} on cluster {cluster.name}.")
            continue
        host_path = m.host_path
        if m.access == Mount.Access.BUDGETS:
            allowed = {b.pk for b in m.budgets.all()}
            chain = set(ancestor_ids(budget, tree)) | {budget.pk}
            if not (getattr(owner, "is_superuser", False) or allowed & chain):
                problems.append(f"Mount {name!r} is for other budgets' work.")
                continue
        elif m.access == Mount.Access.HOME:
            user = getattr(owner, "username", "")
            if not USER_RE.match(user or ""):
                problems.append(f"Mount {name!r} needs a user name of letters, digits, '_', '.', '-'.")
                continue
            host_path = host_path.replace("{user}", user)
        if path_problem(host_path, allow_user=False) or container_path_problem(m.container_path):
            # defence in depth: a catalog row written around Mount.clean (e.g. by a script)
            problems.append(f"Mount {name!r} is misconfigured (its paths); ask an admin.")
            continue
        if m.container_path in paths or host_path in paths:
            problems.append(f"Mount {name!r} uses a path another of these mounts uses.")
            continue
        paths.update((m.container_path, host_path))
        out.append(
            {"name": m.name, "host_path": host_path, "container_path": m.container_path, "read_only": m.read_only}
        )
    return out, problems
