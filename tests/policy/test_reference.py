"""``schedule()`` equals the reference scheduler on every pass of random clusters (issue 12).

The reference (scheduler/policy/reference.py) is a slow, plain reading of DESIGN.md §3; the
harness (tests/policy/oracle_harness.py) drives seed-generated clusters through the simulator
and compares starts, stops, nominations, reservations, reserved starts, host state changes and
pending reasons on every pass. Hypothesis draws the seeds; a failure names the seed, which
replays exactly (``run_cluster(seed, quick=True)``; the soak plays the same clusters longer).

A second property compares single crowded passes (several allocated workloads arriving at one
instant on full hosts), half as many. ``make test`` runs ``FAIRWAY_ORACLE_CLUSTERS`` clusters
(default 2,000) and 1,000 crowded passes; bench/oracle_soak.py runs the long profile (≥ 50,000).
Known fast-path faults (none at present; tests/policy/test_reference_cases.py keeps the fixed
ones' minimal cases) are counted, not failed, unless ``FAIRWAY_ORACLE_STRICT=1``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.policy.oracle_harness import Tally, compare_once, run_cluster

pytestmark = pytest.mark.first  # a long file: make test hands it out first (tests/conftest.py)

CLUSTERS = int(os.environ.get("FAIRWAY_ORACLE_CLUSTERS", "2000"))
SEEN = Tally()


@settings(
    max_examples=CLUSTERS,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_schedule_decides_what_the_reference_decides(seed: int) -> None:
    tally = run_cluster(seed, quick=True)
    SEEN.merge(tally)
    if tally.unknown:
        _, snap, diff = tally.unknown[0]
        pytest.fail(
            f"seed {seed}: schedule() and the reference disagree at now={snap.now}:\n" + "\n".join(diff) + f"\n{snap!r}"
        )


@settings(max_examples=max(1, CLUSTERS // 2), deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_schedule_decides_what_the_reference_decides_in_a_crowded_pass(seed: int) -> None:
    """One pass over a busy instant where several allocated workloads arrive together (several
    preemptors, reservations and reasons in one pass: where fault (a) lives)."""
    tally = compare_once(seed)
    SEEN.known.update(tally.known)
    SEEN.grace_passes += tally.grace_passes
    if tally.unknown:
        _, snap, diff = tally.unknown[0]
        pytest.fail(f"crowded seed {seed}: schedule() and the reference disagree:\n" + "\n".join(diff) + f"\n{snap!r}")


def test_enough_clusters_and_passes_were_compared() -> None:
    """The property test above really compared the profile's clusters, with every feature seen."""
    if SEEN.clusters == 0:
        pytest.skip("the property test did not run in this session")
    assert SEEN.clusters >= CLUSTERS * 0.95
    assert SEEN.passes >= SEEN.clusters
    if SEEN.clusters >= 500:
        assert SEEN.preemptions and SEEN.reservations and SEEN.nominated_passes and SEEN.gangs_started
        assert SEEN.grace_passes, "no pass saw an attempt stopping with its release ahead (§3.5)"
        assert SEEN.drain_bites, "no pass's decisions were changed by a drain scheduled for later"
        for reason in (
            "unschedulable",
            "held",
            "budget_capped",
            "awaiting_preemption",
            "protected_work",
            "fair_share",
            "insufficient_gpus",
        ):
            assert SEEN.reasons[reason], f"no pending workload was ever {reason}"
    print(
        f"\noracle: {SEEN.clusters} clusters, {SEEN.passes} passes, {SEEN.starts} starts, "
        f"{SEEN.preemptions} preemptions, {SEEN.reservations} reservations, {SEEN.grace_passes} passes "
        f"inside a grace period; known faults {dict(SEEN.known)}"
    )
