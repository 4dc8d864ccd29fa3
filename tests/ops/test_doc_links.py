"""Every relative link in README.md and docs/*.md names a file that exists and, with a ``#anchor``,
a heading of that file (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs/benchmarks").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _text_outside_code(path: Path, keep_spans: bool = False) -> str:
    """The page's lines outside fenced blocks; inline code spans dropped unless ``keep_spans`` (a
    heading's slug keeps their text, as GitHub's does: "pol41 (branch `pol41`)" is pol41-branch-pol41)."""
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line.lstrip()):
            inside = not inside
            continue
        if not inside:
            lines.append(line if keep_spans else re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def slug(heading: str) -> str:
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _text_outside_code(path, keep_spans=True).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def _links() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for target in LINK.findall(_text_outside_code(page)):
            if not re.match(r"[a-z]+:", target):
                out.append((str(page.relative_to(REPO)), target))
    return out


def test_the_pages_have_relative_links():
    assert len(_links()) > 20


@pytest.mark.parametrize(("page", "target"), _links())
def test_a_relative_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    file = (REPO / page).parent / path if path else REPO / page
    assert file.exists(), f"{page}: {target} names no file"
    if anchor and file.suffix == ".md":
        assert anchor in anchors(file), f"{page}: {target} names no heading of {path or page}"


# `scheduler.bulk.bulk_max`, `budgets.rules.SCHEDULE_AHEAD_MAX`: a name in backticks that starts with
# a module file of the repository (package.module, at least) names something that module defines
# (a function, class, assignment or import) or a submodule. Shorter names (`services.x`, an API
# field as `accounting.requeues`) and logger or permission names (`scheduler.worker`) are not read;
# docs/benchmarks/ are records of their time, not read either.
PACKAGES = ("scheduler", "budgets", "accounts", "web", "config", "fairway_cli", "fairway_common", "agent", "bench")
DOTTED = re.compile(rf"`((?:{'|'.join(PACKAGES)})(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")


def _defined(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return found


def _dotted_names() -> list[tuple[str, str, Path, str]]:
    out = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for name in sorted(set(DOTTED.findall(page.read_text()))):
            parts = name.split(".")
            for k in range(len(parts) - 1, 1, -1):
                module = REPO.joinpath(*parts[:k]).with_suffix(".py")
                if module.exists():
                    out.append((str(page.relative_to(REPO)), name, module, parts[k]))
                    break
    return out


def test_the_pages_name_module_members():
    assert len(_dotted_names()) > 50


def test_a_module_member_named_in_the_docs_exists():
    cache: dict[Path, set[str]] = {}
    missing = [
        f"{page}: `{name}`"
        for page, name, module, member in _dotted_names()
        if member not in cache.setdefault(module, _defined(module)) and not (module.with_suffix("") / member).exists()
    ]
    assert not missing, "names no member of its module: " + ", ".join(missing)


# `PassState.drain_allows`, `tick.ReasonRow.version`: a `Class.member` in backticks, where a class of
# that name is defined in the repository, names something its body defines (a method, a class
# attribute or field, an attribute assigned on self, a name in its __slots__).
CLASS_MEMBER = re.compile(r"`(?:[\w.]+\.)?([A-Z][A-Za-z0-9]+)\.([a-z_]\w*)(?:\(\))?`")
SOURCE_DIRS = ("scheduler", "budgets", "accounts", "web", "config", "fairway_cli", "fairway_common", "agent")


def _class_members() -> dict[str, set[str]]:
    members: dict[str, set[str]] = {}
    for directory in SOURCE_DIRS:
        for path in (REPO / directory).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                found = members.setdefault(node.name, set())
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        found.add(inner.name)
                    elif isinstance(inner, (ast.Assign, ast.AnnAssign)):
                        targets = inner.targets if isinstance(inner, ast.Assign) else [inner.target]
                        found |= {t.id for t in targets if isinstance(t, ast.Name)}
                        found |= {t.attr for t in targets if isinstance(t, ast.Attribute)}
                    elif isinstance(inner, ast.Constant) and isinstance(inner.value, str):
                        found.add(inner.value)  # __slots__, a NamedTuple's fields by name
    return members


def test_a_class_member_named_in_the_docs_exists():
    members = _class_members()
    missing = [
        f"{page.relative_to(REPO)}: `{cls}.{member}`"
        for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
        for cls, member in sorted(set(CLASS_MEMBER.findall(page.read_text())))
        if cls in members and member not in members[cls]
    ]
    assert not missing, "names no member of its class: " + ", ".join(missing)
