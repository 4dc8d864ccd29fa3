"""A cheaper ``Col.identity`` for Django's ORM (issue 15); the answers are Django's.

Django 5.2's compiler hashes every selected column of an ordered query (``_order_by_pairs``
builds ``{expression: position}`` for the ``ORDER BY``), and an expression's hash is its
``identity``: ``Expression.identity`` binds the constructor's arguments to
``inspect.signature(__init__)`` for each new ``Col`` (~7 µs a column; a workload has 31, and
every request's ordered queries build new ones: ~0.4 ms of CPU per API request). A ``Col`` has
one constructor, ``Col(alias, target, output_field=None)``, so its identity is the same tuple
built directly: ``(Col, ("alias", …), ("target", …), ("output_field", …))``, each value passed
through ``Expression._identity`` as Django does. Subclasses of ``Col``, and arguments that
do not fit that constructor, take Django's path. ``tests/api/test_web_tier.py`` compares both for
every column of every model.

Installed by :func:`install` from ``scheduler.apps`` (once per process).
"""

from __future__ import annotations

from typing import Any

from django.db.models.expressions import Col, Expression
from django.utils.functional import cached_property

_ARGS = ("alias", "target", "output_field")
django_identity = Expression.__dict__["identity"].func  # the oracle


def col_identity(self: Any) -> tuple[Any, ...]:
    """``Expression.identity`` of a ``Col``, without ``inspect.signature().bind``."""
    args, kwargs = self._constructor_args
    if type(self) is not Col or len(args) > 3 or not set(kwargs) <= set(_ARGS[len(args) :]):
        return django_identity(self)  # type: ignore[no-any-return]
    bound = dict(zip(_ARGS, args, strict=False))
    bound.update(kwargs)
    if "alias" not in bound or "target" not in bound:
        return django_identity(self)  # type: ignore[no-any-return]  # Django raises its TypeError
    identity = Expression._identity  # noqa: SLF001 -- Django's own per-value rule
    return (
        Col,
        ("alias", identity(bound["alias"])),
        ("target", identity(bound["target"])),
        ("output_field", identity(bound.get("output_field"))),
    )


def install() -> None:
    """``Col.identity`` ← :func:`col_identity` (a cached property, as Django's)."""
    if getattr(Col.__dict__.get("identity"), "func", None) is col_identity:
        return
    prop = cached_property(col_identity)
    prop.__set_name__(Col, "identity")
    Col.identity = prop  # type: ignore[method-assign,assignment]
