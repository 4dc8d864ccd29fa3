"""brk43: a breaker round on this session's changes (lim42, num42, left41, sec41, brk42)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.models import Workload, WorkloadEvent
from scheduler.services import do_submit_workload

# --- estimate_moved: a move made inside the hour is told once the hour is over -------------------


def _estimates_run(monkeypatch: Any, w: Workload, start: datetime) -> None:
    """One estimate run of ``w``'s cluster whose forward simulation finds ``start`` for ``w``."""
    import scheduler.sim.estimate as sim_estimate
    from scheduler.estimates import store_estimates

    monkeypatch.setattr(
        sim_estimate,
        "forward_found",
        lambda *_a, **_k: sim_estimate.Found({str(w.pk): start.timestamp()}, 1e12, frozenset()),
    )
    store_estimates(w.cluster_id, datetime.now(UTC))


def test_a_move_held_back_by_the_hour_is_told_when_the_hour_is_over(hosts, researcher, submit_kwargs, monkeypatch):
    """brk42 tells a workload's owner of at most one ``estimate_moved`` an hour. A move made inside
    that hour (B -> E, 5 h later, for good: the cluster lost hosts) was dropped, and since the
    estimate no longer moves after it, no later run saw a move: the owner, told B, was never told
    E (docs/jobs.md: a move is judged "from the one last told"). Now the move is told on the first
    run after the hour."""
    w = do_submit_workload(researcher, **submit_kwargs())
    a = datetime(2030, 3, 3, 11, 0, tzinfo=UTC)
    b, e = a + timedelta(hours=3), a + timedelta(hours=8)
    Workload.objects.filter(pk=w.pk).update(estimated_start=a, estimate_told=a)  # given A by a run
    events = WorkloadEvent.objects.filter(workload=w, kind="estimate_moved")

    _estimates_run(monkeypatch, w, b)  # A -> B: told
    assert list(events.values_list("data", flat=True)) == [{"from": a.isoformat(), "to": b.isoformat()}]
    _estimates_run(monkeypatch, w, e)  # B -> E within the hour: held back
    assert events.count() == 1
    _estimates_run(monkeypatch, w, e)  # still E, still within the hour
    assert events.count() == 1

    events.update(at=events.get().at - timedelta(hours=2))  # the hour is over
    _estimates_run(monkeypatch, w, e)  # E again: no move since the last run, but the owner was told B
    assert list(events.order_by("id").values_list("data", flat=True)) == [
        {"from": a.isoformat(), "to": b.isoformat()},
        {"from": b.isoformat(), "to": e.isoformat()},
    ]
    _estimates_run(monkeypatch, w, e)  # told once
    assert events.count() == 2


def test_a_held_back_move_that_went_back_is_not_told(hosts, researcher, submit_kwargs, monkeypatch):
    """The flood brk42 stopped: B -> A -> B inside the hour; once it is over the estimate is B, as
    told: nothing to tell (nor after the workload stops being pending)."""
    w = do_submit_workload(researcher, **submit_kwargs())
    a = datetime(2030, 3, 3, 11, 0, tzinfo=UTC)
    b = a + timedelta(hours=3)
    Workload.objects.filter(pk=w.pk).update(estimated_start=a, estimate_told=a)  # given A by a run
    events = WorkloadEvent.objects.filter(workload=w, kind="estimate_moved")
    _estimates_run(monkeypatch, w, b)
    for start in (a, b, a, b):
        _estimates_run(monkeypatch, w, start)
    assert events.count() == 1
    events.update(at=events.get().at - timedelta(hours=2))
    _estimates_run(monkeypatch, w, b + timedelta(minutes=30))
    assert events.count() == 1


@pytest.fixture(autouse=True)
def _fresh_cache() -> Any:
    from django.core.cache import cache

    cache.clear()
    yield
    cache.clear()


# --- /readyz and /metrics kept answers: a request that waits for a computation shares it ----------


def test_a_request_waiting_for_a_slow_computation_shares_its_answer(monkeypatch):
    """sec41 keeps /readyz's checks and /metrics' exposition ``seconds()`` from the computation's
    start, and a request that comes while one runs waits for it, "and shares its answer". It did
    not when the computation took longer than the interval (a slow database: the very time a
    flood hurts): the waiter found the answer already stale and computed again, so the requests
    went one after another through the lock, each running every query (N x the check's time, where
    they ran side by side before)."""
    import threading
    import time

    from scheduler import health

    now = [1000.0]
    monkeypatch.setattr(health, "clock", lambda: now[0])
    kept = health.Recent(lambda: 1.0)
    started, go = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow() -> str:
        calls.append("slow")
        started.set()
        go.wait(5)
        now[0] += 3.0  # the checks took 3 s, longer than the 1 s they are kept
        return "first"

    answers: list[str] = []
    first = threading.Thread(target=lambda: answers.append(kept.get("k", slow)))
    first.start()
    assert started.wait(5)
    second = threading.Thread(target=lambda: answers.append(kept.get("k", lambda: calls.append("again") or "again")))
    second.start()
    time.sleep(0.2)  # the second request is waiting for the first's computation
    go.set()
    first.join(5)
    second.join(5)
    assert calls == ["slow"] and answers == ["first", "first"]
    now[0] += 1.5  # a request after the answer was kept its interval: computed afresh
    assert kept.get("k", lambda: "fresh") == "fresh"


# --- sec41's GID_MIN: read as useradd and groupadd read it ---------------------------------------


def test_gid_min_is_read_as_shadow_reads_login_defs(tmp_path):
    """shadow's ``def_load`` stores every line's value in turn, so the last ``GID_MIN`` is the one
    useradd and groupadd use, and it drops the double quotes around a value. The agent took the
    first line (``GID_MIN 500`` then ``GID_MIN 1000``: groups 500..999, which the host's tools
    treat as system groups, passed without the root consents), and a quoted value fell back to
    1000 (``"2000"``: 1000..1999 passed)."""
    from agent.runtime.isolation import first_normal_gid

    defs = tmp_path / "login.defs"
    defs.write_text("GID_MIN 500\nSYS_GID_MAX 999\nGID_MIN 1000\n")
    assert first_normal_gid(defs) == 1000
    defs.write_text('GID_MIN\t"2000"\n')
    assert first_normal_gid(defs) == 2000
    defs.write_text("GID_MIN 500\nGID_MIN nonsense\n")  # the last one, invalid: the default, not 500
    assert first_normal_gid(defs) == 1000
    defs.write_text("#GID_MIN 100\nGID_MIN 0x7d0\n")
    assert first_normal_gid(defs) == 2000
