"""Issue 12 point 3: the policy's modules stay readable. No module of ``scheduler/policy/`` over
420 lines (the oracle ``reference.py`` aside), no function over 60 lines (the oracle's too), no
block nested deeper than 4 in a function."""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler.policy

POLICY = Path(scheduler.policy.__file__).parent
MODULE_LINES = 420
FUNCTION_LINES = 60
NESTING = 4
BLOCKS = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try, ast.Match)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _depth(node: ast.AST, d: int = 0) -> int:
    """The deepest block nesting in ``node``'s own body (nested functions are measured on their own)."""
    deepest = d
    for child in ast.iter_child_nodes(node):
        if isinstance(child, SCOPES):
            continue
        deepest = max(deepest, _depth(child, d + isinstance(child, BLOCKS)))
    return deepest


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    out = []
    for path in sorted(POLICY.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((f"{path.name}:{node.lineno} {node.name}", node))
    return out


def test_no_policy_module_over_420_lines() -> None:
    long = {
        p.name: n
        for p in POLICY.glob("*.py")
        if p.name != "reference.py" and (n := len(p.read_text().splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_policy_function_over_60_lines() -> None:
    long = {name: n for name, f in _functions() if (n := (f.end_lineno or f.lineno) - f.lineno + 1) > FUNCTION_LINES}
    assert long == {}


def test_no_policy_function_nested_deeper_than_4() -> None:
    deep = {name: d for name, f in _functions() if (d := _depth(f)) > NESTING}
    assert deep == {}
