"""rules48: what a submission says at once of its budget (``held``, ``budget_capped``, unfunded) is
the policy's queue building, stated once (``scheduler.policy.queues.budget_verdict``): the verdict
the submission gives from what it knows (a hold; a cap of 0 GPU-hours is reached whatever the usage;
a cap above 0 may or may not be) equals what a pass's :class:`QueueBuilder` gives over the same
tree, with no usage and with every cap reached; where it gives none, some usage changes the pass's."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy.caps import cap_members, capped_at, with_capped
from scheduler.policy.queues import QueueBuilder, Verdict, budget_verdict, group, submission_verdict
from scheduler.policy.tree import BudgetTree
from scheduler.policy.types import Budget, Cap, OnCap, PendingReason, Workload

Link = tuple[bool, Decimal | None, OnCap]
"""One budget of a chain, root first: (hold, cap GPU-hours or None, on_cap)."""

links = st.tuples(
    st.booleans(),
    st.sampled_from([None, None, Decimal(0), Decimal("0.5"), Decimal(5)]),
    st.sampled_from(list(OnCap)),
)


def _tree(chain: list[Link], reached: str) -> tuple[BudgetTree, dict[str, str]]:
    """The chain as a tree (``b0`` the root, the last its leaf) whose caps are judged by the cap
    rule (``caps.capped_at``) with no usage (``reached="none"``) or all reached (``"all"``);
    the keys' paths."""
    budgets = [
        Budget(f"b{i}", f"b{i}", f"b{i - 1}" if i else None, hold=hold, on_cap=on_cap)
        for i, (hold, _cap, on_cap) in enumerate(chain)
    ]
    caps = [Cap(f"b{i}", int(cap * 3600), 7 * 86400) for i, (_hold, cap, _on) in enumerate(chain) if cap is not None]
    capped = (
        capped_at(caps, cap_members(caps, budgets), [], [], 10**6)
        if reached == "none"
        else frozenset(c.budget for c in caps)
    )
    tree = BudgetTree(with_capped(budgets, caps, capped))
    return tree, {k: tree.path_name(k) for k in tree.budgets}


def _pass(chain: list[Link], allocated: bool, reached: str) -> Verdict:
    """What a pass's queue building does with one workload submitted to the chain's leaf."""
    tree, paths = _tree(chain, reached)
    leaf = f"b{len(chain) - 1}"
    w = Workload("w", leaf, 1, "A100", 3600 if allocated else 0, 0, 1)
    said: dict[str, tuple[PendingReason, dict[str, object]]] = {}
    qb = QueueBuilder(
        tree, lambda *_: False, lambda w, r, d: said.__setitem__(w.id, (r, d)), lambda _w: False, with_reasons=True
    )
    alloc, unalloc = qb.build(group([w]))
    if "w" in said:
        reason, detail = said["w"]
        if reason == PendingReason.HELD:
            return Verdict("held")
        assert reason == PendingReason.BUDGET_CAPPED
        return Verdict("budget_capped", str(detail["budget"]))
    if "w" in qb.unfunded:
        assert [x.id for x in unalloc[leaf]] == ["w"]
        capper = tree.capped_by(leaf)
        assert capper is not None
        return Verdict("unfunded", paths[capper.key])
    assert [x.id for x in (alloc if allocated else unalloc)[leaf]] == ["w"]
    return Verdict("queued")


def _submitted(chain: list[Link], allocated: bool) -> Verdict | None:
    n = len(chain)
    _tree_, paths = _tree(chain, "none")
    nearest_first = [(paths[f"b{i}"], *chain[i]) for i in reversed(range(n))]
    return submission_verdict(nearest_first, allocated=allocated)


@settings(max_examples=400, deadline=None)
@given(st.lists(links, min_size=1, max_size=5), st.booleans())
def test_the_submissions_verdict_is_the_passs(chain: list[Link], allocated: bool) -> None:
    said = _submitted(chain, allocated)
    no_usage, all_reached = _pass(chain, allocated, "none"), _pass(chain, allocated, "all")
    if said is not None:
        assert said == no_usage == all_reached
    else:  # a cap above 0 decides, which only the tick's usage knows
        assert no_usage != all_reached
        assert allocated and not any(hold for hold, _c, _o in chain)


def test_a_cap_of_0_that_downgrades_says_unfunded() -> None:
    chain: list[Link] = [(False, None, OnCap.HOLD), (False, Decimal(0), OnCap.DOWNGRADE), (False, None, OnCap.HOLD)]
    assert _submitted(chain, True) == Verdict("unfunded", "b1")
    assert _submitted(chain, False) == Verdict("queued")
    assert Verdict("unfunded", "b1").pending() == ("budget_capped", {"budget": "b1", "unfunded": True})


def test_a_nearer_cap_above_0_is_the_ticks_to_judge() -> None:
    chain: list[Link] = [(False, Decimal(0), OnCap.HOLD), (False, Decimal(5), OnCap.DOWNGRADE)]
    assert _submitted(chain, True) is None
    assert _submitted(chain, False) == Verdict("queued")
    assert budget_verdict(True, [("x", None, OnCap.HOLD)], allocated=True) == Verdict("held")
