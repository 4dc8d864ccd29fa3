"""Budget files of the trace simulator (docs/simulation.md): a YAML share tree plus the VCs of each leaf.

Pure Python (PyYAML only, no Django). Format::

    org:                      # exactly one root
      children:
        research:
          shares: 2           # integer weight among siblings, >= 1 (default 1)
          children:
            vc-6214e9: {}     # a leaf named vc-<VC> takes the trace's VC <VC>
            vision:
              vcs: [11cb48, 6c71a0]   # or list its VCs explicitly
        other:
          children:
            vc-unknown: {}

Every VC of the trace must belong to exactly one leaf. Errors name the file and line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import yaml

from budgets.rules import budget_name_problem
from fairway_common import strict_yaml
from scheduler.policy import Budget
from scheduler.scenarios.spec import MAX_INT, int_problem

NODE_KEYS = frozenset({"shares", "children", "vcs"})


class BudgetFileError(ValueError):
    """A budget file that cannot be used. ``str()`` names file, line (1-based) and problem."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        where = path if line is None else f"{path}, line {line}"
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class BudgetPlan:
    """The share tree as policy budgets and the leaf each VC's jobs are submitted to."""

    budgets: tuple[Budget, ...]
    leaf_of_vc: dict[str, str]
    source: str

    @property
    def leaves(self) -> list[str]:
        parents = {b.parent for b in self.budgets}
        return sorted(b.key for b in self.budgets if b.key not in parents)


def default_plan(vcs: Iterable[str]) -> BudgetPlan:
    """One project ``vc-<VC>`` per VC under root ``org``, equal shares (the issue's default)."""
    budgets = [Budget("org", "org", None, 1)]
    leaf_of_vc = {}
    for vc in sorted(set(vcs)):
        key = f"org/vc-{vc}"
        budgets.append(Budget(key, f"vc-{vc}", "org", 1))
        leaf_of_vc[vc] = key
    return BudgetPlan(tuple(budgets), leaf_of_vc, "default: one project per VC, equal shares")


def load_plan(path: str, vcs: dict[str, int]) -> BudgetPlan:
    """Read a budget file; ``vcs`` maps each VC of the trace to the line of its first job.

    Raises :class:`BudgetFileError` on unreadable YAML, a bad key or value (with its line), a VC of
    the trace without a leaf, or a VC claimed by two leaves.
    """
    try:
        text = strict_yaml.read_text(path)  # bounded: /dev/zero read until memory ran out (brk51)
    except strict_yaml.TooLong as exc:
        raise BudgetFileError(path, None, f"{exc}: not a budget file") from None
    except OSError as exc:
        raise BudgetFileError(path, None, f"cannot read the file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BudgetFileError(path, None, f"not UTF-8 text ({exc.reason})") from None
    return parse_plan(text, vcs, name=path)


def parse_plan(text: str, vcs: dict[str, int], *, name: str = "<budgets>") -> BudgetPlan:
    """Parse budget-file text (see :func:`load_plan`)."""
    try:
        root = strict_yaml.compose(text)  # no aliases, no key twice (the reader of hand-written YAML)
    except strict_yaml.Refused as exc:
        raise BudgetFileError(name, exc.line, exc.problem) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise BudgetFileError(name, line, f"not valid YAML: {getattr(exc, 'problem', exc)}") from None
    except RecursionError:  # thousands of nested "[": the composer recurses per level
        raise BudgetFileError(name, None, "not valid YAML: nested too deeply") from None
    if root is None:
        raise BudgetFileError(name, 1, "the file is empty (expected one root budget)")
    if not isinstance(root, yaml.MappingNode) or len(root.value) != 1:
        raise BudgetFileError(name, _line(root), "the top level must be a mapping with exactly one root budget")
    budgets: list[Budget] = []
    leaf_of_vc: dict[str, str] = {}
    claimed_at: dict[str, int] = {}

    def walk(key_node: yaml.Node, node: yaml.Node, parent: str | None) -> None:
        bname = _scalar(name, key_node, "budget name")
        if problem := budget_name_problem(bname):  # the service's rule (brk46b: NUL, U+200B were taken)
            raise BudgetFileError(name, _line(key_node), f"bad budget name {bname[:120]!r}: {problem}")
        key = bname if parent is None else f"{parent}/{bname}"
        shares, children, vc_list = 1, None, None
        if isinstance(node, yaml.ScalarNode) and node.value in ("", "~", "null"):
            pass  # "name:" with nothing after it: a leaf with defaults
        elif not isinstance(node, yaml.MappingNode):
            raise BudgetFileError(name, _line(node), f"budget {key!r}: expected a mapping of shares, children, vcs")
        else:
            for k_node, v_node in node.value:
                k = _scalar(name, k_node, "key")
                if k not in NODE_KEYS:
                    raise BudgetFileError(
                        name, _line(k_node), f"budget {key!r}: unknown key {k!r} (use shares, children, vcs)"
                    )
                if k == "shares":
                    shares = read_shares(name, key, v_node)
                elif k == "children":
                    if not isinstance(v_node, yaml.MappingNode) or not v_node.value:
                        raise BudgetFileError(
                            name, _line(v_node), f"budget {key!r}: children must be a non-empty mapping"
                        )
                    children = v_node
                else:
                    if not isinstance(v_node, yaml.SequenceNode):
                        raise BudgetFileError(name, _line(v_node), f"budget {key!r}: vcs must be a list")
                    vc_list = [(_scalar(name, n, "vc"), _line(n)) for n in v_node.value]
        if children is not None and vc_list is not None:
            raise BudgetFileError(name, _line(key_node), f"budget {key!r}: only leaves take vcs")
        if any(b.key == key for b in budgets):
            raise BudgetFileError(name, _line(key_node), f"budget {key!r} appears twice")
        budgets.append(Budget(key, bname, parent, shares))
        if children is not None:
            for ck, cv in children.value:
                walk(ck, cv, key)
            return
        if vc_list is None:
            vc_list = [(bname[3:], _line(key_node))] if bname.startswith("vc-") and len(bname) > 3 else []
        for vc, line in vc_list:
            if vc in leaf_of_vc:
                raise BudgetFileError(
                    name, line, f"VC {vc!r} belongs to {leaf_of_vc[vc]!r} (line {claimed_at[vc]}) and {key!r}"
                )
            leaf_of_vc[vc] = key
            claimed_at[vc] = line

    k_node, v_node = root.value[0]
    walk(k_node, v_node, None)
    missing = sorted(vc for vc in vcs if vc not in leaf_of_vc)
    if missing:
        vc = missing[0]
        more = f" (and {len(missing) - 1} more VCs)" if len(missing) > 1 else ""
        raise BudgetFileError(
            name, None, f"VC {vc!r} of the trace (first job on trace line {vcs[vc]}) has no budget{more}"
        )
    return BudgetPlan(tuple(budgets), leaf_of_vc, name)


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def read_shares(name: str, key: str, node: yaml.Node) -> int:
    """A budget's ``shares`` in a budget file or a what-if's shares file (``scheduler.sim.whatif``)
    by a scenario file's rule and bound (``spec.int_problem``, the value read as
    ``strict_yaml.load`` reads it: ``int()`` took ``١`` as 1 and any number of digits)."""
    if not isinstance(node, yaml.ScalarNode):  # a list or mapping: its str() was "[ScalarNode(...)]"
        kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
        raise BudgetFileError(name, _line(node), f"budget {key!r}: shares must be one whole number, not {kind}")
    try:
        value = strict_yaml.scalar(node, max_int=MAX_INT)
    except strict_yaml.Refused as exc:
        raise BudgetFileError(name, _line(node), f"budget {key!r}: shares: {exc.problem}") from None
    if problem := int_problem(value, 1):
        raise BudgetFileError(name, _line(node), f"budget {key!r}: shares {problem}")
    return int(value)


def _scalar(name: str, node: yaml.Node, what: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise BudgetFileError(name, _line(node), f"expected a plain value for {what}")
    return str(node.value).strip()
