"""Offline wheels of the agent's dependencies, repackaged from this test environment's installs.

The install test runs the real install script, whose ``pip install`` must find the agent's pinned
dependencies without a package index: each installed distribution (and what it requires) is
zipped back into a wheel with its original tag and a fresh RECORD, into a ``--find-links`` folder.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(requirements_file: Path) -> list[str]:
    names = []
    for line in requirements_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.append(re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0])
    return names


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def repackage(dist: metadata.Distribution, dest: Path) -> Path:
    """Zip the installed ``dist`` back into a wheel in ``dest``; returns its path."""
    wheel_meta = dist.read_text("WHEEL") or "Tag: py3-none-any\n"
    tags = [line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:")]
    tag = tags[0] if tags else "py3-none-any"
    name = re.sub(r"[-.]+", "_", dist.metadata["Name"])
    version = dist.version
    path = dest / f"{name}-{version}-{tag}.whl"
    if path.exists():
        return path
    base = Path(str(dist.locate_file("")))
    dist_info = None
    entries: list[tuple[str, bytes]] = []
    for file in dist.files or []:
        rel = file.as_posix()
        if rel.startswith("..") or "__pycache__" in rel or rel.endswith((".pyc", "/RECORD", "INSTALLER", "REQUESTED")):
            continue
        if rel.endswith("direct_url.json"):
            continue
        if ".dist-info/" in rel:
            dist_info = rel.split("/", 1)[0]
        entries.append((rel, (base / rel).read_bytes()))
    assert dist_info is not None, f"no dist-info for {dist.metadata['Name']}"
    record = "".join(f"{rel},{_record_hash(data)},{len(data)}\n" for rel, data in entries) + f"{dist_info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for rel, data in entries:
            archive.writestr(rel, data)
        archive.writestr(f"{dist_info}/RECORD", record)
    return path


def build_wheelhouse(dest: Path) -> Path:
    """Wheels of ``agent/requirements.txt`` and everything they require, into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    todo = _requirement_names(REPO / "agent" / "requirements.txt")
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        key = _canonical(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        repackage(dist, dest)
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            todo.append(re.split(r"[=<>!~;\[ (]", requirement.strip(), maxsplit=1)[0])
    return dest
