"""The web tier under load (issue 15): per-request query counts, one thread hop per request,
overload and connection shortage answered 503 + Retry-After, never 500.

Query counts are upper bounds of what the request does today (docs/benchmarks/api_load.md lists
them); a change that adds a query per request, or a query per row, fails here. No timing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from asgiref.sync import SyncToAsync
from channels.testing import HttpCommunicator
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from config.overload import InFlightLimit
from scheduler.models import Workload
from scheduler.services import do_submit_workload

URL = "/api/v1/workloads/"

# Savepoints (SQLite's test transaction) are not counted: the bounds hold on both backends. Each bound
# counts the token's query ("auth 1"), the tree's ("tree 1") and the user's memberships ("memberships 1"),
# which a warm process answers from memory (accounts.auth.kept_token_rows, budgets.tree_memo): KEPT
# queries fewer once the process read them.
KEPT = 3
SUBMIT_QUERIES = 9  # auth 1, tree 1, memberships 1, cluster 1, hardware 1, lock+insert+event 3 (PostgreSQL
# draws the id in the lock's statement, scheduler.services._share_lock_budget; SQLite reads it inside the
# insert; scheduler.services._id_and_seq) (a warm process: auth and the 3 writes, the cluster and its
# hardware kept by scheduler.hardware_memo); the answer is built from what was written (no attempt yet, the
# submitted event, no dependency without ``after``); + the owner's live-work count 1 (lim42: the per-user
# limit FAIRWAY_MAX_SUBMITTED_PER_USER, a statement after the lock so it sees the user's other
# submissions committed: scheduler.services.submitted_count)
DETAIL_QUERIES = 7  # auth 1, workload 1, attempts 1 (+ their GPUs 1 when any), events 1, tree 1, memberships 1,
# dependencies 1 (the ``after`` list with its workloads' states, one prefetch whatever its length); the
# accounting from the attempts, not a GROUP BY
LIST_QUERIES = 5  # auth 1, count 1, page 1, the page's attempts 1 (accounting), tree 1: whatever the page's length
LIST_RUNNING = 1  # more when a workload of the page runs: its links on offline hosts (accounting.account_page)
TREE_QUERIES = 13  # auth 1, clusters 1, tree 1, then the standing of the one cluster (snapshot 8, demand 2)
CANCEL_QUERIES = 13  # auth 1, workload 1, lock 1, nominations 1, update 1, event 1, then the detail's 7 less auth
# (a pending workload; one with a running attempt adds its stop)


def _count(client: Any, method: str, url: str, **kwargs: Any) -> tuple[Any, int]:
    with CaptureQueriesContext(connection) as ctx:
        response = getattr(client, method)(url, **kwargs)
    savepoints = ("SAVEPOINT", "RELEASE", "BEGIN", "COMMIT")  # a test runs in a transaction: no BEGIN/COMMIT
    return response, len([q for q in ctx.captured_queries if not q["sql"].startswith(savepoints)])


def test_a_submission_costs_a_fixed_number_of_queries(researcher_client, submission, cluster):
    _count(researcher_client, "post", URL, data=submission(), format="json")  # warm caches (content types)
    response, queries = _count(researcher_client, "post", URL, data=submission(), format="json")
    assert response.status_code == 201, response.json()
    assert queries <= SUBMIT_QUERIES - KEPT - 2 == 4  # the cluster and its hardware kept too: the 3 writes, the count


def test_a_cancel_costs_a_fixed_number_of_queries(researcher_client, submission, cluster):
    response = researcher_client.post(URL, data=submission(), format="json")
    response, queries = _count(researcher_client, "post", f"{URL}{response.json()['id']}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "canceled"
    assert queries <= CANCEL_QUERIES - KEPT  # the submission read the token, the tree and the memberships


def test_detail_and_list_cost_the_same_whatever_the_queue_holds(researcher_client, researcher, submit_kwargs, cluster):
    first = do_submit_workload(researcher, **submit_kwargs())
    _first, cold = _count(researcher_client, "get", URL)  # the process loads the token and the tree once
    response, few = _count(researcher_client, "get", URL)
    assert response.status_code == 200 and few == cold - 2 and cold <= LIST_QUERIES
    _detail, detail_cold = _count(researcher_client, "get", f"{URL}{first.pk}/")  # reads the memberships
    _detail, detail_one = _count(researcher_client, "get", f"{URL}{first.pk}/")
    assert detail_one == detail_cold - 1 and detail_cold <= DETAIL_QUERIES - 2  # the list read token and tree
    for _ in range(20):
        do_submit_workload(researcher, **submit_kwargs())
    response, many = _count(researcher_client, "get", URL)
    assert len(response.json()["results"]) == 21
    assert many == few <= LIST_QUERIES - 2  # a warm process: the token and the tree kept
    _detail, detail_again = _count(researcher_client, "get", f"{URL}{first.pk}/")
    assert detail_again == detail_one <= DETAIL_QUERIES - KEPT


def test_a_list_with_running_workloads_reads_their_offline_links_once(
    researcher_client, researcher, submit_kwargs, cluster
):
    """The offline-host charge rule on the list (``account_page``): no query of it while nothing
    on the page runs, one (the running workloads' links on offline hosts) when something does, with
    a host offline or not: whatever the page's length, never a subquery per attempt row (session
    37's list: ~1.5 ms of the ORM's compiling per page)."""
    from datetime import timedelta

    from scheduler.models import Attempt, Host
    from scheduler.tick import run_tick

    def start_all() -> None:
        run_tick(cluster.pk)
        Attempt.objects.filter(started_at__isnull=True, ended_at__isnull=True).update(started_at=timezone.now())

    do_submit_workload(researcher, **submit_kwargs())
    _count(researcher_client, "get", URL)  # the process loads the token and the tree once
    _response, pending = _count(researcher_client, "get", URL)
    start_all()
    response, running = _count(researcher_client, "get", URL)
    assert response.json()["results"][0]["accounting"]["started_at"] is not None
    assert running == pending + LIST_RUNNING <= LIST_QUERIES - 2 + LIST_RUNNING
    for _ in range(6):
        do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
        start_all()
    response, many = _count(researcher_client, "get", URL)
    assert len(response.json()["results"]) == 7 and many == running
    silent_since = timezone.now() - timedelta(hours=1)
    Host.objects.filter(cluster=cluster).update(state=Host.State.OFFLINE, last_heartbeat=silent_since)
    response, silent = _count(researcher_client, "get", URL)
    assert silent == running
    assert response.json()["results"][0]["accounting"]["elapsed_s"] == 0  # silent since before it started


def test_detail_of_a_running_workload_has_no_query_per_attempt_or_gpu(researcher_client, researcher, submit_kwargs):
    from scheduler.tick import run_tick

    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    run_tick(workload.cluster_id)
    workload.refresh_from_db()
    assert workload.state != Workload.State.PENDING
    response, queries = _count(researcher_client, "get", f"{URL}{workload.pk}/")
    assert response.status_code == 200 and len(response.json()["attempts"]) == 1
    assert len(response.json()["attempts"][0]["gpus"]) == 8
    # + the efficiency's two (scheduler.efficiency: the links with their whole minutes, then the partly
    # held minutes of its own, util46), whatever the number of GPUs
    assert queries <= DETAIL_QUERIES + 2


def test_the_tree_costs_a_fixed_number_of_queries_whatever_the_queue_holds(
    researcher_client, researcher, submit_kwargs
):
    do_submit_workload(researcher, **submit_kwargs())
    researcher_client.get("/api/v1/budgets/tree/")  # the process loads the token and the tree once
    response, few = _count(researcher_client, "get", "/api/v1/budgets/tree/")
    assert response.status_code == 200 and len(response.json()) == 1
    for _ in range(10):
        do_submit_workload(researcher, **submit_kwargs())
    _response, many = _count(researcher_client, "get", "/api/v1/budgets/tree/")
    assert many == few <= TREE_QUERIES - 2


def test_token_authentication_is_one_query_however_many_tokens_the_user_has(researcher, api_client_for):
    from accounts.services import create_api_token

    for _ in range(5):
        create_api_token(researcher)
    client = api_client_for(researcher)
    with CaptureQueriesContext(connection) as ctx:
        assert client.get("/api/v1/me/").status_code == 200
    assert sum("knox_authtoken" in q["sql"] for q in ctx.captured_queries) == 1
    with CaptureQueriesContext(connection) as ctx:  # the process keeps the rows (accounts.auth)
        assert client.get("/api/v1/me/").status_code == 200
    assert sum("knox_authtoken" in q["sql"] for q in ctx.captured_queries) == 0


def test_me_reads_the_kept_tree_and_costs_one_query(researcher_client, org_tree):
    """``GET /api/v1/me/`` in a warm process: its memberships (one query); the token with its
    user and the tree kept (the tree was one query per request, the user read again another)."""
    first = researcher_client.get("/api/v1/me/")
    response, queries = _count(researcher_client, "get", "/api/v1/me/")
    assert response.status_code == 200 and response.json() == first.json() and queries <= 1
    assert response.json()["submit_budgets"]


def test_me_answers_the_users_and_memberships_current_rows(researcher, api_client_for, org_tree):
    """``GET /api/v1/me/`` answers from the authenticated user (the kept token's user, forgotten on
    every user write) and the memberships read now: a save, a bulk update and a membership's
    change show at the next request, as the user's re-read did (the oracle: a fresh read)."""
    from accounts.api.serializers import MeSerializer
    from accounts.models import Membership, User
    from budgets import tree_memo

    client = api_client_for(researcher)

    def oracle() -> dict:
        user = User.objects.get(pk=researcher.pk)
        tree = tree_memo.shared_tree()
        context = {
            "budget_tree": tree,
            "budget_paths": tree_memo.paths_of(tree),
            "accessible_budget_ids": __import__("accounts.services").services.accessible_budget_ids(
                user, tree, dict(Membership.objects.filter(user=user).values_list("budget_id", "role"))
            ),
        }
        return MeSerializer(user, context=context).data

    assert client.get("/api/v1/me/").json() == oracle()
    researcher.first_name = "Ada"
    researcher.save()
    assert client.get("/api/v1/me/").json() == oracle() and oracle()["first_name"] == "Ada"
    User.objects.filter(pk=researcher.pk).update(email="ada@example.org", is_staff=True)
    assert client.get("/api/v1/me/").json() == oracle() and oracle()["email"] == "ada@example.org"
    Membership.objects.filter(user=researcher).delete()
    assert client.get("/api/v1/me/").json() == oracle() and oracle()["memberships"] == []


def test_a_kept_token_is_refused_at_once_after_every_kind_of_token_or_user_write(researcher, api_client_for):
    """``accounts.auth.kept_token_rows`` against ``token_rows`` (the query) after a login, a
    logout, a revoke, a deactivation, an expiry and a user's deletion; each time the API answers
    as knox would at once (no request is let in by a kept row)."""
    from datetime import timedelta

    from knox.models import AuthToken

    from accounts.auth import TOKENS, kept_token_rows, token_rows
    from accounts.models import User
    from accounts.services import create_api_token, do_revoke_token

    def same(key: str) -> bool:
        return [(t.digest, t.expiry, t.user.is_active) for t in kept_token_rows(key)] == [
            (t.digest, t.expiry, t.user.is_active) for t in token_rows(key)
        ]

    def status(token: str) -> int:
        client = api_client_for(None)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return client.get("/api/v1/me/").status_code

    first, token = create_api_token(researcher)
    assert status(token) == 200 and same(first.token_key)
    assert kept_token_rows(first.token_key)[0] is kept_token_rows(first.token_key)[0]  # kept
    version = TOKENS.version()
    assert status(token[:-1] + ("A" if token[-1] != "A" else "B")) == 401  # the digest is checked
    assert status("x" * len(token)) == 401 and kept_token_rows("x" * 15) == []  # a guess: nothing kept
    assert TOKENS.version() == version

    # logout (this token), then logout all
    client = api_client_for(None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.post("/api/v1/auth/logout/").status_code == 204
    assert same(first.token_key) and status(token) == 401
    second, token2 = create_api_token(researcher)
    third, token3 = create_api_token(researcher)
    assert status(token2) == 200 and status(token3) == 200
    client.credentials(HTTP_AUTHORIZATION=f"Token {token2}")
    assert client.post("/api/v1/auth/logout/", {"all": True}, format="json").status_code == 204
    assert same(second.token_key) and same(third.token_key)
    assert status(token2) == 401 and status(token3) == 401

    # revoke
    fourth, token4 = create_api_token(researcher)
    assert status(token4) == 200
    do_revoke_token(researcher, fourth.token_key)
    assert same(fourth.token_key) and status(token4) == 401

    # expiry passes while the row is kept: refused (and deleted) as knox does
    fifth, token5 = create_api_token(researcher, expiry=timedelta(hours=1))
    assert status(token5) == 200
    later = timezone_now() + timedelta(hours=2)
    with patched_now(later):
        assert status(token5) == 401
    assert not AuthToken.objects.filter(pk=fifth.pk).exists() and same(fifth.token_key)

    # the user deactivated (a save), activated again, then deleted (the tokens' cascade)
    sixth, token6 = create_api_token(researcher)
    assert status(token6) == 200
    researcher.is_active = False
    researcher.save()
    assert same(sixth.token_key) and status(token6) == 401
    researcher.is_active = True
    researcher.save()
    assert same(sixth.token_key) and status(token6) == 200
    User.objects.filter(pk=researcher.pk).delete()
    assert same(sixth.token_key) and status(token6) == 401


def test_a_bulk_write_of_users_is_refused_at_the_next_request(researcher, api_client_for):
    """``QuerySet.update()`` and friends send no signal: the user model's queryset
    (``accounts.models.UserQuerySet``, a ``ForgettingQuerySet``) forgets the kept token rows
    itself, so a user deactivated in bulk is refused at once; ``UserManager``'s methods remain."""
    from accounts.auth import TOKENS, kept_token_rows, token_rows
    from accounts.models import User
    from accounts.services import create_api_token

    def status(token: str) -> int:
        client = api_client_for(None)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return client.get("/api/v1/me/").status_code

    row, token = create_api_token(researcher)
    assert status(token) == 200 and kept_token_rows(row.token_key)[0].user.is_active
    version = TOKENS.version()
    assert User.objects.filter(pk=researcher.pk).update(is_active=False) == 1
    assert TOKENS.version() != version and status(token) == 401
    assert (
        [t.user.is_active for t in kept_token_rows(row.token_key)]
        == [t.user.is_active for t in token_rows(row.token_key)]
        == [False]
    )
    User.objects.filter(pk=researcher.pk).update(is_active=True)
    assert status(token) == 200
    User.objects.bulk_update([User(pk=researcher.pk, is_active=False)], ["is_active"])
    assert status(token) == 401
    # UserManager's own methods stay on the manager
    assert User.objects.get_by_natural_key(researcher.username).pk == researcher.pk
    assert User.objects.create_user("bulk-new", password="x" * 12).check_password("x" * 12)


def test_a_bulk_write_of_tokens_is_seen_at_the_next_request(researcher, api_client_for):
    """break27: ``AuthToken.objects...update()`` sent no signal, so a token made to expire in bulk
    was still accepted from the rows a process kept. knox's manager (and the user's
    ``auth_token_set``) now build a ``ForgettingQuerySet`` (``accounts.models.TokenQuerySet``)."""
    from datetime import timedelta

    from knox.models import AuthToken

    from accounts.auth import TOKENS, kept_token_rows
    from accounts.services import create_api_token

    def status(token: str) -> int:
        client = api_client_for(None)
        client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return client.get("/api/v1/me/").status_code

    row, token = create_api_token(researcher)
    assert status(token) == 200 and kept_token_rows(row.token_key)[0].expiry is None
    version = TOKENS.version()
    past = timezone_now() - timedelta(seconds=1)
    assert AuthToken.objects.filter(pk=row.pk).update(expiry=past) == 1
    assert TOKENS.version() != version and status(token) == 401  # expired: refused (and deleted)
    assert not AuthToken.objects.filter(pk=row.pk).exists()

    second, token2 = create_api_token(researcher)
    assert status(token2) == 200
    researcher.auth_token_set.filter(pk=second.pk).update(expiry=past)  # the related manager too
    assert status(token2) == 401
    third, token3 = create_api_token(researcher)
    assert status(token3) == 200
    version = TOKENS.version()
    AuthToken.objects.filter(pk=third.pk).delete()
    assert TOKENS.version() != version and status(token3) == 401
    # knox's manager keeps its own create()
    assert isinstance(AuthToken.objects.create(user=researcher)[1], str)


def timezone_now() -> Any:
    from django.utils import timezone

    return timezone.now()


def patched_now(instant: Any) -> Any:
    """``django.utils.timezone.now`` answers ``instant`` (knox's expiry check reads it)."""
    from unittest import mock

    return mock.patch("django.utils.timezone.now", return_value=instant)


def test_an_expired_token_is_refused_and_swept_where_tokens_are_listed(researcher, api_client_for):
    from datetime import timedelta

    from knox.models import AuthToken

    from accounts.services import create_api_token

    old, token = create_api_token(researcher, expiry=timedelta(seconds=1))
    AuthToken.objects.filter(pk=old.pk).update(expiry=old.created - timedelta(seconds=1))
    stale, _ = create_api_token(researcher, expiry=timedelta(seconds=1))
    AuthToken.objects.filter(pk=stale.pk).update(expiry=stale.created - timedelta(seconds=1))
    client = api_client_for(None)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/me/").status_code == 401
    assert not AuthToken.objects.filter(pk=old.pk).exists()
    listed = api_client_for(researcher).get("/api/v1/tokens/")
    assert listed.status_code == 200
    assert not AuthToken.objects.filter(pk=stale.pk).exists()


def test_a_view_without_a_database_connection_answers_503_not_500(researcher_client, monkeypatch):
    from psycopg_pool import PoolTimeout

    from accounts.api import views

    def no_connection(*_args: Any, **_kwargs: Any) -> Any:
        try:
            raise PoolTimeout("couldn't get a connection after 10.00 sec")
        except PoolTimeout as exc:
            raise OperationalError(str(exc)) from exc

    monkeypatch.setattr(views, "_me", no_connection)
    response = researcher_client.get("/api/v1/me/")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert response.json()["code"] == "database_busy"


def test_too_many_clients_is_503_and_other_database_errors_stay_500(rf):
    from config.middleware import DatabaseBusyMiddleware

    middleware = DatabaseBusyMiddleware(lambda request: None)  # type: ignore[arg-type,return-value]
    request = rf.get("/api/v1/me/")
    busy = OperationalError("connection failed: FATAL:  sorry, too many clients already")
    assert middleware.process_exception(request, busy).status_code == 503
    assert middleware.process_exception(request, OperationalError("deadlock detected")) is None
    assert middleware.process_exception(request, ValueError("bug")) is None


def test_beyond_the_in_flight_limit_requests_are_answered_503_with_retry_after():
    release = asyncio.Event()
    started: asyncio.Queue[str] = asyncio.Queue()

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        started.put_nowait(scope["path"])
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    limited = InFlightLimit(slow_app, limit=2)

    async def scenario() -> list[tuple[int, dict[bytes, bytes]]]:
        def request(path: str) -> HttpCommunicator:
            return HttpCommunicator(limited, "GET", path)

        held = [request("/api/v1/me/"), request("/api/v1/me/")]
        tasks = [asyncio.ensure_future(c.get_response(timeout=5)) for c in held]
        assert [await started.get(), await started.get()] == ["/api/v1/me/"] * 2
        refused = await request("/api/v1/me/").get_response(timeout=5)
        alive_task = asyncio.ensure_future(request("/livez").get_response(timeout=5))
        assert await started.get() == "/livez"  # never refused
        release.set()
        answers = [*(await asyncio.gather(*tasks)), refused, await alive_task]
        return [(a["status"], dict(a["headers"])) for a in answers]

    answers = asyncio.run(scenario())
    assert [status for status, _ in answers] == [200, 200, 503, 200]
    assert answers[2][1][b"retry-after"] == b"1"
    assert limited.in_flight == 0 and limited.refused == 1


@pytest.mark.django_db(transaction=True)
def test_an_api_request_under_asgi_takes_few_thread_hops(researcher, api_client_for, monkeypatch):
    """Django's async middleware chain hopped to the sync thread and back for every middleware
    (about 15 hops per request); the synchronous chain takes one hop, signals included."""
    from accounts.services import create_api_token
    from config.asgi import application

    _instance, token = create_api_token(researcher)
    hops = 0
    original = SyncToAsync.__call__

    async def counting(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        nonlocal hops
        hops += 1
        return await original(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counting)

    async def get() -> dict[str, Any]:
        communicator = HttpCommunicator(
            application,
            "GET",
            "/api/v1/me/",
            headers=[(b"authorization", f"Token {token}".encode()), (b"host", b"testserver")],
        )
        answer = await communicator.get_response(timeout=10)
        await communicator.wait(timeout=10)  # the handler's end: request_finished gives the connection back
        return answer

    answer = asyncio.run(get())
    assert answer["status"] == 200, answer["body"]
    assert json.loads(answer["body"])["username"] == "researcher"
    assert hops == 1  # request_started, the request and request_finished: one hop


@pytest.mark.django_db(transaction=True)
def test_requests_reuse_a_bounded_pool_of_threads_and_leak_no_state_between_them(researcher):
    """Django's ASGI handler started a new thread per request (asgiref's ``ThreadSensitiveContext``);
    SyncChainASGIHandler lends one of its reused threads. Given 24 requests, 8 at a time, on a
    handler of 3 threads, alternately with and without a token: at most 3 threads ran them; none
    saw the language, time zone or user an earlier request on its thread left behind; and every
    pooled database connection is back in the pool at the end (none held by an idle thread)."""
    import threading

    from django.core import signals
    from django.db import connection
    from django.utils import timezone as tz
    from django.utils import translation

    from accounts.services import create_api_token
    from config.overload import SyncChainASGIHandler

    _instance, token = create_api_token(researcher)
    connection.close()  # the test's own connection back to the pool (PostgreSQL) or closed
    handler = SyncChainASGIHandler(threads=3)
    seen: list[tuple[int, str, str]] = []

    def started(**_kwargs: Any) -> None:
        seen.append((threading.get_ident(), translation.get_language(), tz.get_current_timezone_name()))
        translation.activate("de")  # left behind on purpose: the next request on this thread must not see it
        tz.activate("Asia/Tokyo")

    signals.request_started.connect(started)
    try:

        async def get(n: int) -> tuple[int, Any]:
            headers = [(b"host", b"testserver")]
            if n % 2 == 0:
                headers.append((b"authorization", f"Token {token}".encode()))
            communicator = HttpCommunicator(handler, "GET", "/api/v1/me/", headers=headers)
            answer = await communicator.get_response(timeout=20)
            await communicator.wait(timeout=20)
            return n, answer

        async def scenario() -> list[tuple[int, Any]]:
            answers = []
            for batch in range(3):
                answers += await asyncio.gather(*(get(batch * 8 + i) for i in range(8)))
            return answers

        answers = asyncio.run(scenario())
    finally:
        signals.request_started.disconnect(started)
    for n, answer in answers:
        if n % 2 == 0:
            assert answer["status"] == 200, answer["body"]
            assert json.loads(answer["body"])["username"] == "researcher"
        else:
            assert answer["status"] in (401, 403), answer["body"]  # the user of the last request did not stay
    assert len(seen) == 24
    assert 1 <= len({ident for ident, _, _ in seen}) <= 3 == handler.threads.created
    assert {(language, zone) for _, language, zone in seen} == {("en-us", "UTC")}
    if connection.settings_dict.get("OPTIONS", {}).get("pool"):  # PostgreSQL: none kept by an idle thread
        # pool_size counts a connection the pool is still opening in the background (it grows
        # while requests wait): poll until it arrives. A connection an idle thread kept never does.
        import time

        deadline = time.monotonic() + 10
        while (stats := connection.pool.get_stats())["pool_available"] != stats["pool_size"]:
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)


def test_a_task_a_request_started_may_outlive_the_request_s_lent_thread():
    """Given a task scheduled on the loop from a request's thread (as the hub's pushes are), when it
    makes a thread-sensitive call after the request ended, then it runs (on a thread of its own, as
    under Django's per-request context; asgiref's ``ThreadSensitiveContext(executor=...)`` refuses
    it with RuntimeError), and the lent thread was neither shut down nor used by it."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from asgiref.sync import sync_to_async

    from config.overload import LentThreadContext

    lent = ThreadPoolExecutor(max_workers=1)
    lent_thread = lent.submit(threading.current_thread).result()

    async def scenario() -> tuple[threading.Thread, threading.Thread]:
        loop = asyncio.get_running_loop()
        ended = asyncio.Event()

        async def later() -> threading.Thread:
            await ended.wait()
            return await sync_to_async(threading.current_thread)()

        def in_request() -> Any:
            return asyncio.run_coroutine_threadsafe(later(), loop)

        async with LentThreadContext(lent):
            during = await sync_to_async(threading.current_thread)()
            future = await sync_to_async(in_request)()
        ended.set()
        return during, await asyncio.wrap_future(future)

    during, after = asyncio.run(scenario())
    assert during is lent_thread
    assert after is not lent_thread
    assert lent.submit(threading.current_thread).result() is lent_thread  # still lendable
    lent.shutdown()


def test_async_views_keep_django_s_asynchronous_handler():
    """The log tail page waits for agents: it must not hold the process's one sync thread."""
    from config.overload import is_async_view

    assert is_async_view("/workloads/1/logs/")
    assert not is_async_view("/api/v1/workloads/")
    assert not is_async_view("/no/such/page/")


@pytest.mark.django_db(transaction=True)
def test_an_async_view_answers_under_asgi():
    from config.asgi import application

    async def get() -> dict[str, Any]:
        communicator = HttpCommunicator(application, "GET", "/workloads/1/logs/", headers=[(b"host", b"testserver")])
        answer = await communicator.get_response(timeout=10)
        await communicator.wait(timeout=10)
        return answer

    answer = asyncio.run(get())
    assert answer["status"] == 302  # to the login page: the async view ran through its decorator


def test_accounting_from_attempts_in_memory_equals_the_sql_aggregates(researcher, submit_kwargs, hosts):
    """The detail (prefetched attempts) and the list (one query of the page's attempts) compute the
    accounting in memory; it must equal ``with_accounting``'s aggregates, row for row."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.accounting import account_page, account_prefetched, accounting, with_accounting
    from scheduler.models import Attempt

    host = hosts["a100-1"]
    t0 = timezone.now() - timedelta(hours=5)
    h = timedelta(hours=1)
    # (started, ended, charged, allocated, unfunded, end_reason) per attempt, for several workloads
    shapes = [
        [],
        [(None, None, 0, True, False, "")],  # placed, not started
        [(t0, None, 0, True, False, "")],  # running, funded
        [(t0, None, 0, True, True, "")],  # running unfunded
        [(None, None, 0, False, True, "")],  # placed unfunded, not started (words46: the lists mark it)
        [(t0, t0 + h, 0, False, True, "preempted"), (t0 + 2 * h, None, 0, True, False, "")],  # unfunded once
        [(t0, t0 + h, 3600, True, False, "preempted"), (t0 + 2 * h, None, 0, False, False, "")],
        [(t0, t0 + h, 100, True, False, "preempted"), (t0 + h, t0 + 3 * h, 200, True, False, "succeeded")],
        [(None, t0 + h, 0, True, False, "failed_to_start"), (t0 + 2 * h, t0 + 4 * h, 50, True, False, "failed")],
    ]
    ids = []
    for shape in shapes:
        workload = do_submit_workload(researcher, **submit_kwargs())
        for number, (started, ended, charged, allocated, unfunded, reason) in enumerate(shape, start=1):
            Attempt.objects.create(
                workload=workload,
                number=number,
                host=host,
                allocated=allocated,
                unfunded=unfunded,
                placed_at=t0 - h,
                started_at=started,
                ended_at=ended,
                charged_gpu_seconds=charged,
                end_reason=reason,
            )
        ids.append(workload.pk)
    now = timezone.now()
    fields = ("acct_last_start", "acct_closed_run", "acct_charged", "acct_open_start", "acct_open_funded")
    sql = {w.pk: w for w in with_accounting(Workload.objects.filter(pk__in=ids))}
    page = list(Workload.objects.filter(pk__in=ids))
    account_page(page)
    prefetched = Workload.objects.filter(pk__in=ids).prefetch_related("attempts")
    for memory in (page, [account_prefetched(w) for w in prefetched]):
        for w in memory:
            want = sql[w.pk]
            assert [getattr(w, f) for f in fields] == [getattr(want, f) for f in fields], w.pk
            assert w.acct_preemptions == want.acct_preemptions
            assert bool(w.acct_open_unfunded) == bool(want.acct_open_unfunded), w.pk
            assert accounting(w, now) == accounting(want, now)


def test_serializers_with_fields_built_once_answer_as_drf_builds_them_per_instance(
    researcher_client, researcher, submit_kwargs, monkeypatch
):
    """``FieldsOnceMixin`` copies field templates built on a class's first use; the plain reading is
    DRF's own ``get_fields`` per instance. Both must give the same representation, also on the
    second and later uses of a class (the copies, not the templates, are bound)."""
    from rest_framework import serializers as drf

    from accounts.api.serializers import MembershipSerializer, MeSerializer
    from accounts.models import Membership, User
    from scheduler.api import serializers as api
    from scheduler.models import Attempt, Cluster, WorkloadEvent
    from scheduler.tick import run_tick

    running = do_submit_workload(researcher, **submit_kwargs(gpu_count=2))
    do_submit_workload(researcher, **submit_kwargs())
    run_tick(running.cluster_id)
    request = researcher_client.get(URL).wsgi_request  # a request for the scoped serializers' context
    cases = [
        (api.WorkloadListSerializer, list(Workload.objects.all())),
        (api.AttemptSerializer, list(Attempt.objects.all())),
        (api.WorkloadEventSerializer, list(WorkloadEvent.objects.all())),
        (api.ClusterSerializer, list(Cluster.objects.all())),
        (MeSerializer, list(User.objects.prefetch_related("memberships"))),  # GET /me/
        (MembershipSerializer, list(Membership.objects.all())),
    ]
    now = timezone.now()  # a running attempt's efficiency runs to now: one instant for both builds
    monkeypatch.setattr("scheduler.efficiency.timezone.now", lambda: now)
    for cls, rows in cases:
        assert issubclass(cls, api.FieldsOnceMixin) and rows, cls
        plain = type(f"Plain{cls.__name__}", (cls,), {"get_fields": drf.ModelSerializer.get_fields})
        context = {"request": request}
        for _ in range(2):  # the second round copies the templates the first one built
            once = cls(rows, many=True, context=context).data
            assert once == plain(rows, many=True, context=context).data, cls.__name__


def test_the_list_s_rows_are_the_plain_serializer_s_json(researcher, researcher_client, submit_kwargs, cluster):
    """``GET /api/v1/workloads/`` builds its rows from the workloads alone (the owner's and the
    cluster's names annotated, ``WorkloadRowSerializer``): the same JSON as the plain
    ``WorkloadListSerializer`` over fully loaded workloads, and no user or cluster model built."""
    from unittest import mock

    from rest_framework.renderers import JSONRenderer

    from accounts.models import User
    from scheduler.accounting import account_page
    from scheduler.api import serializers as api
    from scheduler.models import Cluster
    from scheduler.tick import run_tick

    running = do_submit_workload(researcher, **submit_kwargs(gpu_count=2))
    for _ in range(3):
        do_submit_workload(researcher, **submit_kwargs())
    run_tick(running.cluster_id)
    built = {User: 0, Cluster: 0}
    from_db = {model: model.from_db for model in built}

    def counting(model: Any) -> Any:
        def from_db_counted(db: Any, names: Any, values: Any) -> Any:
            built[model] += 1
            return from_db[model].__func__(model, db, names, values)

        return from_db_counted

    # One instant for both sides: a waiting workload's wait_s counts whole seconds up to now, and
    # on a busy machine the answer and the plain rows were read on either side of a second.
    with mock.patch("django.utils.timezone.now", return_value=timezone.now()):
        with (
            mock.patch.object(User, "from_db", counting(User)),
            mock.patch.object(Cluster, "from_db", counting(Cluster)),
        ):
            answer = researcher_client.get(URL)
        assert answer.status_code == 200 and built == {User: 1, Cluster: 0}  # User: the request's own
        rows = list(Workload.objects.select_related("owner", "cluster").order_by("-id"))
        account_page(rows)
        view = answer.renderer_context["view"]
        assert view.get_serializer_class() is api.WorkloadRowSerializer
        plain = api.WorkloadListSerializer(rows, many=True, context=view.get_serializer_context()).data
    assert len(plain) == 4 and answer.json()["results"] == json.loads(JSONRenderer().render(plain))


def test_the_submission_body_validated_with_fields_built_once_is_drf_s_validation(researcher_client):
    """The submission's input serializer (``FieldsOnceMixin``) against DRF's own ``get_fields``
    per instance: the same validated data and the same errors, body after body."""
    from rest_framework import serializers as drf

    from scheduler.api.serializers import FieldsOnceMixin, WorkloadSubmitSerializer

    good = {"budget": "nlp/olmo", "gpu_count": "2", "command": "python train.py --x 1", "min_runtime": "1h"}
    bodies = [
        good,
        {**good, "cpus": "8", "memory": "32G", "shared_memory": "", "max_runtime": "2h", "retries": "1"},
        {**good, "after": "12, 13:any", "array": "0-9%2", "env": {"A": "1"}, "mounts": ["data"], "name": None},
        {**good, "min_runtime": "forever", "memory": "lots", "command": "'unclosed"},
        {**good, "max_runtme": "2h"},
        {"budget": 1},
        [],
        "text",
    ]
    plain = type("PlainSubmit", (WorkloadSubmitSerializer,), {"get_fields": drf.Serializer.get_fields})
    assert issubclass(WorkloadSubmitSerializer, FieldsOnceMixin)
    for _ in range(2):  # the second round copies the templates the first one built
        for body in bodies:
            once, drfs = WorkloadSubmitSerializer(data=body), plain(data=body)
            assert once.is_valid() == drfs.is_valid(), body
            assert (once.validated_data, once.errors) == (drfs.validated_data, drfs.errors), body


@pytest.fixture
def waits_for_fair_share(researcher, outsider, cluster, org_tree, submit_kwargs, django_capture_on_commit_callbacks):
    """vision/sam runs two protected 8-GPU workloads; nlp/olmo, with a day of 20 GPUs of usage,
    waits for 8 GPUs (not yet considered by a tick, so no figures are cached yet)."""

    from tests.api.fair_share_setup import vision_runs_while_olmo_has_used_more

    with django_capture_on_commit_callbacks(execute=True):
        vision_runs_while_olmo_has_used_more(outsider, cluster, org_tree, submit_kwargs, started=True)
        waiting = do_submit_workload(researcher, **submit_kwargs(gpu_count=8))
    waiting.refresh_from_db()
    return waiting


def test_a_fair_share_detail_reads_the_last_tick_s_figures_not_a_snapshot(
    waits_for_fair_share, researcher_client, cluster, django_capture_on_commit_callbacks
):
    from django.utils import timezone

    from scheduler.tick import run_tick

    at = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        run_tick(cluster.pk, at)
    response, queries = _count(researcher_client, "get", f"{URL}{waits_for_fair_share.pk}/")
    why = response.json()["pending_explanation"]
    assert why["reason"] == "fair_share" and why["numbers"]["budget"]["ratio"] > 0 and why["blocking"]
    assert why["numbers"]["at"] == at.isoformat().replace("+00:00", "Z")  # the tick's standing
    assert queries <= DETAIL_QUERIES + 2  # + the blocking work and its protection ends; no snapshot (8)


def test_the_figures_a_tick_caches_are_the_standing_at_its_instant(
    waits_for_fair_share, cluster, monkeypatch, django_capture_on_commit_callbacks
):
    """The oracle of the cached figures: ``budget_figures`` of a snapshot loaded at the tick's
    instant, as a detail computes them without a cache. A tick older than the readiness limit is
    not shown: the standing is computed at the reader's instant."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler import tick_figures
    from scheduler.tick import run_tick

    at = timezone.now()
    oracle = tick_figures.figures_now(cluster.pk, at)  # what the tick will see
    with django_capture_on_commit_callbacks(execute=True):
        run_tick(cluster.pk, at)
    cached = tick_figures.standing_figures(cluster.pk, at + timedelta(seconds=1))
    assert cached.at == at and cached.figures == oracle.figures
    assert any(f.committed and f.usage for f in cached.figures.values())  # not trivial
    later = at + timedelta(seconds=tick_figures.max_age_s() + 1)
    assert tick_figures.standing_figures(cluster.pk, later) == tick_figures.figures_now(cluster.pk, later)


def test_a_rolled_back_tick_caches_no_figures(waits_for_fair_share, cluster, django_capture_on_commit_callbacks):
    from django.core.cache import cache
    from django.utils import timezone

    from scheduler import tick_figures
    from scheduler.tick import run_tick

    assert cache.get(tick_figures.cache_key(cluster.pk)) is None  # no reason with numbers was pending
    with django_capture_on_commit_callbacks(execute=True):
        run_tick(cluster.pk, timezone.now())  # committed: the waiting workload's fair_share numbers
    before = cache.get(tick_figures.cache_key(cluster.pk))
    assert before is not None
    run_tick(cluster.pk, timezone.now())  # inside the test's transaction: never committed
    assert cache.get(tick_figures.cache_key(cluster.pk)) == before


def test_a_tree_read_inside_a_write_that_rolls_back_is_not_kept(org_tree, cluster):
    """review22: a budget write forgets the tree, then its own transaction reads it (uncommitted
    rows) and rolls back: nothing commits to forget again, so that read must not be kept, neither
    for the process nor for the thread."""
    from django.db import transaction

    from budgets.tree_memo import shared_tree

    olmo = org_tree["nlp/olmo"]
    shares = olmo.shares
    assert shared_tree()[olmo.pk].shares == shares

    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        olmo.shares = shares + 7
        olmo.save()
        assert shared_tree()[olmo.pk].shares == shares + 7  # the writer sees its own write
        raise Rollback
    assert shared_tree()[olmo.pk].shares == shares


def test_the_tree_a_process_keeps_is_the_tree_after_every_kind_of_budget_write(org_tree, cluster, researcher_client):
    """``budgets.tree_memo.shared_tree`` against ``load_tree`` (the plain reading) after a save, a
    queryset update, a bulk create and a delete; and the API names a renamed budget at once."""
    from django.forms.models import model_to_dict

    from budgets.models import Budget
    from budgets.services import load_tree
    from budgets.tree_memo import shared_tree

    def same() -> bool:
        def rows(tree: dict) -> dict:  # every concrete field, and the path
            return {k: {**model_to_dict(b), "id": b.pk, "path": b.path} for k, b in tree.items()}

        return rows(shared_tree()) == rows(load_tree())

    assert same() and shared_tree() is shared_tree()  # kept: one load
    olmo = org_tree["nlp/olmo"]
    olmo.shares += 5
    olmo.save()
    assert same()
    Budget.objects.filter(pk=olmo.pk).update(hold=True)
    assert same()
    [extra] = Budget.objects.bulk_create([Budget(name="extra", parent=org_tree["nlp"])])
    assert same()
    Budget.objects.filter(pk=extra.pk).delete()
    assert same()
    olmo.name = "olmo2"
    olmo.save()
    paths = {b["path"] for b in researcher_client.get("/api/v1/budgets/tree/").json()[0]["budgets"]}
    assert "nlp/olmo2" in paths and "nlp/olmo" not in paths


def test_the_memberships_a_process_keeps_are_the_memberships_after_every_kind_of_write(
    org_tree, researcher, researcher_client, submission, cluster
):
    """``budgets.tree_memo.shared_memberships`` against ``user_memberships`` (the query) after a
    save, a role update, a bulk create, a delete and a cascade; and the API refuses a submission
    at once when its membership goes."""
    from accounts.models import Membership, User
    from accounts.services import do_add_membership, user_memberships
    from budgets.tree_memo import MEMO, paths_of, shared_memberships, shared_tree, token

    def same(user: User) -> bool:
        return shared_memberships(user) == user_memberships(user)

    assert same(researcher) and shared_memberships(researcher) is shared_memberships(researcher)  # kept
    version = token()
    assert shared_memberships(researcher, version) is shared_memberships(researcher)  # one token, one read
    do_add_membership(researcher, org_tree["vision/sam"])
    assert same(researcher)
    Membership.objects.filter(user=researcher).update(role=Membership.Role.MANAGER)
    assert same(researcher)
    other = User.objects.create(username="other")
    assert shared_memberships(other) == {}
    Membership.objects.bulk_create([Membership(user=other, budget=org_tree["nlp/tulu"])])
    assert same(other) and same(researcher)
    Membership.objects.filter(user=researcher, budget=org_tree["vision/sam"]).delete()
    assert same(researcher)
    other.delete()  # the cascade deletes its membership through the signals
    assert same(researcher) and not Membership.objects.filter(budget=org_tree["nlp/tulu"]).exists()
    assert MEMO.version() != version
    tree = shared_tree()
    assert paths_of(tree) is paths_of(tree) and paths_of(tree) == {b: t.path for b, t in tree.items()}

    assert researcher_client.post(URL, data=submission(), format="json").status_code == 201
    Membership.objects.filter(user=researcher).delete()
    response = researcher_client.post(URL, data=submission(), format="json")
    assert response.status_code == 400 and response.json()["code"] == "not_a_member"


def test_the_hardware_a_process_keeps_is_the_hardware_after_every_kind_of_host_or_gpu_write(cluster, hosts):
    """``scheduler.services._hardware`` (kept per process) against ``read_hardware`` (the query)
    after each kind of write of a hardware field; a heartbeat or a health change keeps it."""
    from django.utils import timezone

    from scheduler.hardware_memo import MEMO
    from scheduler.models import GPU, Host
    from scheduler.services import _hardware, read_hardware

    def same() -> bool:
        def key(rows: list[Any]) -> list[str]:
            return sorted(json.dumps(row, sort_keys=True, default=str) for row in rows)

        return key(_hardware(cluster)) == key(read_hardware(cluster))

    assert same() and _hardware(cluster) is _hardware(cluster)  # kept: one read
    host = Host.objects.filter(cluster=cluster).order_by("pk").first()
    assert host is not None
    token = MEMO.version()
    Host.objects.filter(pk=host.pk).update(last_heartbeat=timezone.now())  # not hardware: kept
    GPU.objects.filter(host=host).update(health=GPU.Health.UNHEALTHY)
    assert MEMO.version() == token
    host.cpus, host.memory_bytes = 7, 2**30
    host.save(update_fields=["cpus", "memory_bytes"])
    assert MEMO.version() != token and same()
    Host.objects.filter(pk=host.pk).update(labels={"zone": "b"})
    assert same()
    gpus = list(GPU.objects.filter(host=host))
    for g in gpus:
        g.model = "H100"
    GPU.objects.bulk_update(gpus, ["model"])
    assert same()
    GPU.objects.bulk_create([GPU(host=host, index=99, uuid="GPU-extra", model="H100")])
    assert same()
    GPU.objects.filter(uuid="GPU-extra").delete()
    assert same()
    Host.objects.filter(pk=host.pk).update(removed_at=timezone.now())
    assert same()


def test_the_cluster_a_submission_resolves_from_memory_is_the_cluster_after_every_kind_of_write(cluster):
    """``scheduler.hardware_memo.shared_cluster`` against ``resolve_cluster`` (the queries) for every
    kind of reference, after a save, a queryset update, a bulk create and a delete."""
    from django.forms.models import model_to_dict

    from scheduler.hardware_memo import MEMO, shared_cluster
    from scheduler.models import Cluster
    from scheduler.services import MAX_DB_INT, resolve_cluster

    def refs() -> list[Any]:
        names = list(Cluster.objects.values_list("name", flat=True))
        ids = list(Cluster.objects.values_list("pk", flat=True))
        odd = [None, "", "nope", "a\x00b", 0, -1, MAX_DB_INT + 1, True, 1.5, [1]]
        return [*names, *(f" {n} " for n in names), *ids, *odd]

    def same() -> bool:
        def row(c: Cluster | None) -> Any:
            return None if c is None else {**model_to_dict(c), "id": c.pk}

        return all(row(shared_cluster(ref)) == row(resolve_cluster(ref)) for ref in refs())

    assert same() and shared_cluster(cluster.name) is shared_cluster(cluster.pk)  # kept: one read
    token = MEMO.version()
    cluster.description = "changed"
    cluster.save()
    assert MEMO.version() != token and same()
    Cluster.objects.filter(pk=cluster.pk).update(allow_root_workloads=True)
    assert same() and shared_cluster(cluster.pk).allow_root_workloads
    [extra] = Cluster.objects.bulk_create([Cluster(name="extra")])
    assert same() and shared_cluster(None) is None  # two clusters: none is "the only one"
    Cluster.objects.filter(pk=extra.pk).delete()
    assert same() and shared_cluster(None).pk == cluster.pk
    cluster.name = "renamed"
    cluster.save(update_fields=["name"])
    assert same() and shared_cluster("renamed").pk == cluster.pk


def test_nothing_is_kept_when_the_cache_is_local_to_a_process(org_tree, settings):
    # Without Redis a manage.py command's budget writes would never reach the server's version.
    from budgets.tree_memo import shared_tree

    settings.FAIRWAY_MEMO_LOCAL_CACHE = False
    assert shared_tree() is not shared_tree()


def test_a_request_reads_the_memos_versions_in_one_cache_round_trip(
    researcher_client, submission, cluster, monkeypatch
):
    """A warm submission reads the API tokens', the tree's and the hardware's versions together
    (``config.memo.request_tokens``: one ``get_many``), never one by one."""
    from django.core.cache import caches

    from accounts.auth import TOKENS
    from budgets.tree_memo import MEMO as TREE
    from scheduler.hardware_memo import MEMO as HARDWARE

    keys = {TOKENS.key, TREE.key, HARDWARE.key}
    assert researcher_client.post(URL, data=submission(), format="json").status_code == 201  # warm
    reads: list[Any] = []
    inside: list[bool] = []
    cache = caches["default"]  # the backend behind config.memo's cache (this thread's)
    get, get_many = cache.get, cache.get_many

    def counting_get(key: str, *args: Any, **kwargs: Any) -> Any:
        if not inside:  # a local-memory cache's get_many calls get per key: one round trip on Redis
            reads.append(key)
        return get(key, *args, **kwargs)

    def counting_get_many(keys: Any, *args: Any, **kwargs: Any) -> Any:
        reads.append(tuple(keys))
        inside.append(True)
        try:
            return get_many(keys, *args, **kwargs)
        finally:
            inside.pop()

    monkeypatch.setattr(cache, "get", counting_get)
    monkeypatch.setattr(cache, "get_many", counting_get_many)
    response, queries = _count(researcher_client, "post", URL, data=submission(), format="json")
    assert response.status_code == 201 and queries <= 4
    version_reads = [r for r in reads if (set(r) if isinstance(r, tuple) else {r}) & keys]
    assert len(version_reads) == 1 and set(version_reads[0]) == keys


def test_a_web_process_s_startup_objects_are_frozen_out_of_full_collections():
    """Given a fresh process that loads the ASGI application (as each uvicorn worker does),
    when it is ready, then the objects it built while starting (Django, the apps, the URLconf's
    views and serializers) sit in the permanent generation: a full collection walks almost
    nothing of them (config.heap; docs/benchmarks/api_load.md, eighth pass)."""
    probe = (
        "import gc, config.asgi\n"
        "import django.urls\n"
        "django.urls.get_resolver().url_patterns\n"
        "print(gc.get_threshold()[0], gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    young, frozen, tracked = map(int, _probe(probe).split()[-3:])
    assert frozen > 50_000  # the startup's objects (~117,000 with production settings)
    assert tracked < frozen // 20  # what a full collection still walks
    assert young == 10_000  # collections 14x rarer than Python's 700 (eleventh pass)


def test_requests_on_threads_of_their_own_share_one_redis_pool_and_connection(redis_cache):
    """Given the Redis cache, when five requests' threads (under ASGI requests run on several threads
    of the process's pool, and Django keeps a cache object per thread) each read and write the cache one
    after another, then they borrow one connection from one pool of the process: no pool and no
    connection per request (config.cache; docs/benchmarks/api_load.md, eighth pass)."""
    import threading

    from django.core.cache import caches

    seen: list[tuple[Any, Any]] = []  # the objects themselves: ids of freed ones may repeat

    def request(n: int) -> None:
        cache = caches["default"]
        cache.set(f"web-tier-{n}", n)
        assert cache.get(f"web-tier-{n}") == n
        seen.append((cache, cache._cache.get_client(write=True).connection_pool))  # noqa: SLF001

    for n in range(5):
        thread = threading.Thread(target=request, args=(n,))
        thread.start()
        thread.join()
    assert len({id(cache) for cache, _pool in seen}) == 5  # Django's cache object per thread
    pools = {id(pool): pool for _cache, pool in seen}
    assert len(pools) == 1
    assert next(iter(pools.values()))._created_connections <= 1  # noqa: SLF001 -- redis-py's count


def test_one_request_s_scope_computing_never_holds_up_another_request_s(monkeypatch):
    """Given two requests of one process on threads of their own, when the first one's memberships
    wait (for a pooled database connection, a row, the CPU), then the second one's are computed
    meanwhile. Fails with ``functools.cached_property`` (Python 3.11: one lock per property for
    every instance of the class): the second waited on the first, and when the first waited for a
    connection that the waiting requests held, the process stopped until the pool's timeout
    (docs/benchmarks/api_load.md, eleventh pass)."""
    import threading
    from types import SimpleNamespace

    import config.api

    release, first_in = threading.Event(), threading.Event()

    def memberships(user: Any, token: Any) -> dict[int, str]:
        if user == "first":
            first_in.set()
            release.wait(30)
        return {1: user}

    monkeypatch.setattr(config.api.tree_memo, "token", lambda request: "v")
    monkeypatch.setattr(config.api.tree_memo, "shared_memberships", memberships)
    views = {name: config.api.FairwayViewSet() for name in ("first", "second")}
    for name, view in views.items():
        view.request = SimpleNamespace(user=name)
    got: dict[str, Any] = {}

    def read(name: str) -> None:
        got[name] = views[name].memberships

    first = threading.Thread(target=read, args=("first",), daemon=True)
    first.start()
    assert first_in.wait(30)
    second = threading.Thread(target=read, args=("second",), daemon=True)
    second.start()
    second.join(30)  # a bound for a broken build, not a timing: the second waits on nothing
    done_while_first_waited = not second.is_alive()
    release.set()
    first.join(30)
    assert done_while_first_waited and got == {"first": {1: "first"}, "second": {1: "second"}}


def test_no_server_code_uses_functools_cached_property():
    """Python 3.11's ``functools.cached_property`` locks every instance of the class while one
    computes (see the test above); the server's code uses Django's, which does not lock."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    offenders = []
    for package in ("accounts", "budgets", "config", "scheduler", "web"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.module == "functools":
                    offenders += [f"{path}:{node.lineno}" for a in node.names if a.name == "cached_property"]
                elif (
                    isinstance(node, ast.Attribute)
                    and node.attr == "cached_property"
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "functools"
                ):
                    offenders.append(f"{path}:{node.lineno}")
    assert offenders == []


def _autogroups_on() -> bool:
    try:
        with open("/proc/self/autogroup") as f:
            shown = f.read().split()  # "/autogroup-123 nice 0"; empty where they are off
    except OSError:
        return False
    return len(shown) >= 3 and shown[-2] == "nice"


def _session_autogroup_nice(*prefix: str, own_session: bool, parent_nice: int = 0) -> str:
    """The autogroup nice a process started as ``prefix python`` (``nice -n 10``: the estimates'
    line) sees once it has read the settings, in a session of its own or not; started by a
    parent ``parent_nice`` nicer than this one (a layout started niced as a whole), that leaves
    it running as honcho, the bench and the tests' layout leave theirs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    probe = "import config.settings; print(open('/proc/self/autogroup').read().split()[-1])"
    child = [*prefix, sys.executable, "-c", probe]
    parent = (
        "import subprocess, sys; sys.stdout.write(subprocess.run("
        f"{child!r}, capture_output=True, text=True, check=True, timeout=120, start_new_session={own_session!r}"
        ").stdout)"
    )
    return subprocess.run(  # noqa: S603 -- this interpreter, a fixed program
        ["nice", "-n", str(parent_nice), sys.executable, "-c", parent],  # noqa: S607 -- coreutils' nice, as the Procfile
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        check=True,
        timeout=150,
    ).stdout.split()[-1]


def test_a_niced_process_leading_its_session_keeps_its_nice_against_other_sessions():
    """Given the kernel's autogroups (the CPU shared between sessions first, by nice inside one),
    when a process started ``nice -n 10`` in a session of its own (the Procfile's estimates, as
    honcho, the bench and systemd start it) reads the settings, then its session's autogroup is
    at the 10 it was given over its parent's nice (less where 19 caps it): it yields to the web
    processes' sessions. A process sharing its session, or no nicer than its parent, changes
    nothing (config.priority; docs/benchmarks/api_load.md, eleventh pass)."""
    import os

    if not _autogroups_on():
        pytest.skip("this kernel has no autogroups, or they are off (the file shows nothing)")
    with open("/proc/self/autogroup") as f:
        ours = f.read().split()[-1]
    mine = os.nice(0)  # the tests may run niced themselves
    assert _session_autogroup_nice("nice", "-n", "10", own_session=True) == str(min(19, mine + 10) - mine)
    assert _session_autogroup_nice(own_session=True) == "0"  # as nice as its parent: a fresh group's 0
    assert _session_autogroup_nice("nice", "-n", "10", own_session=False) == ours  # our session's: not its to change


def test_a_layout_started_niced_as_a_whole_keeps_the_workers_session_equal_to_the_webs():
    """Given a layout started niced as a whole (``nice honcho start``, the benches under ``nice
    -n 19``: every process inherits the nice), when the worker or the clock (``manage.py``, a
    session of its own, no nice of its own) reads the settings, then its session's autogroup
    stays at 0, as the web processes' (uvicorn's do not read the settings as session leaders).
    Before, it took the inherited nice (19 under the benches): on a busy machine the worker got
    no CPU to boot, no tick ran and nothing started (bench/agents_load.py --layout: its log empty,
    0 CPU s in 54 s; docs/benchmarks/deploy-rounds.md, section 4)."""
    if not _autogroups_on():
        pytest.skip("this kernel has no autogroups, or they are off (the file shows nothing)")
    assert _session_autogroup_nice(own_session=True, parent_nice=5) == "0"


def test_one_serve_process_running_the_worker_gets_the_pool_of_two_processes():
    """Given ``manage.py serve`` with its worker in the same process (embedded, ``--with-worker``),
    when it starts, then its pool is the share of ``max_connections`` of two processes (itself and
    one command), not the Procfile's per-process share its ticks queued behind the requests for;
    an operator's ``FAIRWAY_DB_POOL_MAX_SIZE`` or ``FAIRWAY_DB_PROCESSES`` is kept."""
    from scheduler.management.commands.serve import one_process_pool_size

    assert one_process_pool_size({"max_size": 12}, 100, {}) == 45  # (100 - 10) // 2
    assert one_process_pool_size({"max_size": 12}, 20, {}) == 12  # never less than the settings'
    assert one_process_pool_size({"max_size": 12}, 100, {"FAIRWAY_DB_PROCESSES": "9"}) is None
    assert one_process_pool_size({"max_size": 12}, 100, {"FAIRWAY_DB_POOL_MAX_SIZE": "8"}) is None


def test_holding_nice_changes_nothing_where_autogroups_are_off(tmp_path, monkeypatch):
    """Given a kernel whose autogroups are off (``/proc/self/autogroup`` exists and shows nothing,
    as on the CI machine), when a niced session leader starts, then nothing is written and
    startup goes on; where they are on, the autogroup takes the process's nice."""
    import os

    from config.priority import hold_nice_against_other_sessions

    monkeypatch.setattr(os, "nice", lambda increment: 10)
    monkeypatch.setattr(os, "getsid", lambda pid: os.getpid())
    monkeypatch.setattr(os, "getppid", lambda: 4321)
    monkeypatch.setattr(os, "getpriority", lambda which, who: 0)  # the parent at nice 0
    off = tmp_path / "off"
    off.write_text("")
    assert hold_nice_against_other_sessions(str(off)) is False
    assert off.read_text() == ""
    on = tmp_path / "on"
    on.write_text("/autogroup-7 nice 0\n")
    assert hold_nice_against_other_sessions(str(on)) is True
    assert on.read_text() == "10"


def test_only_the_nice_added_to_the_parents_is_held(tmp_path, monkeypatch):
    """Given a session leader at nice 10, when its parent is at nice 10 (inherited: a layout
    started niced as a whole), 5, or 0 / absent (a container's first process: no parent in its
    PID namespace), then its autogroup takes 0 (nothing written), 5 and 10."""
    import os

    from config.priority import hold_nice_against_other_sessions

    monkeypatch.setattr(os, "nice", lambda increment: 10)
    monkeypatch.setattr(os, "getsid", lambda pid: os.getpid())
    for ppid, parent_nice, expected in ((4321, 10, None), (4321, 5, "5"), (4321, 0, "10"), (0, 19, "10")):
        monkeypatch.setattr(os, "getppid", lambda ppid=ppid: ppid)
        monkeypatch.setattr(os, "getpriority", lambda which, who, n=parent_nice: n)
        group = tmp_path / "autogroup"
        group.write_text("/autogroup-7 nice 0\n")
        assert hold_nice_against_other_sessions(str(group)) is (expected is not None), (ppid, parent_nice)
        assert group.read_text() == (expected or "/autogroup-7 nice 0\n"), (ppid, parent_nice)


def _probe(code: str, **env: str) -> str:
    """What ``code`` prints in a fresh process of this interpreter with the project's settings."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    return subprocess.run(  # noqa: S603 -- this interpreter, a fixed program
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def _pg_settings(url: str) -> dict[str, object]:
    """The database OPTIONS a fresh process gets from ``DATABASE_URL=url`` (nothing connects)."""
    import json

    probe = (
        "import json, django; django.setup()\n"
        "from django.conf import settings\n"
        "print(json.dumps(settings.DATABASES['default']['OPTIONS']))\n"
    )
    return json.loads(_probe(probe, DATABASE_URL=url).splitlines()[-1])


def test_every_postgresql_connection_runs_without_jit_unless_the_url_says_otherwise():
    """Given PostgreSQL, when the settings load, then every connection (pooled or not) starts with
    ``jit=off`` (lat32: JIT compiled the push's read for 0.4-5 s on a database without statistics)
    and the pool is still on; an ``options`` the URL gives is kept as it is."""
    options = _pg_settings("postgres://postgres@127.0.0.1:5432/test")
    assert options["options"] == "-c jit=off" and "pool" in options
    own = _pg_settings("postgres://postgres@127.0.0.1:5432/test?options=-c%20work_mem%3D8MB")
    assert own["options"] == "-c work_mem=8MB"
