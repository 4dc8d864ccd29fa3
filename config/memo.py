"""Values a process keeps while the rows they come from do not change (issue 15).

A :class:`VersionedMemo` keeps what a loader read together with the *version* it read it under: a
random token in the default cache (Redis, shared by every process, when ``REDIS_URL`` is set). A
reader takes the token (one cache round trip) and calls the loader again only when the token is
not the one it kept. Writers of the rows call :meth:`VersionedMemo.forget`, which drops the token
at once (the writer's own process, and tests that never commit, see it) and again after the
commit of the current transaction (a reader that loaded between the write and the commit under a
new token loads again). A reader takes the token *before* it loads, so a value is never kept
under a token newer than its rows; what the writer's own thread loads before its transaction ends
is kept for that thread alone, and dropped when the transaction ends (a rollback would take those
rows back with no commit to forget them): the write's ``on_commit`` callback marks it, and a value
is never served once Django has discarded that callback (rolled back, fin43). A cache that loses
the token costs one load; a cache that cannot be read costs a load per read, never a wrong
answer; a local-memory cache (no ``REDIS_URL``) keeps nothing (:func:`shared`).

The values are shared by the requests of a process: read them, never change them.

An API request reads the versions of the memos it may use (:data:`PER_REQUEST`: the API tokens',
the budget tree's, the hardware's) together, once, in one cache round trip
(:func:`request_tokens`, ``get_many``), when its token is authenticated; the view and the services
it calls take theirs from the request (``memo.token(request)``): one round trip per request, not
one per memo. Taken before anything is loaded, so the rule above holds.
"""

from __future__ import annotations

import functools
import logging
import secrets
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import models, transaction

logger = logging.getLogger(__name__)
T = TypeVar("T")
READ = object()  # VersionedMemo.get's token: read it now
SNAPSHOT_READ = "fairway_snapshot_read"
"""Set on a connection while its transaction reads the snapshot of its first query
(``config.one_read``, REPEATABLE READ): a value loaded there may be older than a version read after
that query, so :meth:`VersionedMemo.get` uses it without keeping it (brk43: a page kept a removed
host's hardware under the version its removal left, for every later snapshot of the process)."""

PER_REQUEST: list[VersionedMemo] = []
"""The memos whose versions an API request reads together (:func:`request_tokens`)."""


def shared() -> bool:
    """Whether the default cache reaches every process that writes the rows: a local-memory cache
    does not (a ``manage.py`` command's writes would never reach the server's token), unless
    ``FAIRWAY_MEMO_LOCAL_CACHE`` says one process does everything (the tests)."""
    backend = str(settings.CACHES["default"]["BACKEND"])
    return not backend.endswith("LocMemCache") or bool(getattr(settings, "FAIRWAY_MEMO_LOCAL_CACHE", False))


class VersionedMemo:
    """Per-process values under one version key of the default cache; ``name`` tells them apart."""

    def __init__(self, key: str, *, per_request: bool = False) -> None:
        """``per_request``: an API request reads this version with the others' (:func:`request_tokens`)."""
        self.key = key
        if per_request:
            PER_REQUEST.append(self)
        self._lock = threading.Lock()
        self._kept: dict[Hashable, tuple[str, Any]] = {}
        self._writing = threading.local()  # .conn whose open transaction forgot, .kept meanwhile

    def version(self) -> str | None:
        """The current token (created when missing); None when the cache cannot be read."""
        try:
            token = cache.get(self.key)
            if token is None:
                cache.add(self.key, secrets.token_hex(8), timeout=None)
                token = cache.get(self.key)
        except Exception:  # a cache outage costs a load per read, not the answer
            logger.warning("%s: cache read failed", self.key, exc_info=True)
            return None
        return token if isinstance(token, str) else None

    def token(self, request: Any = None) -> Any:
        """The version for several reads of one reader (``get(..., token=)``): :meth:`version`, or
        :data:`READ` when nothing is kept (the cache is not shared: no cache read then).
        ``request``: the version this request read with the others' (:func:`request_tokens`)."""
        if request is not None:
            tokens = request_tokens(request)
            if self.key in tokens:
                return tokens[self.key]
        return self.version() if shared() else READ

    def get(self, name: Hashable, loader: Callable[[], T], token: Any = READ) -> T:
        """``loader()``'s value, kept while the version does not change; always ``loader()``'s
        when the cache is not shared between processes (see :func:`shared`).

        ``token``: the version this same reader took before (:meth:`version`) for values it reads
        together (a request's tree and memberships): no second cache read. It was taken before
        this load, so the rule above holds."""
        if not shared():
            return loader()
        token = self.version() if token is READ else token  # str, or None: not readable
        own = self._own_write()
        store = self._kept if own is None else own
        kept = store.get(name)
        if token is not None and kept is not None and kept[0] == token:
            return kept[1]  # type: ignore[no-any-return]  # kept by this same name's loader
        value = loader()
        if token is not None and not getattr(transaction.get_connection(), SNAPSHOT_READ, False):
            with self._lock:
                store[name] = (token, value)
        return value

    def _drop(self) -> None:
        try:
            cache.delete(self.key)
        except Exception:  # the token then expires only with the cache: say so loudly
            logger.error("%s: could not forget the version; processes may keep old values", self.key, exc_info=True)

    def forget(self) -> None:
        """The rows changed: every process loads again at its next read (now, and after the
        commit of the current transaction if there is one)."""
        with self._lock:
            self._kept.clear()
        self._drop()
        connection = transaction.get_connection()
        if not connection.in_atomic_block:
            transaction.on_commit(self._drop)  # runs now
            return
        # A callback of its own marks this write: Django keeps it while the write may still commit
        # and discards it on the rollback of the transaction (or savepoint) that wrote (fin43).
        marker = functools.partial(self._drop)
        transaction.on_commit(marker)
        if getattr(self._writing, "conn", None) is not connection:
            self._writing.conn, self._writing.markers = connection, []
        self._writing.markers.append(marker)
        self._writing.kept, self._writing.scope = {}, tuple(connection.savepoint_ids)

    def _own_write(self) -> dict[Hashable, tuple[str, Any]] | None:
        """What this thread keeps while it reads inside the transaction that wrote (and forgot),
        apart from the process's values: they hold uncommitted rows, which a rollback takes back
        with no commit to forget them. None outside such a transaction (then its values go)."""
        connection = getattr(self._writing, "conn", None)
        if connection is None:
            return None
        pending = {id(entry[1]) for entry in connection.run_on_commit}
        markers = [marker for marker in self._writing.markers if id(marker) in pending]
        if not connection.in_atomic_block or not markers:
            # That transaction has ended (committed, or rolled back: never serve what it loaded),
            # or every savepoint that wrote was rolled back.
            self._writing.conn = self._writing.kept = self._writing.markers = None
            return None
        if len(markers) != len(self._writing.markers):  # a savepoint that wrote was rolled back
            self._writing.markers, self._writing.kept = markers, {}
        scope = tuple(connection.savepoint_ids)
        if scope[: len(self._writing.scope)] != self._writing.scope:
            # The savepoint that wrote has ended (released or rolled back): load again.
            self._writing.kept, self._writing.scope = {}, scope
        return self._writing.kept  # type: ignore[no-any-return]


class ForgettingQuerySet(models.QuerySet[Any]):
    """Bulk writes (``update``, ``bulk_create``, ``bulk_update``, ``delete``) skip ``save`` and the
    signals, so they forget a :class:`VersionedMemo` here, as saves and deletes do through signals.

    A subclass names the memo (:meth:`memo`, imported late: the memo's module reads these models)
    and the fields the memo keeps (``memo_fields``; None: every field, so every write forgets)."""

    memo_fields: frozenset[str] | None = None

    def memo(self) -> VersionedMemo:
        raise NotImplementedError

    def forget_kept(self, fields: Iterable[str] | None) -> None:
        if fields is None or self.memo_fields is None or not self.memo_fields.isdisjoint(fields):
            self.memo().forget()

    def update(self, **kwargs: Any) -> int:
        self.forget_kept(kwargs)
        return super().update(**kwargs)

    def bulk_update(self, objs: Iterable[Any], fields: Iterable[str], *args: Any, **kwargs: Any) -> int:
        fields = list(fields)
        self.forget_kept(fields)
        return super().bulk_update(objs, fields, *args, **kwargs)

    def bulk_create(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.forget_kept(None)
        return super().bulk_create(*args, **kwargs)

    def delete(self) -> tuple[int, dict[str, int]]:
        self.forget_kept(None)
        return super().delete()


def request_tokens(request: Any) -> dict[str, Any]:
    """The versions of the :data:`PER_REQUEST` memos for ``request`` (Django's or DRF's), read on
    its first call in one cache round trip (``get_many``; a missing version is created as
    :meth:`VersionedMemo.version` does) and kept on the request for the others."""
    http = getattr(request, "_request", request)  # DRF's Request wraps Django's HttpRequest
    tokens: dict[str, Any] | None = getattr(http, "_fairway_memo_tokens", None)
    if tokens is not None:
        return tokens
    memos = list(PER_REQUEST)
    if not shared():
        tokens = {memo.key: READ for memo in memos}
    else:
        try:
            found = cache.get_many([memo.key for memo in memos])
        except Exception:  # a cache outage costs a load per read, not the answer
            logger.warning("memo versions: cache read failed", exc_info=True)
            found = None
        tokens = {}
        for memo in memos:
            token = found.get(memo.key) if found is not None else None
            tokens[memo.key] = token if isinstance(token, str) else (memo.version() if found is not None else None)
    http._fairway_memo_tokens = tokens
    return tokens
