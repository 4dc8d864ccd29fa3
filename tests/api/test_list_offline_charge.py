"""The list's accounting (``account_page``: the page's attempts, then the silent hosts only when
one of them runs) against the two readings it replaced or sits beside: ``with_accounting`` (SQL
aggregates, the offline-host rule as a subquery per row) and ``account_prefetched`` (the detail:
``silent_until`` over loaded links), on random attempts, links and host states (sub38)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.db.models import Prefetch
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from scheduler.accounting import account_page, account_prefetched, accounting, with_accounting
from scheduler.models import GPU, Attempt, AttemptGPU, Host, Workload
from scheduler.services import do_submit_workload

FIELDS = ("acct_last_start", "acct_closed_run", "acct_charged", "acct_open_start", "acct_open_funded")
FIELDS += ("acct_preemptions", "acct_requeue_ends", "acct_start_failures", "acct_open_until")

ENDS = ("preempted", "", "drained", "gpu_fault", "lost", "failed_to_start", "succeeded", "failed")
"""End reasons given in turn to the closed attempts: the requeues' causes and the others (left41)."""

host_state = st.tuples(
    st.sampled_from([Host.State.ACTIVE, Host.State.OFFLINE, Host.State.DRAINING]),
    st.booleans(),  # removed
    st.one_of(st.none(), st.integers(0, 3000)),  # last heartbeat, seconds ago
)
attempt = st.tuples(
    st.one_of(st.none(), st.integers(60, 4000)),  # started, seconds ago
    st.one_of(st.none(), st.integers(0, 50)),  # ended, seconds ago (None: open)
    st.booleans(),  # allocated
    st.booleans(),  # unfunded
    st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=3),  # links: (host, open)
)


@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    states=st.lists(host_state, min_size=3, max_size=3),
    workloads=st.lists(st.lists(attempt, max_size=3), max_size=5),
)
@pytest.mark.django_db
def test_the_list_s_accounting_is_the_aggregates_and_the_detail_s(researcher, submit_kwargs, hosts, states, workloads):
    now = timezone.now().replace(microsecond=0)
    with transaction.atomic():
        submitted = [do_submit_workload(researcher, **submit_kwargs()) for _ in workloads]  # hosts still up
        by_index = [hosts["a100-1"], hosts["a100-2"], hosts["h100-1"]]
        for host, (state, removed, beat) in zip(by_index, states, strict=True):
            Host.objects.filter(pk=host.pk).update(
                state=state,
                removed_at=now if removed else None,
                last_heartbeat=None if beat is None else now - timedelta(seconds=beat),
            )
        free = {i: list(GPU.objects.filter(host=h).order_by("index")) for i, h in enumerate(by_index)}
        ids = []
        for workload, shapes in zip(submitted, workloads, strict=True):
            ids.append(workload.pk)
            for number, (started, ended, allocated, unfunded, links) in enumerate(shapes, start=1):
                row = Attempt.objects.create(
                    workload=workload,
                    number=number,
                    host=by_index[0],
                    allocated=allocated,
                    unfunded=unfunded,
                    placed_at=now - timedelta(hours=2),
                    started_at=None if started is None else now - timedelta(seconds=started),
                    ended_at=None if ended is None else now - timedelta(seconds=ended),
                    charged_gpu_seconds=0 if ended is None else 7 * number,
                    end_reason=ENDS[(number + workload.pk) % len(ENDS)] if ended is not None else "",
                )
                for host_index, link_open in links:
                    pool = free[host_index]
                    if pool:  # at most one open link per GPU: each GPU used once here
                        AttemptGPU.objects.create(attempt=row, gpu=pool.pop(), open=link_open)
        # Only the last attempt of a workload may be open (as the lifecycle keeps them): the others ended.
        for wid in ids:
            last = Attempt.objects.filter(workload_id=wid).order_by("-number").first()
            Attempt.objects.filter(workload_id=wid, ended_at__isnull=True).exclude(pk=getattr(last, "pk", None)).update(
                ended_at=now
            )
        sql = {w.pk: w for w in with_accounting(Workload.objects.filter(pk__in=ids))}
        page = list(Workload.objects.filter(pk__in=ids))
        account_page(page)
        links = Prefetch("gpu_links", AttemptGPU.objects.select_related("gpu__host"))
        attempts = Prefetch("attempts", Attempt.objects.prefetch_related(links))
        detail = [account_prefetched(w) for w in Workload.objects.filter(pk__in=ids).prefetch_related(attempts)]
        for reading in (page, detail):
            for w in reading:
                want = sql[w.pk]
                assert _fields(w) == _fields(want), w.pk
                assert accounting(w, now) == accounting(want, now)
        transaction.set_rollback(True)


def _fields(w: Any) -> list[Any]:
    return [getattr(w, f) for f in FIELDS]
