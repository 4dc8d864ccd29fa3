"""The screen's nominations test kept between the decisions of an allocated dispatch
(``screen_nominees.KeptWaits``, asked by ``tail.Tail``'s proofs; est41).

The plain reading is ``KeptWaits.of`` answering None: the screen runs
:func:`screen_nominees.nominations_wait` at every proof, as before. The kept answer must give
the same decisions in every pass: on random crowded forward simulations (the estimates' path,
where nominations are open at almost every instant) the started instants and the nominations
after every instant equal the plain reading's, and under ``IncrementalScheduler(check=True)``
every kept answer reused is compared with a fresh test. A kept answer not told of the
decisions is caught by that check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import scheduler.policy.screen_nominees as screen_nominees
from scheduler.policy import IncrementalScheduler
from scheduler.sim import estimate as est
from scheduler.sim.simulate import TraceSim
from tests.policy.trace_checks import busy_trace
from tests.sim.test_estimate_oracle import HORIZON, limits_for, small_state

Trail = list[tuple[int, dict[str, tuple[tuple[str, int], ...]]]]


def _run(seed: int, *, check: bool = False) -> tuple[dict[str, int], Trail]:
    """The forward simulation of ``small_state(seed)`` (the estimates' scheduler): its starts and
    the (instant, nominations) after every instant."""
    s, running, grace = small_state(seed)
    end = s.now + 4 * HORIZON
    fw = est.Forward(s, grace, running, limits_for(seed, s, running), end)
    fw.scheduler = IncrementalScheduler(check=check, waiting_nominations=True)
    trail: Trail = []
    fw.tick()
    while fw.now < end and fw.pending:
        trail.append((fw.now, dict(fw.nominations)))
        fw.now = fw.next_event(end)
        fw.tick()
    return fw.started, trail


def _counting(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the answers ``KeptWaits.of`` gives (``asked``) and those it reused (``kept``)."""
    seen = {"asked": 0, "kept": 0}
    real = screen_nominees.KeptWaits.of

    def counted(self, standing, nominees, tree, mark, check):  # type: ignore[no-untyped-def]
        before = self.key
        got = real(self, standing, nominees, tree, mark, check)
        seen["asked"] += got is not None
        seen["kept"] += got is not None and before == self.key
        return got

    monkeypatch.setattr(screen_nominees.KeptWaits, "of", counted)
    return seen


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain reading: no kept answer, the screen tests the nominations at every proof."""
    monkeypatch.setattr(screen_nominees.KeptWaits, "of", lambda *a: None)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_kept_nominations_test_decides_as_the_plain_screen(seed: int) -> None:
    """On random crowded states the forward simulation with the kept test starts every workload
    at the same instant, with the same nominations after every instant, as with the plain
    screen; under check (every reused answer compared with a fresh test) the same."""
    kept = _run(seed)
    with pytest.MonkeyPatch.context() as m:
        _plain(m)
        plain = _run(seed)
    assert kept == plain, f"seed {seed}"
    assert _run(seed, check=True) == plain, f"seed {seed}"


def test_kept_answers_are_reused_in_the_random_states(monkeypatch: pytest.MonkeyPatch) -> None:
    """The property above is not vacuous: over fixed seeds the tail's proofs reuse kept
    answers (both all-wait and not), and the starts stay the plain reading's."""
    seen = _counting(monkeypatch)
    kept = [_run(seed) for seed in range(60)]
    assert seen["kept"] > 0 and seen["asked"] > seen["kept"], seen
    with monkeypatch.context() as m:
        _plain(m)
        assert [_run(seed) for seed in range(60)] == kept


def test_busy_trace_under_check_reuses_kept_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trace simulator's passes (plain screen for the pass, the tail's proofs with nominees):
    under check every reused answer equals a fresh test, and some are reused."""
    seen = _counting(monkeypatch)
    TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler(check=True)).run()
    assert seen["kept"] > 0, seen


def test_a_kept_answer_not_told_of_decisions_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An answer kept for the whole dispatch (its key blind to the decisions and to the open
    nominations) is compared with a fresh test under check and caught (after a decision every
    open nomination waits: the kept "no" is stale)."""
    real = screen_nominees.KeptWaits.of

    def blind(self, standing, nominees, tree, mark, check):  # type: ignore[no-untyped-def]
        if self.key is not None:
            self.key = (mark, len(standing.noms))  # as if nothing had changed since
        return real(self, standing, nominees, tree, mark, check)

    monkeypatch.setattr(screen_nominees.KeptWaits, "of", blind)
    with pytest.raises(AssertionError, match="nominations test kept: False != True"):
        TraceSim(busy_trace(tmp_path, 1), IncrementalScheduler(check=True)).run()
