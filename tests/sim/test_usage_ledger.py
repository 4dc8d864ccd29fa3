"""The usage ledger (``scheduler.policy.usage.UsageLedger``): the scenario engine's usage records,
whose windowed usage the incremental policy reads kept by difference instead of a walk over every
record per pass. ``windowed_usage`` over the list is the oracle: equal at every query, whatever
was appended or changed in between (tests/sim/test_engine_views.py compares the engine's passes)."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

from scheduler.policy.types import UsageRecord
from scheduler.policy.usage import UsageLedger, windowed_usage

BUDGETS = ("a", "b", "c")


def _record(rnd: random.Random, now: int, window: int) -> UsageRecord:
    """An interval or a lump around ``now``: mostly closed before it (as the engine charges),
    some across the window's start, some empty, reversed, negative or in the future."""
    b = rnd.choice(BUDGETS)
    end = now - rnd.choice([0, 0, 0, 1, rnd.randrange(2 * window + 2), -rnd.randrange(window + 1)])
    if rnd.random() < 0.3:
        return UsageRecord(b, end, end, None, rnd.choice([0, 1, 3600, -50, rnd.randrange(10**6)]))
    start = end - rnd.choice([0, 1, rnd.randrange(window + 1), window + rnd.randrange(window + 1), -5])
    return UsageRecord(b, start, end, gpus=rnd.choice([0, 1, 1, 2, 8, -1]))


def _mutate(rnd: random.Random, ledger: UsageLedger, now: int, window: int) -> None:
    """A change of the list the book does not follow (it must then answer plainly, or rebuild)."""
    kind = rnd.choice(["insert", "pop", "remove", "setitem", "delitem", "sort", "reverse", "imul", "clear"])
    if kind == "insert":
        ledger.insert(rnd.randrange(len(ledger) + 1), _record(rnd, now, window))
    elif kind == "clear":
        ledger.clear()
    elif not ledger:
        return
    elif kind == "pop":
        ledger.pop(rnd.randrange(len(ledger)))
    elif kind == "remove":
        ledger.remove(rnd.choice(ledger))
    elif kind == "setitem":
        ledger[rnd.randrange(len(ledger))] = _record(rnd, now, window)
    elif kind == "delitem":
        del ledger[rnd.randrange(len(ledger)) :]
    elif kind == "sort":
        ledger.sort(key=lambda r: r.end)
    elif kind == "reverse":
        ledger.reverse()
    else:
        ledger *= 1


@pytest.mark.parametrize("seed", range(60))
def test_the_ledger_answers_the_windowed_usage_of_its_records_at_every_query(seed: int) -> None:
    rnd = random.Random(seed)
    window = rnd.choice([7 * 86400, 3 * 3600, 100])
    now = rnd.randrange(10**6)
    ledger = UsageLedger(window, [_record(rnd, now, window) for _ in range(rnd.randrange(4))])
    for step in range(300):
        op = rnd.random()
        if op < 0.4:
            ledger.append(_record(rnd, now, window))
        elif op < 0.5:
            ledger.extend(_record(rnd, now, window) for _ in range(rnd.randrange(3)))
        elif op < 0.55:
            ledger += [_record(rnd, now, window)]
        elif op < 0.6:
            _mutate(rnd, ledger, now, window)
        elif op < 0.63:
            ledger = copy.deepcopy(ledger) if rnd.random() < 0.5 else pickle.loads(pickle.dumps(ledger))  # noqa: S301
        assert isinstance(ledger, UsageLedger)
        now += rnd.choice([0, 0, 1, rnd.randrange(window // 3 + 1), window, -rnd.randrange(window + 1)])
        at_window = window if rnd.random() < 0.95 else rnd.choice([window // 2, window * 2])
        plain = windowed_usage(list(ledger), (), now, at_window)
        assert _nonzero(ledger.windowed(now, at_window)) == _nonzero(plain), f"seed {seed}, step {step}, now {now}"


def _nonzero(usage: dict[str, int]) -> dict[str, int]:
    """The budgets whose usage is not 0 (a sum of negative and positive records may be 0: the
    plain walk keeps the budget, the book does not; the policy's roll-up skips it either way)."""
    return {b: v for b, v in usage.items() if v}
