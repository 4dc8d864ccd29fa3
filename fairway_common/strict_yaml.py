"""The one reader of YAML that people write by hand: workload specs (the web form, ``fairway submit
-f``), scenario files, the agent's config file (also as ``agent join`` reads an existing one) and,
as a node tree (:func:`compose`), the simulator's budget files and the admin's what-if shares. It
lives in ``fairway_common``, which the agent's and the CLI's wheels both ship (each installs
alone); the server imports it from here.

``yaml.SafeLoader`` refusing what a hand-written document never needs and what silently changes it:

- a merge key (``<<``, YAML 1.1's): it lays a mapping's keys under those written, a key given
  twice that no reader sees (``gpu_count: 4`` then ``<<: {gpu_count: 8}``);
- an alias (``*name``): a few lines of nested aliases expand to gigabytes ("billion laughs"; a
  10-line scenario ``description`` ran ``manage.py scenario`` out of memory, a spec the CLI);
- a key given twice in one mapping: YAML keeps the last value, so a spec edited by adding a line
  (``gpu_count`` twice) ran with the second and a scenario step's first ``expect`` was never checked;
- with ``max_int``, an integer beyond it, judged on its text before Python converts it (a
  100,000-digit number costs seconds to parse);
- an integer written in another base than ten: YAML 1.1 reads ``010`` as octal 8, ``1:30`` as 90
  (base 60), ``0x1F`` as 31, so ``env: {SEED: 010}`` ran with ``SEED=8`` and ``min_runtime: 1:30``
  as 90 s (brk30), and the agent's ``cpus: 010`` ran with 8 CPUs (brk37). Decimal with ``_``
  separators, a sign or a single ``0`` stay numbers; a float in base 60 (``1:30.5``) is refused too.

It reads ``yes``, ``no``, ``on`` and ``off`` as text, as YAML 1.2 does, not as YAML 1.1's booleans
(``host_name: no`` named the agent's host "False", brk37); ``true`` and ``false`` stay booleans.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

MAX_FILE_CHARS = 16 * 1024 * 1024
"""The longest hand-written YAML file read whole (a scenario file, a simulator's budget file, a
what-if's shares): ``manage.py scenario /dev/zero``, or a large file named by mistake, read until
the machine ran out of memory (brk51). The largest scenario of the repository is a few KiB."""


class TooLong(ValueError):
    """A file past its bound (:func:`read_text`); ``str()`` says it in words."""


def read_text(path: Any, most: int | None = None) -> str:
    """The UTF-8 text of file ``path``, at most ``most`` characters (:data:`MAX_FILE_CHARS`), read
    no further: raises :class:`TooLong` past it, ``OSError`` or ``UnicodeDecodeError`` as ``open``."""
    most = MAX_FILE_CHARS if most is None else most
    with open(path, encoding="utf-8") as fh:
        text = fh.read(most + 1)
    if len(text) > most:
        raise TooLong(f"longer than {most:,} characters")
    return text


INT_DIGITS = 40
"""More digits than any integer a document needs in any base YAML 1.1 writes."""

DECIMAL = re.compile(r"[-+]?(0|[1-9](_?[0-9])*)")
"""An integer's text YAML 1.1 reads in base ten (its other forms: ``0o``/leading ``0``, ``0x``, ``0b``, ``:``),
each ``_`` between two digits as Python writes it (YAML 1.1 also reads ``1_`` as 1 and ``1__0`` as 10)."""

_LOOSE_DECIMAL = re.compile(r"[-+]?[1-9][0-9_]*")
"""Base ten with an underscore that separates no two digits: refused as a slip."""

BOOLEAN = re.compile(r"true|True|TRUE|false|False|FALSE")
"""A boolean's text YAML 1.2 reads as one too (YAML 1.1 adds ``yes``/``no``/``on``/``off``: text here)."""


class Refused(yaml.YAMLError):
    """A document the strict reader refuses. ``kind``: ``alias``, ``merge``, ``key_twice``, ``number`` or
    ``number_form``; ``line``: 1-based; ``problem``: one sentence, quoting at most 40 characters of a key."""

    def __init__(self, kind: str, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.kind, self.line, self.problem = kind, line, problem


class StrictLoader(yaml.SafeLoader):
    """The loader; a subclass sets ``max_int`` to bound integers."""

    max_int: int | None = None

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            line = self.peek_event().start_mark.line + 1
            raise Refused("alias", line, "aliases (*name) are not allowed: write the value out")
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        _refuse_a_key_twice(node)
        # Two spellings of one key (``1`` and ``+1``, ``true`` and ``True``): YAML kept the last value
        seen: dict[Any, int] = {}
        for key, _value in node.value:
            if isinstance(key, yaml.ScalarNode):
                line, value = key.start_mark.line + 1, self.construct_object(key)
                if value in seen:
                    problem = f"{key.value[:40]!r} is given twice (also on line {seen[value]})"
                    raise Refused("key_twice", line, problem)
                seen[value] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Any) -> int:
        if not DECIMAL.fullmatch(str(node.value)):
            value = super().construct_yaml_int(node) if len(str(node.value)) <= INT_DIGITS else "?"
            if _LOOSE_DECIMAL.fullmatch(str(node.value)):
                problem = (
                    f"{str(node.value)[:40]!r} has an underscore between no two digits (YAML reads {value}): "
                    "write the number without it, or quote it"
                )
            else:
                problem = (
                    f"{str(node.value)[:40]!r} is {value} in YAML (octal, hex, binary or base 60): "
                    "write it in decimal or quote it"
                )
            raise Refused("number_form", node.start_mark.line + 1, problem)
        if self.max_int is None:
            return super().construct_yaml_int(node)
        too_large = Refused("number", node.start_mark.line + 1, f"a number is larger than {self.max_int}")
        if len(str(node.value).replace("_", "").lstrip("+-")) > INT_DIGITS:
            raise too_large
        value = super().construct_yaml_int(node)
        if abs(value) > self.max_int:
            raise too_large
        return value

    def construct_yaml_float(self, node: Any) -> float:
        if ":" in str(node.value):
            problem = f"{str(node.value)[:40]!r} is a number in base 60 in YAML: write it in decimal or quote it"
            raise Refused("number_form", node.start_mark.line + 1, problem)
        return float(super().construct_yaml_float(node))

    def construct_yaml_bool(self, node: Any) -> bool | str:
        if not BOOLEAN.fullmatch(str(node.value)):
            return str(node.value)
        return bool(super().construct_yaml_bool(node))


MERGE = "tag:yaml.org,2002:merge"


def _refuse_a_key_twice(node: yaml.MappingNode) -> None:
    seen: dict[Any, int] = {}
    for key, _value in node.value:
        if key.tag == MERGE:  # YAML 1.1's ``<<`` laid its mapping's keys under the ones written: a key twice, silently
            problem = "merge keys (<<) are not allowed: write the keys out (or quote '<<')"
            raise Refused("merge", key.start_mark.line + 1, problem)
        if isinstance(key, yaml.ScalarNode):
            line = key.start_mark.line + 1
            if key.value in seen:
                problem = f"{key.value[:40]!r} is given twice (also on line {seen[key.value]})"
                raise Refused("key_twice", line, problem)
            seen[key.value] = line


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)
StrictLoader.add_constructor("tag:yaml.org,2002:bool", StrictLoader.construct_yaml_bool)


def load(text: str, max_int: int | None = None) -> Any:
    """``text`` read by the strict loader: :class:`Refused` for what it refuses, ``yaml.YAMLError``
    for what is not YAML, ``RecursionError`` for thousands of nested brackets."""
    loader = type("Loader", (StrictLoader,), {"max_int": max_int})
    return yaml.load(text, Loader=loader)  # noqa: S506 -- a SafeLoader subclass


def scalar(node: yaml.ScalarNode, max_int: int | None = None) -> Any:
    """A scalar of :func:`compose`'s tree read as :func:`load` reads it (``5`` an int, ``'5'`` and
    ``١`` text; the same refusals): a node reader's numbers by the rule of the loaded files."""
    loader = type("Loader", (StrictLoader,), {"max_int": max_int})("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def compose(text: str) -> yaml.Node | None:
    """``text``'s node tree (None for an empty document) for a reader that walks the nodes to name
    each value's line (the simulator's budget and shares files): an alias and a key given twice in
    one mapping are refused as :func:`load` refuses them; the scalars are left as text, so their
    reader decides what a number is. Raises :class:`Refused`, ``yaml.YAMLError`` for what is not
    YAML, ``RecursionError`` for thousands of nested brackets."""
    root = yaml.compose(text, Loader=StrictLoader)
    todo = [] if root is None else [root]
    while todo:  # no aliases: a tree, each node seen once
        node = todo.pop()
        if isinstance(node, yaml.MappingNode):
            _refuse_a_key_twice(node)
            todo.extend(n for pair in node.value for n in pair)
        elif isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
    return root


INT_TAG = "tag:yaml.org,2002:int"

ENV_NUMBER_TEXT = (
    "line {line}: an env value YAML reads as a number written otherwise (1_000 is 1000, +1 is 1) "
    "loses its written form: quote it"
)
"""The refusal of :func:`env_number_line`'s value, the web's spec and ``fairway submit -f`` alike (brk48)."""


def env_number_line(text: str) -> int | None:
    """The line of the first value of a workload spec's ``env`` (``NAME: V`` or ``NAME: {value: V}``)
    that YAML reads as an integer whose written form is not its decimal text (``1_000``, ``+1``,
    ``-0``), or None: the value would run as ``"1000"``, its written form lost, where a decimal
    number (``3.10``) is refused for that by the server (brk30), which sees the number only
    (brk48). ``text``: a document :func:`load` read."""
    root = compose(text)
    if not isinstance(root, yaml.MappingNode):
        return None
    for key, env in root.value:
        if not (isinstance(key, yaml.ScalarNode) and key.value == "env" and isinstance(env, yaml.MappingNode)):
            continue
        for _name, value in env.value:
            if isinstance(value, yaml.MappingNode):
                value = next((v for k, v in value.value if isinstance(k, yaml.ScalarNode) and k.value == "value"), None)
            if isinstance(value, yaml.ScalarNode) and value.tag == INT_TAG and str(scalar(value)) != value.value:
                return int(value.start_mark.line) + 1
    return None
