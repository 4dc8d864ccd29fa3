"""Shared fixtures: personas, an organisation budget tree, a cluster with hosts, API clients.

The tree (shares in brackets)::

    org ─┬─ nlp [2] ─┬─ olmo [1]   researcher, teammate (members)
         │           └─ tulu [1]
         └─ vision [1] ── sam [1]  outsider (member)
    manager: manager of nlp; admin: superuser, no membership.

The cluster ``default``: hosts ``a100-1``, ``a100-2`` (8 × A100 each) and ``h100-1``
(4 × H100), registered through ``do_register_host``.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db.models import F
from rest_framework.test import APIClient

from accounts.models import Membership, User
from accounts.services import create_api_token, do_add_membership
from budgets.models import Budget
from budgets.services import do_create_budget
from scheduler.models import Cluster, Host
from scheduler.services import do_create_cluster, do_register_host
from tests.dbsessions import end_stray_sessions
from tests.fixture_rows import World

PASSWORD = "correct horse battery staple"

# The browser tests' fixtures (``chromium``, ``new_page``): Playwright driving Debian's Chromium.
pytest_plugins = ["tests.browser", "tests.bulk_setup", "tests.pg_locks"]


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook; a serial run never calls it
def pytest_xdist_setupnodes(config: pytest.Config, specs: list[Any]) -> None:
    """Under ``pytest -n N`` (make test) each worker gets a Redis database of its own,
    ``REDIS_URL``'s number + the worker's index (mod 16), set in the worker's environment before
    it loads the settings: two workers on one database would run each other's dramatiq messages
    (the same queues) and channel-layer groups (``host-<id>``: ids restart in every test
    database). Its test database is its own already (``django_db_modify_db_settings``)."""
    url = os.environ.get("REDIS_URL")
    if not url:
        return
    base = urlsplit(url)
    number = int(base.path.strip("/") or 0)
    for index, spec in enumerate(specs):
        spec.env["REDIS_URL"] = urlunsplit(base._replace(path=f"/{(number + index) % 16}"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files marked ``first`` run first, in their order; the rest keep theirs. Under
    ``--dist loadfile`` (make test) a worker takes the next file of this order when it is free,
    so the longest files go first and the workers end together (tests/policy/test_scenarios_db.py
    alone is a third of the suite: handed out last, one worker ran it while the other idled)."""
    items.sort(key=lambda item: item.get_closest_marker("first") is None)  # stable


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """Give each test run its own test database, so runs in one checkout (several engineers,
    CI) never share one: SQLite in the temp dir, PostgreSQL with the process id appended."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    test = db.setdefault("TEST", {})
    if db["ENGINE"] == "django.db.backends.sqlite3":
        test["NAME"] = str(Path(tempfile.gettempdir()) / f"fairway-test-{os.getpid()}.sqlite3")
    else:
        test["NAME"] = f"test_{db['NAME']}_{os.getpid()}"
        # The test database commits without waiting for its WAL flush (a test setting only,
        # trim63): a commit is visible to every session at once all the same, only a crash of the
        # PostgreSQL server itself could lose the last ones (pg_terminate_backend, which the
        # failover tests use, loses nothing). The db scenario runs commit ~3 times per simulated
        # tick and every transactional test flushes: ~1.5 ms of fsync saved per commit on this box.
        options = db.setdefault("OPTIONS", {})
        options["options"] = f"{options.get('options', '')} -c synchronous_commit=off".strip()
        # Django's connection pool (on by default) is built with the database name of the moment,
        # and creating the test database does not rebuild it: a query that pytest-django refused
        # before this point still built it (tests/fuzz loads the API schema at import, which reads
        # the budget tree), and the migrations and every test then ran on DATABASE_URL's own
        # database. Closed here, it is built again for the test database.
        from django.db import connection

        connection.close_pool()


@pytest.fixture(autouse=True)
def _fresh_monitoring_answers() -> None:
    """``/readyz`` and ``/metrics`` keep their answers a second or a few per process
    (``scheduler.health.Recent``): every test starts with none kept."""
    from scheduler import health

    health.forget_recent()


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    """PBKDF2 at full strength costs a third of a second per persona; tests need no strength."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session", autouse=True)
def _flush_survives_a_deadlock() -> Iterator[None]:
    """A transactional test's flush (DELETEs, ``_flush_by_delete``) that PostgreSQL chose as a
    deadlock's victim is run again: work a test left behind on a thread of its own (a consumer's
    disconnect, a gateway's flush) may still hold a lock the flush needs, and finishes once it has
    given way. Any other error, or a fourth deadlock, fails the test as before."""
    from django.core.management.base import CommandError
    from django.test import TransactionTestCase

    original = TransactionTestCase._fixture_teardown

    def teardown(self: TransactionTestCase) -> None:
        for attempt in range(4):
            try:
                return original(self)
            except CommandError as exc:
                if attempt == 3 or "deadlock detected" not in str(exc.__cause__ or exc):
                    raise
                time.sleep(0.2 * (attempt + 1))

    TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]
    yield
    TransactionTestCase._fixture_teardown = original  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def _flush_by_delete() -> Iterator[None]:
    """A transactional test's flush on PostgreSQL empties the tables with ``DELETE`` instead of one
    ``TRUNCATE`` of all of them (trim63): a TRUNCATE makes new files for every table and index
    (~0.3 s here, ~1 s with the box loaded; a test's tables hold a few rows), the DELETEs take
    ~20 ms. The same tables, in one transaction (``execute_sql_flush``; the foreign keys are
    deferred, so the order does not matter), sequences kept as before (``reset_sequences`` is
    False), and the content types and permissions made again afterwards as before
    (``post_migrate``). SQLite's flush deletes already."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    original = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations, style: Any, tables: Any, *, reset_sequences: bool = False, allow_cascade: bool = False
    ) -> list[str]:
        if reset_sequences or allow_cascade:
            return original(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(t))};" for t in tables]

    DatabaseOperations.sql_flush = sql_flush  # type: ignore[method-assign]
    yield
    DatabaseOperations.sql_flush = original  # type: ignore[method-assign]


@pytest.fixture(autouse=True)
def _sync_thread_finished(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, before pytest-django flushes a transactional test's database: the
    database work left on asgiref's single sync thread has finished and that thread's connection
    is closed. Websocket consumers driven with ``asyncio.run`` write there (a disconnect handler
    still running when the test returns), and such a write during the flush's TRUNCATE deadlocked
    the two now and then (tests/e2e/test_agent_link_safety.py, tests/breaker/test_agent_link.py).
    The database fixture is set up first (the ``django_db`` marker's is a plugin's autouse
    fixture; one the test names is taken here), so it is torn down after this one."""
    for name in ("transactional_db", "live_server"):
        if name in request.fixturenames:
            request.getfixturevalue(name)
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=20)
    from scheduler.gateway import drain_agent_db_threads

    drain_agent_db_threads()  # the consumers' database work runs there (scheduler.gateway.agent_db)


@pytest.fixture
def _no_stray_sessions(transactional_db: None) -> Iterator[None]:
    """For the browser tests; named before the server's fixture (``stack``, ``live_server``), so
    torn down after it: a request the browser abandoned mid-flight (a poll cut short by a
    navigation) can leave a server thread holding a connection to the test database after the
    server stopped, which would keep PostgreSQL from dropping it (``end_stray_sessions``, which
    also keeps the connection pool usable)."""
    yield
    end_stray_sessions()


@pytest.fixture(autouse=True)
def _channel_layer_per_test() -> Iterator[None]:
    """Every test gets channel-layer instances of its own (made on first use), as every test runs
    its own event loop. A channels-redis instance keeps per-channel ``asyncio.Lock``s that bind to
    the loop that first contended them, and its ``ChannelLock`` keeps a lock alive when a waiter
    was cancelled (the count of a cancelled ``acquire`` is never given back): a read left waiting
    at one test's end then broke a later test's read with "bound to a different event loop"
    (tests/e2e/test_agent_link_safety.py under ``-n 2`` on Redis, web29). A server runs one loop
    for its whole life."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _fresh_throttles(settings: Any) -> None:
    """Throttle counters live in the default cache: start every test at zero, in a local-memory
    cache of its own even when REDIS_URL is set (clearing a RedisCache flushes the whole Redis
    database, which parallel runs share); a test that wants Redis sets its own prefix."""
    from django.core.cache import cache

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.FAIRWAY_MEMO_LOCAL_CACHE = True  # one process reads and writes: keep as with Redis (config.memo)
    cache.clear()


@pytest.fixture
def redis_cache(settings: Any) -> Iterator[str]:
    """The default cache in Redis (``REDIS_URL``) under a key prefix of this test's own, so that
    parallel runs do not collide; yields the prefix (another process given it shares the keys).
    Afterwards only keys of that prefix are deleted (``RedisCache.clear`` would flush the database
    parallel runs share). The test skips without ``REDIS_URL``."""
    import uuid

    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("needs Redis (REDIS_URL)")
    prefix = f"fairway-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    settings.CACHES = {
        "default": {
            "BACKEND": "config.cache.FairwayRedisCache",
            "LOCATION": url,
            "KEY_PREFIX": prefix,
            "OPTIONS": dict(settings.REDIS_CLIENT_TIMEOUTS),  # as config/settings.py (left51)
        }
    }
    try:
        yield prefix
    finally:
        import redis

        client = redis.Redis.from_url(url)
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)


def _org_tree() -> dict[str, Budget]:
    org = do_create_budget(name="org", parent=None)
    nlp = do_create_budget(name="nlp", parent=org, shares=2)
    vision = do_create_budget(name="vision", parent=org)
    return {
        "org": org,
        "nlp": nlp,
        "nlp/olmo": do_create_budget(name="olmo", parent=nlp),
        "nlp/tulu": do_create_budget(name="tulu", parent=nlp),
        "vision": vision,
        "vision/sam": do_create_budget(name="sam", parent=vision),
    }


def _user(username: str, **extra: Any) -> User:
    return User.objects.create_user(username=username, password=PASSWORD, email=f"{username}@example.org", **extra)


PERSONAS: dict[str, tuple[str | None, str, dict[str, Any]]] = {
    # username: (the budget path of its membership, its role, create_user's extra fields)
    "admin": (None, "", {"is_staff": True, "is_superuser": True}),
    "researcher": ("nlp/olmo", Membership.Role.MEMBER, {}),
    "teammate": ("nlp/olmo", Membership.Role.MEMBER, {}),
    "outsider": ("vision/sam", Membership.Role.MEMBER, {}),
    "manager": ("nlp", Membership.Role.MANAGER, {}),
}


def _persona(username: str, tree: dict[str, Budget] | None) -> User:
    path, role, extra = PERSONAS[username]
    user = _user(username, **extra)
    if path is not None:
        assert tree is not None
        do_add_membership(user, tree[path], role)
    return user


GPU_MEMORY_MB = {"A100": 81920, "H100": 81559}
HOSTS = [("a100-1", "A100", 8, "r1"), ("a100-2", "A100", 8, "r2"), ("h100-1", "H100", 4, "r1")]


def gpu_specs(host: str, model: str, count: int) -> list[tuple[int, str, str, int]]:
    """``count`` GPU specs ``(index, uuid, model, memory_mb)`` for ``host``."""
    return [(i, f"GPU-{host}-{i}", model, GPU_MEMORY_MB.get(model, 16384)) for i in range(count)]


def _host_tokens() -> dict[str, str]:
    cluster = do_create_cluster("default")
    tokens = {}
    for name, model, count, rack in HOSTS:
        _host, token = do_register_host(cluster, name, gpu_specs(name, model, count), {"rack": rack, "fabric": rack})
        tokens[name] = token
    connected(*cluster.hosts.all())
    return tokens


def _tree_by_pk(paths: dict[str, int]) -> dict[str, Budget]:
    budgets = Budget.objects.in_bulk(list(paths.values()))
    return {path: budgets[pk] for path, pk in paths.items()}


def _made_persona(username: str) -> Callable[[dict[str, Any]], int]:
    def make(values: dict[str, Any]) -> int:
        tree = _tree_by_pk(values["org_tree"]) if PERSONAS[username][0] is not None else None
        return _persona(username, tree).pk

    return make


@pytest.fixture(scope="session")
def fixture_rows(django_db_setup: None, django_db_blocker: Any) -> World:
    """The budget tree's, the personas' and the cluster's rows, made once per test process through
    the services and put back by their fixtures (tests/fixture_rows.py)."""
    made = World(
        {
            "org_tree": ((), lambda values: {path: b.pk for path, b in _org_tree().items()}),
            **{name: (("org_tree",) if PERSONAS[name][0] else (), _made_persona(name)) for name in PERSONAS},
            "host_tokens": ((), lambda values: _host_tokens()),
        }
    )
    with django_db_blocker.unblock():
        made.make()
    return made


@pytest.fixture
def _world_put() -> set[str]:
    """The parts of :func:`fixture_rows` put back in this test (the ones after them may build on them)."""
    return set()


@pytest.fixture
def org_tree(db: None, fixture_rows: World, _world_put: set[str]) -> dict[str, Budget]:
    """Budgets by path: ``org``, ``nlp``, ``nlp/olmo``, ``nlp/tulu``, ``vision``, ``vision/sam``."""
    return fixture_rows.put("org_tree", _world_put, _org_tree, _tree_by_pk)  # type: ignore[no-any-return]


def _persona_fixture(username: str) -> Any:
    needs_tree = PERSONAS[username][0] is not None

    def persona(request: pytest.FixtureRequest, db: None, fixture_rows: World, _world_put: set[str]) -> User:
        tree = request.getfixturevalue("org_tree") if needs_tree else None
        return fixture_rows.put(  # type: ignore[no-any-return]
            username, _world_put, lambda: _persona(username, tree), lambda pk: User.objects.get(pk=pk)
        )

    persona.__name__ = username
    persona.__doc__ = f"The persona ``{username}`` (see the module's tree)."
    return pytest.fixture(persona, name=username)


admin = _persona_fixture("admin")
researcher = _persona_fixture("researcher")
teammate = _persona_fixture("teammate")
outsider = _persona_fixture("outsider")
manager = _persona_fixture("manager")


@pytest.fixture
def host_tokens(db: None, fixture_rows: World, _world_put: set[str]) -> dict[str, str]:
    """Registers the ``default`` cluster's hosts; host name → plaintext token."""
    return fixture_rows.put("host_tokens", _world_put, _host_tokens, dict)  # type: ignore[no-any-return]


def connected(*hosts: Host) -> None:
    """Bring registered hosts up as their agents' first hello would (``active``; a host is
    ``offline`` from its registration until then), without a heartbeat: a test's hosts are schedulable
    from the start."""
    Host.objects.filter(pk__in=[h.pk for h in hosts], state=Host.State.OFFLINE).update(
        state=F("state_before_offline"), state_before_offline=""
    )
    for host in hosts:
        host.refresh_from_db(fields=["state", "state_before_offline"])


@pytest.fixture
def cluster(host_tokens: dict[str, str]) -> Cluster:
    """The ``default`` cluster with hosts a100-1, a100-2 (8 × A100) and h100-1 (4 × H100)."""
    return Cluster.objects.get(name="default")


@pytest.fixture
def hosts(cluster: Cluster) -> dict[str, Host]:
    return {h.name: h for h in cluster.hosts.all()}


@pytest.fixture
def api_client_for(db: None) -> Callable[[User | None], APIClient]:
    """``api_client_for(user)``: an APIClient sending a fresh knox token of ``user`` (None: anonymous)."""

    def make(user: User | None) -> APIClient:
        client = APIClient()
        if user is not None:
            _instance, token = create_api_token(user)
            client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return client

    return make


@pytest.fixture
def admin_client_api(admin: User, api_client_for: Callable[[User | None], APIClient]) -> APIClient:
    return api_client_for(admin)


@pytest.fixture
def researcher_client(researcher: User, api_client_for: Callable[[User | None], APIClient]) -> APIClient:
    return api_client_for(researcher)


@pytest.fixture
def teammate_client(teammate: User, api_client_for: Callable[[User | None], APIClient]) -> APIClient:
    return api_client_for(teammate)


@pytest.fixture
def outsider_client(outsider: User, api_client_for: Callable[[User | None], APIClient]) -> APIClient:
    return api_client_for(outsider)


@pytest.fixture
def manager_client(manager: User, api_client_for: Callable[[User | None], APIClient]) -> APIClient:
    return api_client_for(manager)


@pytest.fixture
def submission() -> Callable[..., dict[str, Any]]:
    """``submission(**overrides)``: a valid API submission to ``nlp/olmo`` on ``default``."""

    def make(**overrides: Any) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": "pretrain",
            "budget": "nlp/olmo",
            "cluster": "default",
            "gpu_model": "A100",
            "gpu_count": 4,
            "image": "ghcr.io/example/train:1",
            "command": ["python", "train.py", "--steps", "1000"],
            "env": {"WANDB_PROJECT": "olmo", "HF_TOKEN": {"value": "hf_secret", "secret": True}},
            "min_runtime": "2h",
        }
        data.update(overrides)
        return data

    return make


@pytest.fixture
def submit_kwargs(org_tree: dict[str, Budget], cluster: Cluster) -> Callable[..., dict[str, Any]]:
    """``submit_kwargs(**overrides)``: valid keyword arguments for ``do_submit_workload``."""

    def make(**overrides: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "name": "pretrain",
            "budget": org_tree["nlp/olmo"],
            "cluster": cluster,
            "gpu_model": "A100",
            "gpu_count": 4,
            "image": "ghcr.io/example/train:1",
            "command": ["python", "train.py"],
            "env": {"WANDB_PROJECT": "olmo"},
            "min_runtime_s": 3600,
        }
        kwargs.update(overrides)
        return kwargs

    return make


@pytest.fixture
def started_workload(
    researcher: User, cluster: Cluster, submit_kwargs: Callable[..., dict[str, Any]]
) -> tuple[Any, Any]:
    """``(workload, attempt)``: a workload of ``researcher`` placed by a tick and its attempt started,
    as its agent reports it (the exec, session and port-forward tests' running workload)."""
    from scheduler import lifecycle
    from scheduler.models import Attempt
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    w = do_submit_workload(researcher, **submit_kwargs())
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk)
    return w, attempt
