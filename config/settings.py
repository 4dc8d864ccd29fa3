"""Fairway settings: one module, driven by environment variables.

Embedded default (no variables set): SQLite under ``var/``, in-memory channel
layer, dramatiq stub broker with an in-process worker. Production: set
``DATABASE_URL`` (PostgreSQL) and ``REDIS_URL``. Every reader below fails loudly
with the variable's name on a malformed value.
"""

from __future__ import annotations

import logging
import math
import os
import re
import secrets
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import dj_database_url
from django.core.checks.security.base import SECRET_KEY_MIN_LENGTH, SECRET_KEY_MIN_UNIQUE_CHARACTERS
from django.core.exceptions import ImproperlyConfigured

from config.logfilters import client_errors_one_line
from config.logformat import LOG_FORMAT
from config.priority import hold_nice_against_other_sessions
from config.private_file import owner_only, sqlite_file_problem
from fairway_common.numbers import ascii_float

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("FAIRWAY_VAR_DIR") or BASE_DIR / "var")
try:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
except OSError as _exc:
    raise ImproperlyConfigured(f"FAIRWAY_VAR_DIR={str(VAR_DIR)!r} cannot be created: {_exc.strerror}") from None

MAX_SECONDS = 2**31 - 1
"""Upper bound of every duration and count setting: the database's integer columns (minimum
runtimes, wall-time limits, retries, array indices) and Python's timedelta hold it (68 years)."""


def env_str(name: str, default: str) -> str:
    """The variable's value, or ``default`` when unset or empty."""
    return os.environ.get(name) or default


def env_bool(name: str, default: bool) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case); raises ImproperlyConfigured otherwise."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    low = raw.strip().lower()
    if low in {"1", "true", "yes", "on"}:
        return True
    if low in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use true/false)")


_INTEGER = re.compile(r"[+-]?[0-9]+")  # the range check below names a value too large


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int = MAX_SECONDS) -> int:
    """An integer variable; raises ImproperlyConfigured on a non-integer or a value outside
    ``minimum``..``maximum``."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if not _INTEGER.fullmatch(raw.strip()):  # int() took "١" (Arabic-Indic) and "1_0"
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer (ASCII digits 0-9)")
    value = int(raw)
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be >= {minimum}")
    if value > maximum:
        raise ImproperlyConfigured(f"{name}={value} must be <= {maximum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None, maximum: float = MAX_SECONDS) -> float:
    """A finite float variable; raises ImproperlyConfigured on a non-number (``nan``, ``inf``
    included) or a value outside ``minimum``..``maximum``."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = ascii_float(raw)  # float() took "١" (Arabic-Indic) and "1_0", as int() did
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number (ASCII digits 0-9)") from None
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be >= {minimum}")
    if value > maximum:
        raise ImproperlyConfigured(f"{name}={value} must be <= {maximum}")
    return value


# 0/min throttled every request (429 for all); ASCII digits only ("١٢/min" was taken: \d is any digit)
_RATE = re.compile(r"[1-9][0-9]*/[smhd][a-z]*")


def env_rate(name: str, default: str) -> str:
    """A DRF throttle rate ``N/period`` (period starting with s, m, h or d: ``30/min``); raises
    ImproperlyConfigured otherwise (DRF would fail every request with a 500)."""
    value = env_str(name, default).strip()
    if not _RATE.fullmatch(value):
        raise ImproperlyConfigured(f"{name}={value!r} is not a rate like 30/min (N/s, N/min, N/hour or N/day)")
    return value


def env_log_level(name: str, default: str) -> str:
    """A logging level name (DEBUG, INFO, WARNING, ERROR, CRITICAL; any case)."""
    value = env_str(name, default).strip().upper()
    if value not in logging.getLevelNamesMapping():
        raise ImproperlyConfigured(f"{name}={value!r} is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL)")
    return value


def env_url(name: str, default: str) -> str:
    """An ``http://`` or ``https://`` URL with a host, or "" (unset); raises ImproperlyConfigured."""
    value = env_str(name, default).strip()
    if value and not (re.fullmatch(r"https?://[^/\s?#]+(/\S*)?", value) and _names_a_server(value)):
        raise ImproperlyConfigured(f"{name}={value!r} is not an http(s) URL such as https://fairway.example.org")
    return value


def _names_a_server(url: str) -> bool:
    """``url`` has a host and, if any, a port of 1-65535, as ``urlsplit`` reads them: the pattern
    above took ``http://[::1`` (a bracket left open) and ``:99999``, and the join's answer, built
    with ``urlsplit`` after the host was registered, was a 500 (brk51)."""
    try:
        parts = urlsplit(url)
        return bool(parts.hostname) and parts.port != 0
    except ValueError:  # a bad bracket, a port not a number or out of range
        return False


def env_email_backend(name: str, default: str) -> str:
    """The dotted path of a Django email backend class (a ``BaseEmailBackend``); raises
    ImproperlyConfigured otherwise. A typo started the server and failed at every send (left47)."""
    from django.core.mail.backends.base import BaseEmailBackend
    from django.utils.module_loading import import_string

    value = env_str(name, default).strip()
    try:
        backend = import_string(value)
    except ImportError as exc:
        problem = str(exc)
    else:
        if isinstance(backend, type) and issubclass(backend, BaseEmailBackend):
            return value
        problem = "not a subclass of django.core.mail.backends.base.BaseEmailBackend"
    raise ImproperlyConfigured(
        f"{name}={value!r} is not an email backend such as django.core.mail.backends.smtp.EmailBackend: {problem}"
    )


def env_email(name: str, default: str) -> str:
    """An email address, bare or as ``Name <address>``; raises ImproperlyConfigured otherwise (a
    sender the mail server refuses failed every notification, brk51)."""
    from email.utils import parseaddr

    from django.core.exceptions import ValidationError
    from django.core.validators import validate_email

    value = env_str(name, default).strip()
    try:
        validate_email(parseaddr(value)[1])
    except ValidationError:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not an email address such as fairway@lab.example.org"
            " or Fairway <fairway@lab.example.org>"
        ) from None
    return value


def env_redis_url(name: str) -> str:
    """A ``redis://``, ``rediss://`` or ``unix://`` URL as redis-py reads it, its database (the path)
    a number, or "" (unset); raises ImproperlyConfigured without quoting it (it may hold a password).
    redis-py raised a ValueError traceback at start for ``localhost:6379``, and read the database of
    ``redis://h/abc`` as 0 (another deployment's) and of ``/1_0`` as 10 (brk47)."""
    value = os.environ.get(name, "")
    if value:
        from redis.connection import parse_url

        try:
            parse_url(value)
            if value.startswith(("redis://", "rediss://")) and not re.fullmatch(r"/?[0-9]*", urlsplit(value).path):
                raise ValueError("the database is a number (the URL's path, e.g. /0)")
        except ValueError as exc:
            raise ImproperlyConfigured(f"{name} is not a Redis URL such as redis://127.0.0.1:6379/0: {exc}") from None
    return value


def env_domains(name: str) -> list[str]:
    """Comma-separated mail domains, lower case (``Lab.example.org, cs.example.edu``); unset: []."""
    return [d.strip().lower() for d in env_str(name, "").split(",") if d.strip()]


def _secret_key() -> str:
    key = os.environ.get("SECRET_KEY")
    if key:
        return key
    path = VAR_DIR / "secret_key"
    try:  # an unwritable FAIRWAY_VAR_DIR or a directory there was a traceback (brk51)
        key = _read_or_make_key(path)
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ImproperlyConfigured(
            f"FAIRWAY_VAR_DIR={str(VAR_DIR)!r}: cannot read or write {path.name}: {why}"
            " (make the directory writable, or set SECRET_KEY)"
        ) from None
    if not key:  # an empty key was Django's refusal at the first request that signed anything
        raise ImproperlyConfigured(
            f"FAIRWAY_VAR_DIR={str(VAR_DIR)!r}: {path.name} is empty (remove it to have one made, or set SECRET_KEY)"
        )
    return key


def _read_or_make_key(path: Path) -> str:
    if path.exists():
        owner_only(path)  # one written 0644 by an earlier version
    else:
        # Created 0600 with its content, then linked into place: never readable by others, and
        # processes starting together all read the one key that won the link.
        tmp = VAR_DIR / f".secret_key.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, secrets.token_urlsafe(50).encode())
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [
    h.strip() for h in env_str("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver").split(",") if h.strip()
]
# Django matches the Host header, its port taken off, against these: a URL (written as
# CSRF_TRUSTED_ORIGINS is), a path or a port matched no request, nor did a list of blanks, and every
# request was a 400 (DisallowedHost) that Django's checks do not foresee (brk51).
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured(f"ALLOWED_HOSTS={os.environ.get('ALLOWED_HOSTS')!r} names no host")
for _host in ALLOWED_HOSTS:
    if "/" in _host or re.search(r":[0-9]*$", _host.rpartition("]")[2]):
        raise ImproperlyConfigured(
            f"ALLOWED_HOSTS={_host!r} is not a host name: write it as fairway.example.org (no scheme, path or port)"
        )
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]
# Django's check of it (4_0.E001) stops manage.py commands only: the web process runs no checks, and
# started taking nothing from an origin without its scheme (brk51).
for _origin in CSRF_TRUSTED_ORIGINS:
    if not re.fullmatch(r"[a-z][a-z0-9+.-]*://[^/\s]+", _origin, flags=re.IGNORECASE):
        raise ImproperlyConfigured(
            f"CSRF_TRUSTED_ORIGINS={_origin!r} is not an origin such as https://fairway.example.org"
            " (scheme://host[:port], comma-separated)"
        )

INSTALLED_APPS = [
    # first: its `changepassword` (saying which API tokens the change ended) wins over django.contrib.auth's
    "accounts",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "django_filters",
    "channels",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc served from the package (offline)
    "django_htmx",
    "budgets",
    "scheduler",
    # after scheduler: its `rundramatiq` (refused in production without Redis) wins over this app's
    "django_dramatiq",
    "web",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.InputGuardMiddleware",  # NUL in path/query, oversize bodies: before anything reads them
    "config.middleware.DatabaseBusyMiddleware",  # no database connection to be had: 503, not 500
    "config.redis_trip.OneRedisTripMiddleware",  # the request's deferred Redis writes: one round trip at its end
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "config.middleware.LazyMessageMiddleware",  # Django's, the storage made when first used
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

ASGI_APPLICATION = "config.asgi.application"
# HTTP requests one web process holds at once (config/overload.py); beyond: 503 + Retry-After.
FAIRWAY_WEB_MAX_IN_FLIGHT = env_int("FAIRWAY_WEB_MAX_IN_FLIGHT", 32, minimum=1)

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'fairway.sqlite3'}")
try:
    # CONN_HEALTH_CHECKS: a connection the server ended (a PostgreSQL restart, a failover,
    # pg_terminate_backend) is never reused: with the pool, psycopg's pool checks each connection
    # it hands out (ConnectionPool.check_connection, one empty query) and replaces a dead one;
    # without it, Django checks a kept connection before a request reuses it; the first dead one
    # makes the pool check all its idle ones (config/dbpool.py). Before (pool58): one 500 per idle
    # pooled connection of each process after a restart (docs/deploy.md §4).
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=0, conn_health_checks=True)}
except Exception as exc:  # dj_database_url raises several types on a bad URL
    # never quoted: the URL may hold a password (brk47); the reason names the part that is wrong
    raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] not in ("django.db.backends.sqlite3", "django.db.backends.postgresql"):
    # mysql:// and the like parse, then failed at the first query on a missing driver (deploy48)
    raise ImproperlyConfigured(
        "DATABASE_URL names a database Fairway does not run on "
        f"({DATABASE_URL.partition(':')[0][:20]}): give postgres://USER:PASSWORD@HOST:5432/NAME (or unset it: SQLite)"
    )
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    if DATABASES["default"]["NAME"] not in ("", ":memory:"):
        if _problem := sqlite_file_problem(DATABASES["default"]["NAME"]):  # before owner_only changes its mode
            raise ImproperlyConfigured(f"DATABASE_URL names {str(DATABASES['default']['NAME'])!r}, {_problem}")
        owner_only(DATABASES["default"]["NAME"])  # workloads may run on this machine (docs/deploy.md)
    # Several threads (web, worker, clock) share one file in the embedded mode.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update({"timeout": 30, "transaction_mode": "IMMEDIATE"})
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # JIT off for every connection (docs/deploy.md): PostgreSQL compiles any statement whose
    # estimated cost passes ``jit_above_cost``; this application's statements are short index
    # lookups and bulk writes, and compiling took longer than running them (the tick's reasons
    # UPDATE 1.09 s with it, 0.52 s without; the push's read 0.4-5 s on a fresh database, lat32).
    # An ``options`` given in the URL (``?options=...``) is kept as it is.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("options", "-c jit=off")
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool("FAIRWAY_DB_POOL", True):
    # psycopg's connection pool (Django 5.1+; CONN_MAX_AGE stays 0), on by default on PostgreSQL: a
    # connection is borrowed per request / per database_sync_to_async call instead of opened and
    # closed each time (without it, 100 req/s opened 100 connections a second and PostgreSQL ran
    # out: "too many clients"). Sizing rule (docs/deploy.md "Sizing"): every process of the layout
    # has its own pool, so max_size = (max_connections - reserve) // processes, where the processes
    # are the Procfile's WEB_WORKERS + WORKER_PROCESSES + the estimates process + the clock + one for
    # manage.py commands.
    # A request that finds its pool empty for FAIRWAY_DB_POOL_TIMEOUT_S is answered 503 (never
    # 500; config.middleware.DatabaseBusyMiddleware). `manage.py scenario --backend db` and the
    # test runner close the pool when they switch databases.
    DB_MAX_CONNECTIONS = env_int("FAIRWAY_DB_MAX_CONNECTIONS", 100, minimum=4)
    DB_PROCESSES = env_int(
        "FAIRWAY_DB_PROCESSES",
        env_int("WEB_WORKERS", 2, minimum=1) + env_int("WORKER_PROCESSES", 2, minimum=1) + 3,
        minimum=1,
    )
    _reserve = max(3, DB_MAX_CONNECTIONS // 10)  # superuser slots, psql, migrations, backups
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("FAIRWAY_DB_POOL_MIN_SIZE", 1, minimum=1),
        "max_size": env_int(
            "FAIRWAY_DB_POOL_MAX_SIZE", max(2, (DB_MAX_CONNECTIONS - _reserve) // DB_PROCESSES), minimum=1
        ),
        "timeout": env_float("FAIRWAY_DB_POOL_TIMEOUT_S", 10.0, minimum=0.1),
    }
    _pool = DATABASES["default"]["OPTIONS"]["pool"]
    if _pool["min_size"] > _pool["max_size"]:
        raise ImproperlyConfigured(
            f"FAIRWAY_DB_POOL_MIN_SIZE={_pool['min_size']} must be <= the pool's max size {_pool['max_size']} "
            "(FAIRWAY_DB_POOL_MAX_SIZE, or computed from FAIRWAY_DB_MAX_CONNECTIONS and FAIRWAY_DB_PROCESSES)"
        )

# The threads a web process runs its synchronous requests on (config.overload.SyncThreadPool): a
# bounded pool reused across requests, as a WSGI server's, instead of asgiref's new thread per
# request. Default: the pool's max size, so the web threads never outnumber pooled connections
# (8 without a pool).
FAIRWAY_WEB_SYNC_THREADS = env_int(
    "FAIRWAY_WEB_SYNC_THREADS",
    DATABASES["default"].get("OPTIONS", {}).get("pool", {}).get("max_size", 8),
    minimum=1,
)
# An interactive session (``fairway exec -it``, ``/ws/exec/``) or a forwarded connection (``fairway
# port-forward``, ``/ws/port-forward/``) that nothing went in or out of for this long is ended, a
# session's processes killed (docs/jobs.md, "Run a command in a running workload").
FAIRWAY_EXEC_IDLE_TIMEOUT = env_int("FAIRWAY_EXEC_IDLE_TIMEOUT", 3600, minimum=1, maximum=7 * 24 * 3600)
# Interactive sessions one web process holds at once, of them one person at most half
# (scheduler.exec_session; exl61): each holds a websocket and up to 256 KiB of output in flight.
FAIRWAY_EXEC_MAX_SESSIONS = env_int("FAIRWAY_EXEC_MAX_SESSIONS", 256, minimum=1, maximum=1 << 16)

AUTH_USER_MODEL = "accounts.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

LANGUAGE_CODE = "en-us"
# The admin's date-times in the pages' words (config/formats/en/formats.py: "Dec 6 2026 17:41 UTC").
FORMAT_MODULE_PATH = ["config.formats"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# collectstatic's target (the server image collects into /opt/fairway/static at build time).
STATIC_ROOT = Path(os.environ.get("FAIRWAY_STATIC_ROOT") or VAR_DIR / "static")
STATICFILES_DIRS = [BASE_DIR / "static"]  # Fairway's own CSS; third-party assets come from their packages
try:  # a missing parent or a file there was a FileNotFoundError / FileExistsError traceback (brk51)
    STATIC_ROOT.mkdir(exist_ok=True)
except FileExistsError:
    raise ImproperlyConfigured(f"FAIRWAY_STATIC_ROOT={str(STATIC_ROOT)!r} is not a directory") from None
except OSError as _exc:
    raise ImproperlyConfigured(f"FAIRWAY_STATIC_ROOT={str(STATIC_ROOT)!r} cannot be created: {_exc.strerror}") from None
# WhiteNoise serves static files from the web process; it also finds them in the apps, so the
# embedded mode works without `collectstatic` (production runs collectstatic for compression).
WHITENOISE_USE_FINDERS = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_redis_url("REDIS_URL")
# The broker's and the markers' Redis clients (the clock, the workers, the web's sends) wait at
# most this long to connect and for an answer: a Redis that accepts and never answers, or drops
# SYNs, fails a clock beat in one line and it tries again (left50), never waits on redis-py's
# default (5 s in redis-py 8, none before). The web's cache takes both (left51), the channel layer
# the connect timeout: it reads with its own 30 s (below).
REDIS_CONNECT_TIMEOUT_S = env_float("FAIRWAY_REDIS_CONNECT_TIMEOUT_S", 5.0, minimum=0.1)
REDIS_SOCKET_TIMEOUT_S = env_float("FAIRWAY_REDIS_SOCKET_TIMEOUT_S", 5.0, minimum=0.1)
REDIS_CLIENT_TIMEOUTS = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S, "socket_timeout": REDIS_SOCKET_TIMEOUT_S}
"""redis-py's keyword arguments of :data:`REDIS_CONNECT_TIMEOUT_S` and :data:`REDIS_SOCKET_TIMEOUT_S`."""

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # redis-py 8 reads with a 5 s socket timeout by default, exactly channels-redis's 5 s
            # BZPOPMIN: a busy event loop then kills consumers with TimeoutError; and its pool of
            # 100 connections is too small for a web process holding ~1,000 agents. Its connect waits
            # FAIRWAY_REDIS_CONNECT_TIMEOUT_S (left51: redis-py's default, 5 s an attempt).
            "CONFIG": {
                "hosts": [
                    {
                        "address": REDIS_URL,
                        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
                        "socket_timeout": 30,
                        "max_connections": 1000,
                    }
                ],
                "capacity": 1000,
                "expiry": 30,
            },
        }
    }
    DRAMATIQ_BROKER = {
        "BROKER": "dramatiq.brokers.redis.RedisBroker",
        # dramatiq builds its pool from the URL alone (other options would not reach it): the
        # timeouts as the URL's query, which redis-py reads
        "OPTIONS": {"url": f"{REDIS_URL}{'&' if '?' in REDIS_URL else '?'}{urlencode(REDIS_CLIENT_TIMEOUTS)}"},
        "MIDDLEWARE": [
            "dramatiq.middleware.AgeLimit",
            "dramatiq.middleware.TimeLimit",
            "dramatiq.middleware.Callbacks",
            "dramatiq.middleware.Retries",
            "django_dramatiq.middleware.DbConnectionsMiddleware",
            "scheduler.worker_boot.ForgetEstimateMarkers",  # a restarted estimates process resumes at once
        ],
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    DRAMATIQ_BROKER = {
        "BROKER": "dramatiq.brokers.stub.StubBroker",
        "OPTIONS": {},
        "MIDDLEWARE": [
            "dramatiq.middleware.AgeLimit",
            "dramatiq.middleware.TimeLimit",
            "dramatiq.middleware.Callbacks",
            "dramatiq.middleware.Retries",
            "django_dramatiq.middleware.DbConnectionsMiddleware",
            "scheduler.worker_boot.ForgetEstimateMarkers",  # a restarted estimates process resumes at once
        ],
    }
DRAMATIQ_AUTODISCOVER_MODULES = ["tasks"]

# The cache holds the API's throttle counters: with REDIS_URL they are shared by every web
# process (Django's built-in RedisCache), else each process counts alone (local memory).
CACHE_KEY_PREFIX = env_str("FAIRWAY_CACHE_PREFIX", "fairway")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "config.cache.FairwayRedisCache",  # Django's, one client object per pool
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": CACHE_KEY_PREFIX,
            "TIMEOUT": 3600,
            # its redis-py pool's keyword arguments: the connect and read bounds (left51)
            "OPTIONS": dict(REDIS_CLIENT_TIMEOUTS),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "KEY_PREFIX": CACHE_KEY_PREFIX}}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.auth.FairwayTokenAuthentication",  # knox, one query per request
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "config.pagination.FairwayLimitOffsetPagination",
    "DEFAULT_PARSER_CLASSES": [
        "config.parsers.FairwayJSONParser",  # 400, not 500, on over-deep nesting and lone surrogates
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "PAGE_SIZE": 100,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Counted in the default cache (shared through Redis when REDIS_URL is set, see CACHES): DRF's
    # sliding log, decided in one round trip on Redis (config/throttling.py).
    "DEFAULT_THROTTLE_CLASSES": [
        "config.throttling.AnonRateThrottle",
        "config.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env_rate("FAIRWAY_THROTTLE_ANON", "120/min"),
        "user": env_rate("FAIRWAY_THROTTLE_USER", "6000/min"),
        "login": env_rate("FAIRWAY_THROTTLE_LOGIN", "30/min"),  # per client address
        "login_user": env_rate("FAIRWAY_THROTTLE_LOGIN_USER", "10/min"),  # failures per (user name, address)
        # failed agent authentications (/ws/agent/ host tokens) per address (scheduler/agent_auth_limit.py)
        "agent_auth": env_rate("FAIRWAY_THROTTLE_AGENT_AUTH", "30/min"),
        "quote": env_rate("FAIRWAY_THROTTLE_QUOTE", "30/min"),  # per user: a quote is a forward simulation
        "exec": env_rate("FAIRWAY_THROTTLE_EXEC", "30/min"),  # per user: a command on a GPU host (fairway exec)
    },
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Fairway API",
    "DESCRIPTION": (
        "GPU scheduling with GPU-time budgets. Authenticate with `Authorization: Token <token>` "
        "(POST /api/v1/auth/login/ or a personal API token). Every 4xx answer has one format: "
        '`{"detail": "...", "code": "..."}`, or for 400 `{"<field>": ["message"], "code": "..."}`.'
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "PARSER_WHITELIST": ["config.parsers.FairwayJSONParser"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.schema.add_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "EndReasonEnum": "scheduler.models.Attempt.EndReason",
        "WorkloadStateEnum": "scheduler.models.Workload.State",
        "HostStateEnum": "scheduler.models.Host.State",
        "GpuHealthEnum": "scheduler.models.GPU.Health",
    },
}
REST_KNOX = {"TOKEN_TTL": None, "AUTO_REFRESH": False}

# --- Fairway scheduling settings (DESIGN.md §1, §3, §4) ---------------------------
FAIRWAY = {
    "LOOKBACK_WINDOW_S": env_int("FAIRWAY_LOOKBACK_WINDOW_S", 7 * 24 * 3600, minimum=60),
    "MAX_RESERVATIONS": env_int("FAIRWAY_MAX_RESERVATIONS", 8, minimum=0),
    "MAX_MINIMUM_RUNTIME_S": env_int("FAIRWAY_MAX_MINIMUM_RUNTIME_S", 24 * 3600, minimum=0),
    # Every start and stop carries it to the agent (agent/protocol.py ``GraceSeconds``: at most 7 days;
    # beyond, no start or stop could be sent: brk32).
    "GRACE_PERIOD_S": env_int("FAIRWAY_GRACE_PERIOD_S", 30, minimum=0, maximum=7 * 86400),
    "START_TIMEOUT_S": env_int("FAIRWAY_START_TIMEOUT_S", 600, minimum=1),
    "HOST_OFFLINE_AFTER_S": env_int("FAIRWAY_HOST_OFFLINE_AFTER_S", 30, minimum=1),
    "HOST_LOST_AFTER_S": env_int("FAIRWAY_HOST_LOST_AFTER_S", 300, minimum=1),
    # A host whose last N attempts (of at least two workloads) all failed to start is cordoned,
    # so one broken host cannot burn every workload's retries (docs/deploy.md); 0: never.
    "HOST_START_FAILURES": env_int("FAIRWAY_HOST_START_FAILURES", 3, minimum=0),
    "AUTO_DRAIN_ON_GPU_FAULT": env_bool("FAIRWAY_AUTO_DRAIN_ON_GPU_FAULT", True),
    # Days of per-minute GPU samples kept (scheduler/metrics.py); read here so that a bad value
    # stops the process at start, not every hourly prune in a worker (try34).
    # Days a login token (``POST /api/v1/auth/login/``, ``fairway login``) works, fixed from its
    # creation (docs/deploy.md "API tokens"); 0: never expires. Personal tokens keep their own.
    "LOGIN_TOKEN_DAYS": env_int("FAIRWAY_LOGIN_TOKEN_DAYS", 30, minimum=0, maximum=3650),
    "GPU_METRICS_RETENTION_DAYS": env_int("FAIRWAY_GPU_METRICS_RETENTION_DAYS", 30, minimum=1, maximum=36500),
    # Idle GPU alerts (scheduler/idle.py, docs/jobs.md "Idle GPUs"): a running attempt whose every GPU
    # reports under IDLE_UTIL_PCT % for IDLE_AFTER_S seconds is idle; its owner is told. 0 s: off.
    "IDLE_UTIL_PCT": env_float("FAIRWAY_IDLE_UTIL_PCT", 1.0, minimum=0.0, maximum=100.0),
    "IDLE_AFTER_S": env_int("FAIRWAY_IDLE_AFTER_S", 3600, minimum=0),
    "TICK_INTERVAL_S": env_float("FAIRWAY_TICK_INTERVAL_S", 5.0, minimum=0.1),
    "ESTIMATE_INTERVAL_S": env_float("FAIRWAY_ESTIMATE_INTERVAL_S", 60.0, minimum=0.5),
    # A tick that starts, stops or sees new pending work asks for estimates this much later
    # (debounce: a burst of ticks costs one run; one run per cluster at a time).
    "ESTIMATE_DEBOUNCE_S": env_float("FAIRWAY_ESTIMATE_DEBOUNCE_S", 2.0, minimum=0.0),
    # A cluster's next estimate run begins at least this long after its last one ended, however
    # often ticks ask: bounds the estimates' CPU under a stream of submissions (docs/estimates.md).
    "ESTIMATE_MIN_GAP_S": env_float("FAIRWAY_ESTIMATE_MIN_GAP_S", 15.0, minimum=0.0),
    "TICK_DEBOUNCE_S": env_float("FAIRWAY_TICK_DEBOUNCE_S", 0.5, minimum=0.0),
    # A workload's page asks again for its state and its live log this often while it is not
    # final (web/templatetags/fairway.py ``page_refresh_s``; the page says so beside the log).
    "PAGE_REFRESH_S": env_float("FAIRWAY_PAGE_REFRESH_S", 3.0, minimum=0.5, maximum=600),
    # The welcome carries it to the agent (agent/protocol.py ``Welcome.heartbeat_s``: at most 3600 s).
    "HEARTBEAT_S": env_float("FAIRWAY_HEARTBEAT_S", 5.0, minimum=0.1, maximum=3600),
    # The web process writes the heartbeats it received in one batch this often (at most a quarter
    # of HEARTBEAT_S); a stopping process loses at most this much of them. A heartbeat waits up to
    # this long before its write: 0.5 s keeps receipt → committed under 1 s (issue 15, point 5).
    "HEARTBEAT_FLUSH_S": env_float("FAIRWAY_HEARTBEAT_FLUSH_S", 0.5, minimum=0.01),
    # Threads per web process for the agent connections' database work (connects, hellos, attempt
    # events; scheduler.gateway.agent_db): each borrows a pooled connection while it runs, so a web
    # process holds up to this + 3 (docs/deploy.md, "Sizing"). SQLite: 1.
    "AGENT_DB_THREADS": env_int("FAIRWAY_AGENT_DB_THREADS", 4, minimum=1),
    # A web process's young-generation GC threshold after its startup objects are frozen
    # (config/heap.py); 0 would switch automatic collection off, a non-number was a traceback.
    "GC_YOUNG_THRESHOLD": env_int("FAIRWAY_GC_YOUNG_THRESHOLD", 10_000, minimum=1),
    # Base URL agents reach this server at (install script, join answers); "" = the request's own.
    "PUBLIC_URL": env_url("FAIRWAY_PUBLIC_URL", ""),
    # Jobs (docs/jobs.md): the longest wall-time limit a workload may ask, the most retries,
    # the most members of one array.
    "MAX_RUNTIME_LIMIT_S": env_int("FAIRWAY_MAX_RUNTIME_LIMIT_S", 7 * 24 * 3600, minimum=1),
    "MAX_RETRIES": env_int("FAIRWAY_MAX_RETRIES", 10, minimum=0),
    "MAX_ARRAY_SIZE": env_int("FAIRWAY_MAX_ARRAY_SIZE", 1000, minimum=1),
    # The most pending + running workloads one user may hold, array members one by one (Slurm's
    # MaxSubmitJobs; lim42: the throttle alone let one user queue millions); 0: no limit.
    "MAX_SUBMITTED_PER_USER": env_int("FAIRWAY_MAX_SUBMITTED_PER_USER", 10_000, minimum=0, maximum=10**9),
    # The most workloads one bulk cancel, hold or release (and its preview) may match: a larger match
    # is refused whole (scheduler.bulk, docs/jobs.md "Bulk actions"). It bounds one request's work
    # (a short transaction per workload) and its answer.
    "BULK_MAX": env_int("FAIRWAY_BULK_MAX", 10_000, minimum=1, maximum=10**7),
    # Notifications (docs/jobs.md): webhook hosts allowed besides public addresses (comma list,
    # e.g. "hooks.slack.com,10.0.0.5"); private, loopback and link-local targets are refused
    # unless listed here.
    "WEBHOOK_ALLOW_HOSTS": [
        h.strip().lower() for h in env_str("FAIRWAY_WEBHOOK_ALLOW_HOSTS", "").split(",") if h.strip()
    ],
    "NOTIFY_FROM_EMAIL": env_email("FAIRWAY_NOTIFY_FROM_EMAIL", "fairway@localhost"),
}

# Outgoing email for notifications (docs/jobs.md): Django's own settings, read from the env.
EMAIL_BACKEND = env_email_backend("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)

# A host goes offline first, then lost (DESIGN.md §4): lost before offline would end its attempts
# while it still showed online, and offline would never be seen.
if FAIRWAY["HOST_OFFLINE_AFTER_S"] >= FAIRWAY["HOST_LOST_AFTER_S"]:
    raise ImproperlyConfigured(
        f"FAIRWAY_HOST_OFFLINE_AFTER_S={FAIRWAY['HOST_OFFLINE_AFTER_S']} must be less than "
        f"FAIRWAY_HOST_LOST_AFTER_S={FAIRWAY['HOST_LOST_AFTER_S']}"
    )

# An agent heartbeats every HEARTBEAT_S (its welcome says so) and nothing else keeps its host alive:
# a period as long as the offline threshold had every host offline between heartbeats, and past the
# lost one every attempt on every host ended lost (brk46b). Decision: at least two heartbeats per
# offline threshold, so one late or lost heartbeat never takes a host offline (as Kubernetes' node
# grace period spans several status updates).
if 2 * FAIRWAY["HEARTBEAT_S"] > FAIRWAY["HOST_OFFLINE_AFTER_S"]:
    raise ImproperlyConfigured(
        f"FAIRWAY_HEARTBEAT_S={FAIRWAY['HEARTBEAT_S']:g} must be at most half of "
        f"FAIRWAY_HOST_OFFLINE_AFTER_S={FAIRWAY['HOST_OFFLINE_AFTER_S']}"
        ": a host goes offline after that much silence, so one late heartbeat would take it offline"
    )

# The hosts' first normal gid (useradd's GID_MIN): the user admin refuses a lower gid or extra
# group (a system group: disk, docker, gid 0) while no cluster allows root workloads (docs/isolation.md).
FAIRWAY_POSIX_MIN_GID = env_int("FAIRWAY_POSIX_MIN_GID", 1000, minimum=1, maximum=2**31 - 1)
# The hosts' first normal uid (the agents' isolation.nss_min_uid, useradd's UID_MIN): the user admin
# refuses a lower posix_uid (a system account) likewise (docs/isolation.md).
FAIRWAY_POSIX_MIN_UID = env_int("FAIRWAY_POSIX_MIN_UID", 1000, minimum=1, maximum=2**31 - 1)

# Prometheus scrape of /metrics: with a token set, the scrape sends `Authorization: Bearer <token>`.
FAIRWAY_METRICS_TOKEN = env_str("FAIRWAY_METRICS_TOKEN", "")
# A scrape sends it in a header (scheduler.prom.scrape_authorized): a blank at an end is cut from the
# header, a non-ASCII byte reads as Latin-1; such a token answered every scrape 401 for good (brk51).
if FAIRWAY_METRICS_TOKEN and not re.fullmatch(r"[!-~]([ -~]*[!-~])?", FAIRWAY_METRICS_TOKEN):
    raise ImproperlyConfigured(  # never quoted: a secret
        "FAIRWAY_METRICS_TOKEN holds a blank at an end, a control character or one that is not ASCII:"
        " no scrape can send it (Authorization: Bearer <token>); use printable ASCII"
    )
# Per web process, seconds an answer is kept: /readyz's check results (any caller), and /metrics's
# exposition while no token is set (anyone may scrape): a flood costs one set of queries each.
FAIRWAY_READYZ_CACHE_S = env_float("FAIRWAY_READYZ_CACHE_S", 1.0, minimum=0.0, maximum=60.0)
FAIRWAY_METRICS_CACHE_S = env_float("FAIRWAY_METRICS_CACHE_S", 5.0, minimum=0.0, maximum=300.0)

# --- Production (docs/deploy.md) ---------------------------------------------------------------
# FAIRWAY_ENV=production turns on safe defaults behind a TLS-terminating proxy; each one can be
# overridden by its own variable. `manage.py check --deploy` is clean with these defaults (tested).
# A process started niced (the estimates, `nice -n 10`) keeps that priority against the web
# processes' sessions too, not only inside its own (config/priority.py). Here: every manage.py
# command reads the settings before it runs (rundramatiq then execs dramatiq in the same process).
hold_nice_against_other_sessions()

FAIRWAY_ENV = env_str("FAIRWAY_ENV", "development").strip().lower()
if FAIRWAY_ENV not in {"development", "production"}:
    raise ImproperlyConfigured(f"FAIRWAY_ENV={FAIRWAY_ENV!r} must be development or production")
PRODUCTION = FAIRWAY_ENV == "production"
if PRODUCTION and not os.environ.get("SECRET_KEY"):
    raise ImproperlyConfigured("FAIRWAY_ENV=production needs SECRET_KEY (50+ random characters)")
# The examples' placeholders (deploy/fairway.env.example, .env.example) are public: never a key.
if PRODUCTION and SECRET_KEY.lower().startswith("change-me"):
    raise ImproperlyConfigured(
        "SECRET_KEY is the example's placeholder: set 50+ random characters "
        '(python -c "import secrets; print(secrets.token_urlsafe(60))")'
    )
# Django's deploy check W009, made a refusal: sessions, CSRF and reset links are signed with it.
if (
    PRODUCTION
    and not DEBUG
    and (len(SECRET_KEY) < SECRET_KEY_MIN_LENGTH or len(set(SECRET_KEY)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS)
):
    raise ImproperlyConfigured(
        f"SECRET_KEY has {len(SECRET_KEY)} characters, {len(set(SECRET_KEY))} distinct: production needs"
        f" {SECRET_KEY_MIN_LENGTH}+ characters and {SECRET_KEY_MIN_UNIQUE_CHARACTERS}+ distinct ones"
        ' (python -c "import secrets; print(secrets.token_urlsafe(60))")'
    )
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
# Prometheus and health checks may reach a web process directly over HTTP inside the lab.
SECURE_REDIRECT_EXEMPT = [r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if PRODUCTION else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
# Preloading is a commitment to browsers' lists, so it is opt-in; its deploy warning is silenced.
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", PRODUCTION)
SESSION_COOKIE_HTTPONLY = True
# The client address of a throttle is REMOTE_ADDR, or with N trusted reverse proxies the N-th
# address from the right of X-Forwarded-For (the one the outermost trusted proxy saw), which the
# client cannot choose. 0 ignores X-Forwarded-For (anyone can send one); production assumes the
# one TLS-terminating proxy of docs/deploy.md.
FAIRWAY_TRUSTED_PROXIES = env_int("FAIRWAY_TRUSTED_PROXIES", 1 if PRODUCTION else 0, minimum=0)
REST_FRAMEWORK["NUM_PROXIES"] = FAIRWAY_TRUSTED_PROXIES
# Behind the proxy: trust its X-Forwarded-Proto (set FAIRWAY_PROXY_SSL_HEADER=false without one).
if env_bool("FAIRWAY_PROXY_SSL_HEADER", PRODUCTION):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    USE_X_FORWARDED_HOST = env_bool("USE_X_FORWARDED_HOST", False)
if PRODUCTION:
    # Compressed, content-hashed files from `manage.py collectstatic` (the Procfile runs it).
    STORAGES = {
        "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", False)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # one format for every process: web, worker (dramatiq's own lines too), estimates, clock (left44)
    "formatters": {"plain": {"format": LOG_FORMAT}},
    # a refused request (403 PermissionDenied, 404, 405) is one line, not a traceback (brk30)
    "filters": {
        "client_errors_one_line": {"()": "django.utils.log.CallbackFilter", "callback": client_errors_one_line}
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_log_level("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.channels.server": {"level": "WARNING"},
        "django.request": {"filters": ["client_errors_one_line"]},
    },
}

# --- health and packaging (ops; scheduler/health.py, docs/deploy.md §10) ------------------------
# /readyz fails when a cluster has not ticked within this many tick intervals.
FAIRWAY_READYZ_TICK_INTERVALS = env_float("FAIRWAY_READYZ_TICK_INTERVALS", 3.0, minimum=1.0)
# Probes reach a web process over plain HTTP inside the lab, like Prometheus.
SECURE_REDIRECT_EXEMPT = [*SECURE_REDIRECT_EXEMPT, r"^livez$", r"^readyz$"]
# WhiteNoise streams static files asynchronously under the ASGI server (config/staticfiles.py).
MIDDLEWARE = [
    "config.staticfiles.AsgiWhiteNoiseMiddleware" if m == "whitenoise.middleware.WhiteNoiseMiddleware" else m
    for m in MIDDLEWARE
]

# --- single sign-on: OpenID Connect (accounts/oidc.py, docs/deploy.md "Single sign-on") ---------
# Off unless FAIRWAY_OIDC_CLIENT_ID is set; then the endpoints (from the provider's
# /.well-known/openid-configuration), the secret and the issuer are required. Local accounts and
# personal API tokens keep working next to it.
FAIRWAY_OIDC_CLIENT_ID = env_str("FAIRWAY_OIDC_CLIENT_ID", "")
OIDC_ENABLED = bool(FAIRWAY_OIDC_CLIENT_ID)
FAIRWAY_OIDC_ISSUER = env_str("FAIRWAY_OIDC_ISSUER", "")
FAIRWAY_OIDC_PROVIDER_NAME = env_str("FAIRWAY_OIDC_PROVIDER_NAME", "single sign-on")
FAIRWAY_OIDC_GROUPS_CLAIM = env_str("FAIRWAY_OIDC_GROUPS_CLAIM", "groups")
FAIRWAY_OIDC_LINK_BY_EMAIL = env_bool("FAIRWAY_OIDC_LINK_BY_EMAIL", True)
# sso46: an email counts as the provider's (linked by, copied, names accounts) only when it says
# email_verified true, or says nothing and the domain is listed here (accounts.oidc.verified_email);
# an email link to a staff or superuser account only when FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL is on.
FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS = env_domains("FAIRWAY_OIDC_TRUSTED_EMAIL_DOMAINS")
FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL = env_bool("FAIRWAY_OIDC_LINK_STAFF_BY_EMAIL", False)
FAIRWAY_OIDC_CREATE_USERS = env_bool("FAIRWAY_OIDC_CREATE_USERS", True)
# The claim a new account is named after (sec63; accounts.oidc.new_username): GPU hosts map user
# names to Unix users, so by default the provider's own `sub`, never a name people choose there;
# `email`: the local part of a verified email in one of FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS.
FAIRWAY_OIDC_USERNAME_CLAIM = env_str("FAIRWAY_OIDC_USERNAME_CLAIM", "sub") or "sub"
FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS = env_domains("FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS")
if FAIRWAY_OIDC_USERNAME_CLAIM == "email" and not FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS:
    raise ImproperlyConfigured(
        "FAIRWAY_OIDC_USERNAME_CLAIM=email names accounts after verified emails of listed domains only:"
        " set FAIRWAY_OIDC_USERNAME_EMAIL_DOMAINS (e.g. lab.example.org)"
    )
try:
    from accounts.oidc_rules import parse_group_rules

    FAIRWAY_OIDC_GROUP_RULES = parse_group_rules(env_str("FAIRWAY_OIDC_GROUP_RULES", ""))
except ValueError as exc:
    raise ImproperlyConfigured(str(exc)) from None
if OIDC_ENABLED:
    _oidc = {
        "OIDC_OP_AUTHORIZATION_ENDPOINT": "FAIRWAY_OIDC_AUTHORIZATION_ENDPOINT",
        "OIDC_OP_TOKEN_ENDPOINT": "FAIRWAY_OIDC_TOKEN_ENDPOINT",
        "OIDC_OP_USER_ENDPOINT": "FAIRWAY_OIDC_USERINFO_ENDPOINT",
        "OIDC_OP_JWKS_ENDPOINT": "FAIRWAY_OIDC_JWKS_ENDPOINT",
        "OIDC_RP_CLIENT_SECRET": "FAIRWAY_OIDC_CLIENT_SECRET",
    }
    _missing = [var for var in [*_oidc.values(), "FAIRWAY_OIDC_ISSUER"] if not os.environ.get(var)]
    if _missing:
        raise ImproperlyConfigured(f"FAIRWAY_OIDC_CLIENT_ID is set: also set {', '.join(_missing)}")
    for _name, _var in _oidc.items():
        # the endpoints as FAIRWAY_PUBLIC_URL: "idp.example.org/token" was taken, and every login's
        # callback failed on it (MissingSchema, a 500; brk51)
        globals()[_name] = os.environ[_var] if _name == "OIDC_RP_CLIENT_SECRET" else env_url(_var, "")
    FAIRWAY_OIDC_ISSUER = env_url("FAIRWAY_OIDC_ISSUER", "")  # OpenID Connect's iss: a URL
    OIDC_RP_CLIENT_ID = FAIRWAY_OIDC_CLIENT_ID
    OIDC_RP_SCOPES = env_str("FAIRWAY_OIDC_SCOPES", "openid email profile")
    # Space-separated and case-sensitive (RFC 6749 §3.3): without openid the provider answers plain
    # OAuth 2.0, no ID token, and every SSO login failed at the callback (flood51).
    if "openid" not in OIDC_RP_SCOPES.split():
        raise ImproperlyConfigured(
            f"FAIRWAY_OIDC_SCOPES={OIDC_RP_SCOPES!r} must include openid (space-separated scopes: openid email profile)"
        )
    OIDC_RP_SIGN_ALGO = env_str("FAIRWAY_OIDC_SIGN_ALGO", "RS256")
    # What mozilla-django-oidc checks: RS*/ES* with the provider's keys, any other with the client
    # secret (HS*); another name failed every login at its callback, "none" with a 500 (brk51).
    _SIGN_ALGOS = [f"{family}{bits}" for family in ("RS", "ES", "HS") for bits in (256, 384, 512)]
    if OIDC_RP_SIGN_ALGO not in _SIGN_ALGOS:
        raise ImproperlyConfigured(
            f"FAIRWAY_OIDC_SIGN_ALGO={OIDC_RP_SIGN_ALGO!r} is not one of {', '.join(_SIGN_ALGOS)}"
        )
    OIDC_USE_PKCE = True
    OIDC_TIMEOUT = 10
    LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
    AUTHENTICATION_BACKENDS = ["accounts.oidc.FairwayOIDCBackend", "django.contrib.auth.backends.ModelBackend"]
