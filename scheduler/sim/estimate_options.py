"""The estimate-quality options (docs/estimates.md, "Quality on the Philly trace"), declared once:
``manage.py simulate --estimates`` and ``bench/simulate_philly.py --estimates`` both call
:func:`add_estimate_options` and read the values with :func:`sampling_from`, so the two commands
take the same names in the same unit: every time is a duration (``1800`` seconds, or ``30m``,
``6h``, ``1d``: ``scheduler.trace.parse_duration``), the start a day of the slice, the budget CPU
seconds."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from scheduler.sim.estimate_quality import Sampling
from scheduler.trace import parse_duration


def add_estimate_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--estimates`` and the ``--estimate-*`` options to ``parser`` (one group)."""
    est = parser.add_argument_group("estimate quality (docs/estimates.md): Fairway only, prints JSON")
    est.add_argument(
        "--estimates",
        action="store_true",
        help="sample the first estimated start of allocated jobs still pending after their arrival pass and "
        "report the fraction that started no later than it and the median error (actual − estimate)",
    )
    est.add_argument("--estimate-rate", type=float, default=1.0, help="fraction of jobs sampled (by job id hash)")
    est.add_argument(
        "--estimate-every",
        default="0",
        help="at most one forward simulation per this much simulated time (seconds or 30m, 6h; default 0)",
    )
    est.add_argument("--estimate-budget", type=float, default=2.0, help="CPU seconds per forward simulation")
    est.add_argument(
        "--estimate-from-day", type=float, default=0.0, help="sample jobs arriving from this day of the slice on"
    )
    est.add_argument(
        "--estimate-wall-time-slack",
        default=None,
        help="jobs declare a wall-time limit of run time + this (seconds or 1h): the forward simulation knows ends",
    )


def sampling_from(options: Mapping[str, Any]) -> Sampling:
    """The :class:`Sampling` the parsed options ask for (``vars(args)`` or a Django command's
    options). Raises ``ValueError`` on a bad duration or value."""
    slack = options["estimate_wall_time_slack"]
    sampling = Sampling(
        rate=options["estimate_rate"],
        every_s=parse_duration(str(options["estimate_every"])),
        budget_s=options["estimate_budget"],
        from_day=options["estimate_from_day"],
        wall_time_slack_s=parse_duration(str(slack)) if slack is not None else None,
    )
    sampling.check()
    return sampling
