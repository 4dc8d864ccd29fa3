"""The level tables of the pending reasons (``reason_tables.level_table``, tick50): each walk stops
once its table reaches the model's largest host, and level 1 reads only the hosts with free GPUs,
unallocated work or some budget's unprotected work (``_level1_hosts``); compared under ``check``
with the plain walk over every host (``first_hosts_walk``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scheduler.policy.reason_tables as reason_tables
from scheduler.policy import IncrementalScheduler, schedule
from tests.policy.test_protected_host import _cluster


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 24), st.integers(1, 30), st.sampled_from((0, 2)))
def test_the_cut_tables_are_the_walks(seed: int, n_hosts: int, n_pending: int, reservations: int) -> None:
    """On random clusters (hosts of 2, 4 and 8 GPUs, work of 4 budgets protected or not, some
    leaving, unallocated work) every table is compared with the plain walk under ``check`` (an
    AssertionError if they differ); the checked pass decides as a fresh one."""
    s = replace(_cluster(seed, n_hosts, n_pending), max_reservations=reservations)
    assert IncrementalScheduler(check=True)(s) == schedule(s)


def test_the_random_clusters_stop_early_and_skip_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The clusters above build tables that fill to the largest host before the last host, and
    level-1 host lists shorter than the model's hosts: both cuts are read."""
    real_first, real_level1 = reason_tables._first_hosts, reason_tables._level1_hosts
    full, short = [], []

    def first(ps, model, room_of, hosts=None):  # type: ignore[no-untyped-def]
        table = real_first(ps, model, room_of, hosts)
        every = ps.standing.hosts_by_model[model]
        if table and max(table) == ps.state.largest[model] and table[max(table)] != every[-1].name:
            full.append(model)
        return table

    def level1(ps, model):  # type: ignore[no-untyped-def]
        got = real_level1(ps, model)
        if len(got) < len(ps.standing.hosts_by_model[model]):
            short.append(model)
        return got

    monkeypatch.setattr(reason_tables, "_first_hosts", first)
    monkeypatch.setattr(reason_tables, "_level1_hosts", level1)
    for seed in range(30):
        schedule(_cluster(seed, 12, 20))
    assert len(full) > 20
    assert len(short) > 10


def test_a_level1_list_that_drops_hosts_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """With every host's level-1 room left out the tables differ from the walk on some cluster,
    and ``check`` says so."""
    monkeypatch.setattr(reason_tables, "_level1_hosts", lambda ps, model: [])
    caught = 0
    for seed in range(30):
        s = _cluster(seed, 12, 20)
        try:
            IncrementalScheduler(check=True)(s)
        except AssertionError as e:
            assert "level table of" in str(e)
            caught += 1
    assert caught > 0
