"""words46: drains read "cancelled" (``fairway hosts cancel-drain gpu2``: "… is cancelled", the
clusters page: "scheduled drain cancelled.") where a workload's state is ``canceled``. The
project's spelling is the states' (American, ``canceled``): no text a person reads says
"cancelled" — the templates and every string of the server's and the CLI's code but docstrings
(which are comments; asyncio's ``Task.cancelled()`` is a name, not a string)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fairway_cli", "scheduler", "web", "accounts", "budgets", "config", "fairway_common")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
        else:
            continue
        for stmt in body:  # a module's or class's attribute docstrings too (a string alone on its line)
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                ids.add(id(stmt.value))
    return ids


def _strings_saying(word: str) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            docs = _docstrings(tree)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Constant)
                    and isinstance(node.value, str)
                    and id(node) not in docs
                    and word in node.value.lower()
                ):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    return found


def test_no_string_a_person_reads_says_cancelled():
    assert _strings_saying("cancelled") == []


def test_no_template_says_cancelled():
    said = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "templates").rglob("*.html"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "cancelled" in line.lower()
    ]
    assert said == []


def test_the_guard_sees_a_string_in_code():
    assert _strings_saying("scheduled drain cancel")  # the clusters page's message, say
