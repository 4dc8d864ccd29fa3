"""The slow, readable forward simulation (test instrument, never a production path).

:func:`reference_estimates` reads DESIGN.md §3.8 literally: from the snapshot, with no new arrivals
and no running workload ending on its own, a fresh :func:`scheduler.policy.schedule` runs at
**every second** of the horizon (passes at one instant until one decides nothing); simulated agents
confirm starts at once and release a stopped attempt's GPUs ``grace`` seconds after the stop;
preempted work returns to pending (with its original submission) when its GPUs are released; an
attempt whose workload has a wall-time limit (``limits``: workload id → seconds) is stopped when it
has run that long and is not requeued. An array group's ``%N`` cap counts its members holding GPUs
in the simulated state (:func:`scheduler.sim.estimate.group_holding`). Every budget with a cap
(``Snapshot.caps``) is marked capped at each second by the rule (:func:`scheduler.policy.caps.
capped_at`) over the snapshot's cap records, the attempts the simulation released and those still
open (DESIGN.md §3.7). A workload's estimate is the
first second at which a pass starts it, capped by the reservation the first pass (with reasons)
gives it, counted from its victims' release (the reservation's start plus the grace, DESIGN.md
§3.5). No event computation, no kept state, no shortcut:
:func:`scheduler.sim.estimate.estimate_starts` and ``quote`` must give the same answers
(tests/sim/test_estimate_oracle.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from scheduler.policy import Attempt, Decisions, HostState, Snapshot, UsageRecord, Workload, schedule
from scheduler.policy.caps import cap_members, capped_at, with_capped
from scheduler.policy.tree import BudgetTree
from scheduler.sim.estimate import Forward, group_holding, next_order_change, startable


def reference_estimates(
    snap: Snapshot,
    *,
    grace: int,
    horizon: int,
    running: Mapping[str, Workload] | None = None,
    only: Iterable[str] | None = None,
    limits: Mapping[str, int] | None = None,
    requeued: Iterable[str] = (),
) -> dict[str, int]:
    limits = limits or {}
    now = snap.now
    hosts = {h.name: h for h in snap.hosts}
    attempts: dict[str, Attempt] = {}
    for a in snap.attempts:
        if a.stopping and a.release_at is None:
            a = replace(a, release_at=now + grace)
        attempts[a.id] = a
    pending = {w.id: w for w in startable(snap)}
    known = {**(running or {}), **pending}
    members = {k: w.group for k, w in known.items() if w.group is not None and w.group in snap.group_limits}
    wanted = set(pending) if only is None else set(only) & set(pending)
    usage = list(snap.usage)
    cap_records = list(snap.cap_records)
    under_caps = cap_members(snap.caps, snap.budgets)
    nominations = dict(snap.nominations)
    # the snapshot's stopping attempts whose workloads run again on release (est48), then those it stops
    requeue: set[str] = {a.id for a in snap.attempts if a.stopping} & set(requeued)
    started: dict[str, int] = {}
    first: Decisions | None = None

    def release(t: int) -> None:
        for a in [a for a in attempts.values() if a.release_at is not None and a.release_at <= t]:
            del attempts[a.id]
            end = t if a.charged_until is None else min(t, a.charged_until)
            if a.allocated and a.started_at is not None and end > a.started_at:
                usage.append(UsageRecord(a.budget, a.started_at, end, gpus=len(a.gpus)))
                cap_records.append(UsageRecord(a.budget, a.started_at, end, gpus=len(a.gpus)))
            if a.id in requeue and a.workload in known:
                pending[a.workload] = known[a.workload]

    def time_out(t: int) -> None:
        for a in list(attempts.values()):
            limit = limits.get(a.workload)
            began = now if a.started_at is None else a.started_at
            if limit is not None and not a.stopping and began + limit <= t:
                attempts[a.id] = replace(a, stopping=True, release_at=t + grace)

    chain = BudgetTree(snap.budgets).chain
    moved: dict[str, int] = {}  # budget -> the first second its cap was reached or lifted
    capped: frozenset[str] | None = None
    for t in range(now, now + horizon + 1):
        for name, h in list(hosts.items()):  # a scheduled drain due: the host drains (apply_due_drains)
            if h.drain_at is not None and h.drain_at <= t:
                state = HostState.DRAINING if h.state in (HostState.ACTIVE, HostState.CORDONED) else h.state
                hosts[name] = replace(h, state=state, drain_at=None)
        time_out(t)
        release(t)
        was, capped = capped, capped_at(snap.caps, under_caps, cap_records, attempts.values(), t)
        for key in capped ^ was if was is not None else ():
            moved.setdefault(key, t)
        budgets = with_capped(snap.budgets, snap.caps, capped)
        for _ in range(50):
            s = replace(
                snap,
                now=t,
                budgets=budgets,
                hosts=list(hosts.values()),
                attempts=list(attempts.values()),
                pending=list(pending.values()),
                usage=list(usage),
                nominations=dict(nominations),
                group_limits=group_holding(snap, members, attempts.values()),
                with_reasons=first is None,
            )
            dec = schedule(s)
            if first is None:
                first = dec
            for stop in dec.stops:
                a = attempts.get(stop.attempt)
                if a is not None and not a.stopping:
                    attempts[a.id] = replace(a, stopping=True, release_at=t + grace)
                    requeue.add(a.id)
            nominations = {k: v for k, v in dec.nominations.items() if k in pending}
            for st in dec.starts:
                w = pending.pop(st.workload, None)
                if w is None:
                    continue
                nominations.pop(w.id, None)
                aid = f"forward:{w.id}:{t}"
                attempts[aid] = Attempt(
                    aid, w.id, w.budget, st.gpus, st.allocated, w.min_runtime, t, cpus=w.cpus, memory=w.memory
                )
                started.setdefault(w.id, t)
            for name, state in dec.host_states.items():
                hosts[name] = replace(hosts[name], state=state, drain_now=False)
            if grace == 0:
                release(t)
            if not dec.changed:
                break
        if wanted <= started.keys():
            break
    found = {w: t for w, t in started.items() if w in wanted}
    for wid, at in (first.reserved_start if first is not None else {}).items():
        # Not a reservation made before a cap above its budget was reached or lifted (by its
        # latest start): the passes then start its work unfunded or hold it.
        budget = known[wid].budget if wid in known else ""
        if any(moved.get(b, at + grace + 1) <= at + grace for b in chain.get(budget, ())):
            continue
        if wid in wanted and (wid not in found or int(at) + grace < found[wid]):
            found[wid] = int(at) + grace
    return found


def next_event_walk(fw: Forward, end: int) -> int:
    """:meth:`scheduler.sim.estimate.Forward.next_event` read plainly, from ``fw``'s state alone
    (it changes nothing): a walk over every attempt (releases, protection ends, wall-time limits
    of attempts not stopping) and :func:`next_order_change` of a full snapshot, with no load
    book, no kept breakpoints and no kept pair crossings."""
    best: int | float = end
    for a in fw.attempts.values():
        if a.release_at is not None and a.stopping:
            if fw.now < a.release_at < best:
                best = a.release_at
        elif a.allocated and a.started_at is not None:
            t = a.started_at + a.min_runtime
            if fw.now < t < best:
                best = t
    for h in fw.hosts.values():  # a scheduled drain to come
        if h.drain_at is not None and fw.now < h.drain_at < best:
            best = h.drain_at
    for aid, t in fw.ends.items():
        if fw.now < t < best:
            held = fw.attempts.get(aid)
            if held is not None and not held.stopping:
                best = t
    if fw.commitments:
        t2 = next_order_change(fw.snapshot(), fw.tree, order=not fw.quiet, commitments=fw.commitments)
        if t2 < best:
            best = t2
    if fw.caps is not None:  # every second until a cap is reached or lifted, by the rule
        held = fw.caps.plain_at(fw.attempts.values(), fw.now)
        for t in range(fw.now + 1, int(best)):
            if fw.caps.plain_at(fw.attempts.values(), t) != held:
                return t
    return int(best)
