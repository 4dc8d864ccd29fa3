"""The ``fairway`` command: log in, submit, list, show (why pending, estimated start), cancel,
logs, budgets, hosts. Tables for people, ``--json`` for scripts (one document on stdout of what was
done; a refusal prints none there, only its words on stderr and the exit code, as gh and kubectl).

Exit codes: one table, :func:`exit_codes_text` (``fairway --help`` says it, README too): 0 success,
1 refused, 2 bad usage, 3 unreachable or failed, 4 not logged in, 75 unavailable or throttled for a
moment (a 503, a 429: try again); ``fairway wait``'s own (:func:`wait_for`) and ``fairway exec``'s command's.

Configuration: ``$FAIRWAY_CONFIG`` or ``$XDG_CONFIG_HOME/fairway/config.json`` (default
``~/.config/fairway/config.json``, mode 0600) holds ``server`` and ``token``; ``$FAIRWAY_URL``
and ``$FAIRWAY_TOKEN`` override it. The saved token goes only to the saved server: a command
talking to another one (``--server``, ``$FAIRWAY_URL``) sends ``$FAIRWAY_TOKEN`` or nothing.
A config readable by others is made 0600 when read (and said on stderr).
"""

from __future__ import annotations

import argparse
import base64
import contextvars
import getpass
import io
import json
import os
import re
import shlex
import stat
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar
from urllib.parse import urlsplit

import requests

from fairway_cli import __version__, waiting
from fairway_cli.args import duration_s, positive_number, whole_number
from fairway_cli.numbers import (
    CLEARABLE,
    duration_text,
    gpu_hours_text,
    gpu_time_text,
    instant_text,
    means_none,
    percent_text,
    sample_age_text,
)
from fairway_cli.waiting import (
    BACKOFF,
    CAP_FACTOR,
    FIRST_INTERVAL_S,
    GIVE_UP_S,
    GIVE_UP_TRIES,
    GaveUp,
    Outage,
    Outcome,
    TryLater,
    poll_until_final,
)
from fairway_cli.words import (
    AVAILABILITY_MEANS,
    IMPACT_PER_BUDGET_MEANS,
    NO_PYRAMID_HOURS,
    NO_UNFINISHED_WORKLOADS,
    NO_WORKLOADS_MATCH,
    RETRIES_WORDS,
    THROTTLED_STATUS,
    THROTTLED_WORDS,
    TRY_LATER_STATUSES,
    UNAVAILABLE_STATUS,
    UNAVAILABLE_TEXT,
    UNFUNDED_ATTEMPT,
    boost_cell,
    budget_hint_text,
    bulk_stopping_text,
    draining_host_words,
    efficiency_lines,
    end_words,
    group_unchanged_text,
    hold_unchanged_text,
    host_reason_words,
    host_state_words,
    idle_held_text,
    in_brackets,
    in_flags,
    no_attempt_text,
    nothing_to_change_text,
    occupancy_now_text,
    occupancy_parts_text,
    quote_start_text,
    rank_words,
    reason_words,
    resubmitted_as_text,
    resubmitted_from_text,
    retry_after_s,
    running_limit_text,
    silent_host_words,
    throttled_text,
    try_again_words,
    try_later_text,
    unavailable_text,
    unfunded_text,
    unknown_budget_text,
    utilization_cells,
    why_waits_text,
)
from fairway_common.durations import back_problem
from fairway_common.limits import DEFAULT_LOG_TAIL_BYTES, EXEC_MAX_TIMEOUT_S, MAX_BACK_DAYS, MAX_LOG_TAIL_BYTES

EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_AUTH = 0, 1, 2, 3, 4
NOT_LOGGED_IN_TEXT = "not logged in, or the token was revoked: run `fairway login`"
TOKEN_EXPIRED = "token_expired"  # noqa: S105 -- an error code, not a secret
SUBMIT_LIMIT = "too_many_submitted"
"""The API's 429 of a submission past the per-user limit (``scheduler.services.SUBMIT_LIMIT_CODE``):
a standing limit until some work ends, not a throttle of a moment, so no "try again shortly"."""
"""The code of the server's 401 for an expired token: the CLI prints its words (they say to log in again)."""
EXIT_TEMPFAIL = 75
"""The server is unavailable for a moment (a 503, a websocket's close 4503) or throttles the person
(a 429, close 4429; cli46b: exited 1 as a refusal): try again (sysexits.h's
``EX_TEMPFAIL``, as sendmail and rsync; cli46: a stream's exited 1 as a refused request, an API
request's 3 as an unreachable server)."""
_T = TypeVar("_T")
EXIT_SIGPIPE = 128 + 13  # what a shell reports for a program killed by SIGPIPE
DEFAULT_SERVER = "http://127.0.0.1:8000"
MAX_SPEC_CHARS = 256 * 1024
"""The longest spec (``-f``) the CLI reads, the server's limit (``web.forms.MAX_SPEC_CHARS``: what
travels to an agent in one start message; a test keeps the two equal)."""


class CliError(Exception):
    """Stops the command with ``exit_code`` after printing ``message`` to stderr."""

    def __init__(
        self, exit_code: int, message: str, code: str = "", retry_after: float | None = None, status: int = 0
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.message = message
        self.code = code  # the API's error code, when the server refused
        self.retry_after = retry_after
        """Seconds the server asked to wait before asking again (a 429's or 503's ``Retry-After``)."""
        self.status = status
        """The HTTP status of the server's answer that stopped the command (:func:`answer_error`), 0 for none."""


# --- configuration ----------------------------------------------------------------------------


MAX_CONFIG_CHARS = 64 * 1024
"""A config holds a server URL and a token; a larger file is not one."""


def config_path() -> Path:
    if os.environ.get("FAIRWAY_CONFIG"):
        return Path(os.environ["FAIRWAY_CONFIG"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "fairway" / "config.json"


def same_server(a: str, b: str) -> bool:
    """``a`` and ``b`` name one server (:func:`server_root`'s form; scheme and host in any case)."""
    return _server_key(a) == _server_key(b)


def _server_key(url: str) -> tuple[str, ...]:
    """What :func:`same_server` compares: scheme, host and path; a URL ``urlsplit`` cannot read
    (``http://[::1``, ``http://[zz]``) as it is written, one server with itself only (brk51: its
    ValueError was a traceback before any command; the request then says it is no server URL)."""
    try:
        parts = urlsplit(server_root(url))
    except ValueError:
        return (url,)
    return (parts.scheme.lower(), parts.netloc.lower(), parts.path)


def _make_private(fd: int, path: Path) -> str:
    """A config file readable by others (copied, written with the umask's 0644 on a shared login
    node) holds a token every user there could read: made 0600 when it is ours, as the agent does
    with its own config (brk40); the sentence to say, "" when there is nothing to say."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or not st.st_mode & 0o077:
        return ""
    mode = f"{st.st_mode & 0o777:o}"
    if st.st_uid == os.geteuid():
        try:
            os.fchmod(fd, 0o600)
        except OSError:
            pass
        else:
            return f"{path} was readable by others (mode {mode}): made it 0600"
    return f"{path} is readable by others (mode {mode}) and not yours to change: its token may be known to others"


@dataclass(slots=True)
class Config:
    """``token`` is what this command sends: ``$FAIRWAY_TOKEN``, else the saved token, which goes
    only to the server it was saved with (``saved_server``): another server named by ``--server``
    or ``$FAIRWAY_URL`` (a typo, ``http://`` for ``https://``, a stale variable) got it (brk40)."""

    server: str = DEFAULT_SERVER
    token: str = ""
    saved_server: str = DEFAULT_SERVER
    saved_token: str = ""
    given_token: str = ""
    notice: str = ""
    """Said on stderr before the command runs (a config that was readable by others)."""

    def point_at(self, server: str) -> None:
        """Talk to ``server``, with the token that may go there."""
        self.server = server
        self.token = self.given_token or (self.saved_token if same_server(server, self.saved_server) else "")

    def withheld(self) -> bool:
        """A saved token was not sent because the command talks to another server."""
        return bool(self.saved_token) and not self.token and not same_server(self.server, self.saved_server)

    @staticmethod
    def read() -> tuple[dict[str, Any], str]:
        """The saved config's fields ({} without a file) and the notice :func:`_make_private` gives."""
        path = config_path()
        data: dict[str, Any] = {}
        notice = ""
        if path.exists():
            try:
                with open(path, encoding="utf-8") as f:  # at most what a config holds: not /dev/zero
                    notice = _make_private(f.fileno(), path)
                    text = f.read(MAX_CONFIG_CHARS + 1)
                data = json.loads(text) if len(text) <= MAX_CONFIG_CHARS else None
            except (OSError, ValueError) as exc:
                raise CliError(EXIT_USAGE, f"cannot read {path}: {exc}") from None
            # "[]" was an AttributeError traceback; a token ["t0k"] went out as the text "['t0k']" (brk51)
            if not isinstance(data, dict) or any(not isinstance(data.get(k), str | None) for k in ("server", "token")):
                raise CliError(
                    EXIT_USAGE, f"{path} is not a Fairway CLI config (a small JSON object): remove it and log in"
                )
        return data, notice

    @classmethod
    def load(cls) -> Config:
        data, notice = cls.read()
        saved = str(data.get("server") or DEFAULT_SERVER)
        config = cls(saved_server=saved, saved_token=str(data.get("token") or ""), notice=notice)
        config.given_token = os.environ.get("FAIRWAY_TOKEN") or ""
        config.point_at(os.environ.get("FAIRWAY_URL") or saved)
        return config

    def save(self) -> Path:
        """Write the config readable by its owner only: ``os.open``'s mode sets only a file it
        creates, so a config that existed readable by others (copied, made with the umask's 0644)
        is made 0600 before the token is written into it (brk35)."""
        path = config_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), 0o600)
                json.dump({"server": self.server, "token": self.token}, f, indent=2)
        except OSError as exc:
            raise CliError(EXIT_USAGE, f"cannot save {path}: {exc.strerror or exc}") from None
        return path


def adopt_server(server: str) -> tuple[bool, str]:
    """Save ``server`` as the CLI's default server, as the served install script does
    (``scheduler/cli_install.sh``; tryout45: it saved nothing, so ``fairway login -u X`` asked
    127.0.0.1:8000), unless the config already names a server: the user's choice stays, and so
    does a token saved for the default server (a config with a token and no server). Returns
    whether ``server`` is the default now, and the sentence the script prints."""
    root = server_root(server)
    path = config_path()
    try:
        data, _notice = Config.read()
        saved = str(data.get("server") or "")
        if saved and same_server(saved, root):
            return True, f"{path} already names {root} as the default server"
        if saved or data.get("token"):
            kept = saved or DEFAULT_SERVER
            return False, (
                f"{path} keeps the server it names, {kept}; `fairway --server {root} login` makes {root} the default"
            )
        Config(server=root).save()
    except CliError as exc:
        return False, f"{exc.message}; `fairway --server {root} login` saves the server"
    return True, f"saved {root} as the default server in {path}"


# --- HTTP -----------------------------------------------------------------------------------------


def unreachable_text(server: str, exc: Exception) -> str:
    """Why a request got no answer, and what to do: a first user whose server runs elsewhere than
    the default (the demo on another port) read only "cannot reach http://127.0.0.1:8000:
    ConnectionError"."""
    return (
        f"cannot reach {server}: {type(exc).__name__}. Is the server running there? Name it with"
        " --server URL or $FAIRWAY_URL; `fairway login --server URL` saves it."
    )


def unanswered_text(server: str, method: str, path: str, exc: Exception) -> str:
    """Why a write got no answer once sent (a read timeout): the server may have done it. "cannot
    reach ... Is the server running there?" sent a user whose ``fairway submit`` timed out on a busy
    server to run it again: two workloads, both charged."""
    return (
        f"no answer from {server} to {method} {path.split('?')[0]} ({type(exc).__name__}): the server may"
        " have done it. Check (`fairway ls --mine`) before trying again."
    )


_INVISIBLE = (
    "\xad\u0600-\u0605\u061c\u06dd\u070f\u0890-\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U00013438\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
"""Every format character (Unicode 14 category Cf: bidirectional marks, overrides and isolates,
zero-width spaces and joiners, the byte order mark, the soft hyphen, tag characters) and the line
and paragraph separators (Zl, Zp), as a regex class's ranges: written out, not read from
``unicodedata`` at each start (94 ms of CPU per command); ``tests/breaker/test_break32.py``
checks it against ``unicodedata``."""


_CONTROL = re.compile(f"[\x00-\x1f\x7f-\x9f{_INVISIBLE}]")
"""Characters a terminal acts on, that reorder the text around them or that show as nothing: C0
and C1 controls (ESC starts every terminal escape), DEL, and the format characters (bidirectional
overrides and isolates; zero-width ones, with which ``train\u200b`` read as another ``train``:
brk32), line separators."""


def escape_text(text: str, keep: str = "") -> str:
    """``text`` with every control character written as ``\\xNN`` / ``\\uNNNN`` (but those in ``keep``).

    The CLI prints what other users wrote (workload names, commands, messages, host names): a
    name holding ``ESC [ 2 J`` must show as text, not clear the reader's screen.
    """

    def one(match: re.Match[str]) -> str:
        char = match.group()
        if char in keep:
            return char
        code = ord(char)
        return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"

    return _CONTROL.sub(one, text)


def escaped(data: Any) -> Any:
    """A copy of decoded JSON with :func:`escape_text` applied to every string, keys included."""
    if isinstance(data, str):
        return escape_text(data)
    if isinstance(data, list):
        return [escaped(item) for item in data]
    if isinstance(data, dict):
        return {escaped(k) if isinstance(k, str) else k: escaped(v) for k, v in data.items()}
    return data


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""What a spreadsheet reads as the start of a formula (OWASP "CSV Injection")."""


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell a spreadsheet shows as text: a string that starts like a formula
    (``=HYPERLINK(...)``, ``+``, ``-``, ``@``) gets a leading ``'``. Numbers stay numbers. Other
    users write the names a history holds: opening the export must not run what they wrote."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _error_text(status: int, body: Any) -> str:
    body = escaped(body)
    if not isinstance(body, dict):
        return f"HTTP {status}"
    code = body.get("code", "error")
    if "detail" in body:
        return f"{body['detail']} ({code})"
    # a problem of no one field says only its words: "non_field_errors:" is the API's key, no word
    # for a person (try50b: a wrong password at `fairway login`)
    lines = [
        ("" if field == "non_field_errors" else f"{field}: ")
        + (" ".join(map(str, msgs)) if isinstance(msgs, list) else str(msgs))
        for field, msgs in body.items()
        if field != "code"
    ]
    return f"refused ({code}):\n  " + "\n  ".join(lines)


def _error_code(body: Any) -> str:
    return str(body.get("code", "")) if isinstance(body, dict) else ""


def fairways_error(body: Any) -> bool:
    """Whether ``body`` is the API's error format (README "Every error has one format"):
    ``{"detail": "...", "code": "..."}``."""
    return isinstance(body, dict) and isinstance(body.get("detail"), str) and isinstance(body.get("code"), str)


def answer_error(server: str, status: int, body: Any, retry_after: float | None = None) -> CliError:
    """The error of an answer that is not a success (``body``: its JSON, None if not JSON): the one
    place the CLI reads a status. A 5xx in Fairway's error format says its detail (``exec``'s 503
    ``exec_unavailable``, 504 ``exec_timeout``: left60, was "the server failed: HTTP 503"); any other
    5xx says it did not come in Fairway's words (a proxy's 504 read like the agent's silence). A 503
    is the server unavailable for a moment, a 429 the person throttled for a moment: :data:`EXIT_TEMPFAIL`,
    said to try again (:func:`~fairway_cli.words.try_later_text`, as a websocket's close 4503 or 4429:
    :func:`_stream_refusal`)."""
    if status == 401:
        if fairways_error(body) and _error_code(body) == TOKEN_EXPIRED:  # the server's words (tok46)
            return CliError(EXIT_AUTH, _error_text(status, body), TOKEN_EXPIRED)
        return CliError(EXIT_AUTH, NOT_LOGGED_IN_TEXT)
    if status >= 500:
        if fairways_error(body):
            said, code = _error_text(status, body), _error_code(body)
        else:
            said, code = (
                f"the server failed: HTTP {status}, not Fairway's error format: something in front of {server} "
                "(a proxy, a load balancer) answered, or the server failed before Fairway could",
                "",
            )
        if status == UNAVAILABLE_STATUS:  # for a moment: a stream's close 4503 says the same (cli46)
            return CliError(EXIT_TEMPFAIL, unavailable_text(said), code, retry_after, status)
        return CliError(EXIT_UNREACHABLE, said, code, retry_after)
    if status == THROTTLED_STATUS and _error_code(body) != SUBMIT_LIMIT:  # throttled for a moment (cli46b)
        said = throttled_text(_error_text(status, body), retry_after)
        return CliError(EXIT_TEMPFAIL, said, _error_code(body), retry_after, status)
    if body is None:  # another site (a proxy's login page, a web root): "failed: HTTP 200" misled
        return CliError(
            EXIT_UNREACHABLE,
            f"{server} answered HTTP {status}, not JSON: is it a Fairway server's "
            "URL (the site's root, e.g. https://fairway.example.org)?",
        )
    return CliError(EXIT_API, _error_text(status, body), _error_code(body), retry_after)


API_PATH = "/api/v1"


def server_root(url: str) -> str:
    """The server's URL as the CLI keeps it: no trailing ``/``, and no ``/api/v1`` (README points
    at "the REST API at /api/v1/": ``--server https://host/api/v1/`` asked ``/api/v1/api/v1/``)."""
    url = url.rstrip("/")
    return url[: -len(API_PATH)] if url.endswith(API_PATH) else url


_TOKEN_TEXT = re.compile(r"[!-~]+")
"""What an API token is made of: printable ASCII without blanks (knox's are hex); anything else
cannot go into an HTTP header."""


class Api:
    """A thin client of ``/api/v1/``: JSON in and out, errors as :class:`CliError`.

    ``escape``: answers come back with control characters escaped (:func:`escaped`), for
    printing as text; ``--json`` output takes them as they are (JSON escapes them itself).
    """

    def __init__(self, server: str, token: str = "", timeout: float = 30.0, *, escape: bool = True) -> None:
        self.server = server_root(server)
        self.token = token
        self.timeout = timeout
        self.escape = escape
        self.session = requests.Session()

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, Any] | None = None,
        auth: bool = True,
        raw: bool = False,
    ) -> Any:
        """The answer's JSON (``raw``: a 200's body as text, e.g. a CSV report)."""
        headers = {"Accept": "application/json", "User-Agent": f"fairway-cli/{__version__}"}
        if auth:
            if not self.token:
                raise CliError(  # naming the server: a first command went to the default one (try55)
                    EXIT_AUTH,
                    f"not logged in to {self.server}: run `fairway login`, "
                    "or `fairway login --server URL` for another server",
                )
            if not _TOKEN_TEXT.fullmatch(self.token):  # '€' was a UnicodeEncodeError traceback (brk32)
                raise CliError(
                    EXIT_USAGE,
                    "the token (--token, $FAIRWAY_TOKEN or the saved config) holds characters no API token has"
                    " (a stray character pasted?): give it again, or run `fairway login`",
                )
            headers["Authorization"] = f"Token {self.token}"
        url = f"{self.server}/api/v1/{path.lstrip('/')}"
        clean = {k: v for k, v in (params or {}).items() if v not in (None, "")}
        try:
            response = self.session.request(method, url, json=body, params=clean, headers=headers, timeout=self.timeout)
        except (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema, requests.exceptions.MissingSchema):
            # "cannot reach http://exa mple: InvalidURL. Is the server running there?" (brk32)
            raise CliError(
                EXIT_USAGE,
                f"{self.server!r} is not a server URL: give it as https://host[:port] (--server URL, $FAIRWAY_URL,"
                " or `fairway login --server URL`)",
            ) from None
        except requests.RequestException as exc:
            if method != "GET" and isinstance(exc, requests.ReadTimeout):  # sent; the answer did not come
                raise CliError(EXIT_UNREACHABLE, unanswered_text(self.server, method, path, exc)) from None
            raise CliError(EXIT_UNREACHABLE, unreachable_text(self.server, exc)) from None
        if response.status_code == 204:
            return None
        if raw and response.status_code == 200:
            return response.text
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code >= 400 or data is None:
            raise answer_error(
                self.server, response.status_code, data, retry_after_s(response.headers.get("Retry-After"))
            )
        _ANSWERED.set(self.server)
        return escaped(data) if self.escape else data


_ANSWERED: contextvars.ContextVar[str | None] = contextvars.ContextVar("fairway_answered", default=None)
"""The server whose JSON answer this command read last (None: none yet): an answer of another
shape than Fairway's fails where the command reads it, and :func:`main` says so (brk38)."""

_SHAPE_ERRORS = (KeyError, TypeError, IndexError, AttributeError)
"""What reading a JSON answer of another shape raises (``row["name"]`` of a list, of None, …)."""


def not_fairways_text(server: str, exc: BaseException) -> str:
    """The error of a JSON answer this CLI cannot read (another service at the URL, a proxy's JSON
    page, a server of another version)."""
    what = f"{type(exc).__name__}: {exc}"[:120]
    return (
        f"{server} answered JSON that is not what this fairway reads ({what}): is it a Fairway server's URL "
        f"(the site's root), of a version this CLI ({__version__}) speaks?"
    )


# --- output ---------------------------------------------------------------------------------------


def when(value: str | None) -> str:
    """An API timestamp as ``14:05:09 UTC`` today, ``Mar 3 14:05:09 UTC`` another day
    (:func:`fairway_cli.numbers.instant_text`, as the pages and the server's sentences)."""
    return instant_text(value)


MAX_DAYS_BACK = MAX_BACK_DAYS
"""The furthest back the server reads an instant (``fairway_common.limits``, the API's bound too)."""


def _instant_back(text: str) -> str:
    """``--since``, ``--until``: the text as given (the server reads a date, a duration back, and
    refuses any other in its words), but a duration back outside the server's bounds is refused
    here, a usage error in the API's words (left51: ``fairway history --since 0d`` exited 1 with the
    server's 400 where ``fairway metrics --days 0`` was a usage error)."""
    problem = back_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: {problem}")
    return text


_positive_int = whole_number(1)
_count = whole_number(0)  # --events -3 dropped the first three events instead


def _cpus(text: str) -> int | str:
    """``--cpus``: a whole number >= 1, or ``none`` (:func:`_override`: the host's per-GPU share)."""
    return text if means_none(text) else _positive_int(text)


_days_back = positive_number(MAX_DAYS_BACK)  # 1e308 overflowed the date, nan failed in it, -3 asked for the future


def size(n: Any) -> str:
    """Bytes for display: ``32G``, ``512M`` (binary units), ``-`` when unknown."""
    if not isinstance(n, int) or n <= 0:
        return "-"
    for unit, shift in (("P", 50), ("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{n}B"


def resources(w: dict[str, Any]) -> str:
    """A workload's CPU, memory and shared-memory requests per host, for display."""
    parts = [
        f"{w['cpus']} CPUs" if w.get("cpus") else "per-GPU share of CPUs",
        f"{size(w['memory_bytes'])} memory" if w.get("memory_bytes") else "per-GPU share of memory",
    ]
    if w.get("shared_memory_bytes"):
        parts.append(f"{size(w['shared_memory_bytes'])} /dev/shm")
    return ", ".join(parts) + " per host"


duration = duration_text
"""``2h0m29s`` (:func:`fairway_cli.numbers.duration_text`, which the server's notes use too)."""


Column = tuple[str, Callable[[dict[str, Any]], Any]]


def table(
    rows: Sequence[dict[str, Any]], columns: Sequence[Column], out: TextIO, right: set[str] = frozenset()
) -> None:
    """Aligned columns, a header line, no borders (like ``kubectl get``)."""
    cells = [[str(fn(row)) if fn(row) is not None else "" for _h, fn in columns] for row in rows]
    headers = [h for h, _fn in columns]
    widths = [max([len(h), *(len(c[i]) for c in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if h in right else v.ljust(w) for v, w, h in zip(values, widths, headers, strict=True)
        ).rstrip()

    out.write(line(headers) + "\n")
    for c in cells:
        out.write(line(c) + "\n")


def emit_json(data: Any, out: TextIO) -> None:
    json.dump(data, out, indent=2, sort_keys=True)
    out.write("\n")


# --- commands -------------------------------------------------------------------------------------


TOKEN_FROM_STDIN = "-"  # noqa: S105 -- the "read it from stdin" marker, not a token
"""``fairway login --token -`` (or ``--token`` alone): the token is read from standard input, not
given in the command line, where every user of the machine sees it (``ps``, ``/proc/PID/cmdline``)."""


def read_token() -> str:
    """The token of ``--token -``: typed at a prompt that does not echo it on a terminal, else the
    first line of standard input (a pipe, a file: ``fairway login --token - < token.txt``)."""
    token = getpass.getpass("token: ") if sys.stdin.isatty() else sys.stdin.readline()
    token = token.strip()
    if not token:
        raise CliError(EXIT_USAGE, "no token on standard input (--token -); nothing saved")
    return token


def cmd_login(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    config.server = server_root(args.server or config.server)
    if args.token == TOKEN_FROM_STDIN:
        args.token = read_token()
    if args.token:
        api = Api(config.server, args.token, escape=not args.json)
        try:
            me = api.call("GET", "me/")
        except CliError as exc:
            if exc.exit_code != EXIT_AUTH:
                raise
            # Not "run `fairway login`": that is what was just run, with this token.
            raise CliError(
                EXIT_AUTH, f"{config.server} refused this token (unknown, expired or revoked); nothing saved"
            ) from None
        config.token = args.token
    else:
        username = args.username or input("username: ")
        password = sys.stdin.readline().rstrip("\n") if args.password_stdin else getpass.getpass("password: ")
        answer = Api(config.server, escape=not args.json).call(
            "POST", "auth/login/", body={"username": username, "password": password}, auth=False
        )
        config.token, me = answer["token"], answer["user"]
    path = config.save()
    if args.json:
        emit_json({"server": config.server, "user": me}, out)
    else:
        budgets = ", ".join(me.get("submit_budgets") or []) or "none yet"
        out.write(f"logged in to {config.server} as {me['username']} (saved in {path})\n")
        out.write(f"you may submit to: {budgets}\n")
    return EXIT_OK


def cmd_logout(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """A password login's token, made for this machine, is deleted on the server; a personal token
    (``login --token``, made on the tokens page for scripts and other machines too) is only
    forgotten here: deleting it stopped every other use of it (tryout48). A token the server no
    longer takes (revoked, expired) is forgotten here too, nothing to delete (break48b). With no
    token saved there is nothing to log out (try50b: a second logout read "the server no longer
    takes this token")."""
    if not config.token:
        if args.json:
            emit_json({"server": config.server, "logged_out": True, "token_deleted": False}, out)
        else:
            out.write(f"not logged in to {config.server}: nothing to log out\n")
        return EXIT_OK
    api = Api(config.server, config.token, escape=not args.json)
    try:
        current = next((t for t in api.call("GET", "tokens/") if t.get("current")), None)
        gone = False
    except CliError as exc:
        if exc.exit_code != EXIT_AUTH:
            raise
        current, gone = None, True
    personal = current is not None and current.get("kind") == "personal"
    deleted = not (personal or gone)
    if deleted:
        api.call("POST", "auth/logout/", body={})
    config.token = ""
    config.save()
    if args.json:  # deploy48: the sentence was printed under --json too
        kept = {"kept_token": current["name"]} if personal and current else {}
        emit_json({"server": config.server, "logged_out": True, "token_deleted": deleted, **kept}, out)
    elif gone:
        out.write("logged out here (the server no longer takes this token)\n")
    elif personal and current:
        out.write(
            f"logged out here; the personal token {current['name']} still works on {config.server} for whoever "
            f"holds it (revoke it on {config.server}/tokens/)\n"
        )
    else:
        out.write("logged out (the token was deleted on the server)\n")
    return EXIT_OK


def cmd_whoami(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    me = Api(config.server, config.token, escape=not args.json).call("GET", "me/")
    if args.json:
        emit_json(me, out)
        return EXIT_OK
    out.write(f"{me['username']} on {config.server}{' (admin)' if me.get('is_staff') else ''}\n")
    for m in me.get("memberships", []):
        # Marked as the budgets page marks it (its "archived" badge): it takes no new work.
        out.write(f"  {m['role']} of {m['budget']}{' (archived)' if m.get('archived') else ''}\n")
    return EXIT_OK


def _env_pairs(pairs: list[str], secret: bool, given: set[str] | None = None) -> dict[str, Any]:
    """``NAME=VALUE`` (or ``NAME``, read from this shell) flags → the API's env; ``given``: the
    names of the flags read so far, a name given twice on the command line is a usage error (the
    last one ran, silently, a secret's plain twin included: brk30)."""
    env: dict[str, Any] = {}
    given = set() if given is None else given
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not name:
            raise CliError(EXIT_USAGE, f"--env wants NAME=VALUE, not {pair!r}")
        if name in given:
            raise CliError(EXIT_USAGE, f"{name} is given twice (--env/--secret-env): give it once")
        given.add(name)
        if not sep:
            if name not in os.environ:
                raise CliError(EXIT_USAGE, f"{name} is not set here; give NAME=VALUE or export {name}")
            value = os.environ[name]  # read from this shell: keeps secrets out of the history
        env[name] = {"value": value, "secret": True} if secret else value
    return env


def _submission(args: argparse.Namespace, api: Api, *, quote: bool = False) -> dict[str, Any]:
    """The request body of ``fairway submit`` (and ``--quote``: ``quote``, where the minimum
    runtime may be left out and the server quotes its ladder) from its flags and ``-f`` spec.
    Without a budget the server takes the requester's one submit budget, or refuses listing the
    choices (the service's one rule for the API, the page and the CLI: num42)."""
    body: dict[str, Any] = {}
    if args.file:
        import yaml  # only here: PyYAML serves -f alone (a requirement of the CLI's wheel all the same)

        from fairway_common import strict_yaml

        try:
            # At most what the server takes: -f /dev/zero or a large file by mistake read until
            # the machine ran out of memory (the OOM killer took it, 23 GB in).
            if args.file == "-":
                text = sys.stdin.read(MAX_SPEC_CHARS + 1)
            else:
                with open(args.file, encoding="utf-8") as f:
                    text = f.read(MAX_SPEC_CHARS + 1)
            if len(text) > MAX_SPEC_CHARS:
                raise CliError(EXIT_USAGE, f"the spec {args.file} is longer than {MAX_SPEC_CHARS:,} characters")
            spec = strict_yaml.load(text)
            if isinstance(spec, dict) and (line := strict_yaml.env_number_line(text)) is not None:
                # brk48: BUILD: 1_000 ran as "1000" (the server sees the number only)
                raise CliError(EXIT_USAGE, f"the spec {args.file}: {strict_yaml.ENV_NUMBER_TEXT.format(line=line)}")
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise CliError(EXIT_USAGE, f"cannot read the spec {args.file}: {exc}") from None
        except RecursionError:  # thousands of nested "[": a traceback
            raise CliError(EXIT_USAGE, f"cannot read the spec {args.file}: nested too deeply") from None
        if not isinstance(spec, dict):
            raise CliError(EXIT_USAGE, "a spec is a YAML mapping of fields (name, budget, command, ...)")
        try:  # YAML reads 2026-01-01 as a date and !!binary as bytes: the request's json.dumps failed;
            # .nan passed json.dumps and failed in the request as "cannot reach the server" (exit 3)
            json.dumps(spec, allow_nan=False)
        except (TypeError, ValueError) as exc:
            problem = f"the spec {args.file} holds a value JSON cannot carry ({exc}); quote it"
            raise CliError(EXIT_USAGE, problem) from None
        body.update(spec)
    _flagged(args, body)
    # A quote needs neither: the server quotes the usual minimum runtimes, whatever would run (try55).
    missing = [MISSING_WORDS[f] for f in (() if quote else ("command", "min_runtime")) if f not in body]
    if "gpu_count" not in body:
        body["gpu_count"] = 1
    if missing:
        raise CliError(EXIT_USAGE, "missing: " + "; ".join(missing))
    return body


MISSING_WORDS = {
    # the flag and what it means, not the API's field alone (try50: "missing: min_runtime (flags or
    # a spec with -f)" to a researcher who had typed flags, --quote included)
    "command": "the command: after -- (e.g. -- python train.py), or command in the -f spec",
    "min_runtime": (
        "the minimum runtime: -M DURATION (e.g. -M 2h; -M 0: unallocated, free and preemptible at any time), "
        "or min_runtime in the -f spec; `fairway submit --quote ...` without -M compares the usual ones"
    ),
}
"""What ``fairway submit`` says of a required field it was not given (flags nor spec)."""


def _flagged(args: argparse.Namespace, body: dict[str, Any]) -> None:
    """Lay the submission flags of ``fairway submit`` (and ``resubmit``) over ``body``."""
    flags = {
        "name": args.name,
        "budget": args.budget,
        "cluster": args.cluster,
        "gpu_model": args.gpu_model,
        "gpu_count": args.gpus,
        "image": args.image,
        "min_runtime": args.min_runtime,
        "cpus": args.cpus,
        "memory": args.memory,  # sizes are read by the server (one parser): its error names the field
        "shared_memory": args.shm,
        "max_runtime": args.max_runtime,
        "retries": args.retries,
        "array": args.array,
        "hold": args.hold,
    }
    body.update({k: _override(k, v) for k, v in flags.items() if v is not None})
    # -v and --after add to the spec's lists, as --env adds to its env (brk42: --after replaced the
    # spec's after, silently dropping a dependency; -v split a spec's "mounts: data" into letters).
    if args.mount:
        body["mounts"] = [*_spec_list(body.get("mounts"), "mounts", "mount names", split=False), *args.mount]
    if args.after:
        flagged = [a.strip() for item in args.after for a in item.split(",") if a.strip()]
        body["after"] = [*_spec_list(body.get("after"), "after", "ID[:ok|any]", split=True), *flagged]
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if command:
        body["command"] = command
    if args.env or args.secret_env:
        env = dict(body.get("env") or {})
        given: set[str] = set()
        env.update(_env_pairs(args.env or [], secret=False, given=given))
        env.update(_env_pairs(args.secret_env or [], secret=True, given=given))
        body["env"] = env


def _spec_list(value: Any, field: str, items: str, *, split: bool) -> list[Any]:
    """The spec's ``field`` as a list a flag can add to: none, a list, or (``split``, as the server
    reads ``after``) a number or a comma-separated string; ``CliError`` (usage) for anything else."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if split and isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if split and isinstance(value, str):
        return [a.strip() for a in value.split(",") if a.strip()]
    raise CliError(EXIT_USAGE, f"{field} in the spec is a list of {items}, not {escape_text(repr(value))[:60]}")


def _why(w: dict[str, Any], out: TextIO) -> None:
    if w.get("state") != "pending":
        return
    out.write("why pending:\n")
    why = w.get("pending_explanation") or {}
    # The parts, each once: the sentences, the numbers, the blocking work (not why_pending's text).
    for line in why.get("sentences", w.get("why_pending")) or []:
        out.write(f"  {line}\n")
    numbers = why.get("numbers") or {}
    for key in ("budget", "other_budget"):
        side = numbers.get(key) or {}
        if side.get("ratio") is not None:
            # The server's texts, the sentence's digits (an older server sends only the numbers).
            used, committed, entitled = (
                side.get(f"{k}_text") or gpu_hours_text(side[f"{k}_gpu_hours"])
                for k in ("used", "committed", "entitled")
            )
            out.write(
                f"    {side.get('label') or side['path']}: used {used} GPU-h, committed {committed} GPU-h, "
                f"entitled {entitled} GPU-h, "
                f"ratio {side['ratio_text']}×\n"
            )
    for b in why.get("blocking") or []:
        # the server's words (text: why it is in the way; an older server sends protection_text or the instant)
        until = b.get("text") or b.get("protection_text")
        if until is None and b.get("protected_until"):
            until = f"protected until {when(b['protected_until'])}"
        # "in the way", as the page and the API's why_pending say it (try63: "blocking" here)
        out.write(f"    in the way: #{b['workload']} {b['name']} ({b['budget']}{', ' + until if until else ''})\n")
    if w.get("estimated_start_words"):
        out.write(f"estimated start: {w['estimated_start_words']}\n")


def cmd_submit(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    _check_wait_flags(args)
    if args.quote:
        return _quote(args, config, out)
    api = Api(config.server, config.token, escape=not args.json)
    w = api.call("POST", "workloads/", body=_submission(args, api))
    return _submitted(args, w, out, api)


def _check_wait_flags(args: argparse.Namespace) -> None:
    """``--wait`` and ``--wait-timeout`` of ``submit``/``resubmit`` go together, and not with ``--quote``."""
    if args.timeout is not None and not args.wait:
        raise CliError(EXIT_USAGE, "--wait-timeout goes with --wait")
    if args.wait and args.quote:
        raise CliError(EXIT_USAGE, "--quote submits nothing: there is nothing to --wait for")


def _submitted(args: argparse.Namespace, w: dict[str, Any], out: TextIO, api: Api) -> int:
    """Print the answer to a submission (``fairway submit``, ``fairway resubmit``); with
    ``--wait``, then wait for it (an array: its group) as ``fairway wait`` does (with ``--json``
    only the wait's JSON is printed: one document)."""
    code = _submitted_words(args, w, out)
    if not args.wait:
        return code
    out.flush()
    what = f"array group {w['group']}" if w.get("group") else f"#{w['id']}"
    return wait_for(api, args, out, [w["id"]], w.get("group"), submitted=what)


def _submitted_words(args: argparse.Namespace, w: dict[str, Any], out: TextIO) -> int:
    if args.json:
        if not args.wait:
            emit_json(w, out)
        return EXIT_OK
    kind = f"minimum runtime {duration(w['min_runtime_s'])}" if w["min_runtime_s"] else "unallocated"
    array = w.get("array")
    what = _array_submitted(array) if array else f"#{w['id']} {w['name']}"
    each = "each " if array and array["count"] > 1 else ""
    again = f" ({resubmitted_from_text(w['resubmitted_from'])})" if w.get("resubmitted_from") else ""
    out.write(
        f"submitted {what}{again}: {each}{w['gpu_count']} × {w['gpu_model']} on {w['cluster']}, "
        f"budget {w['budget']}, {kind} — {w['state']}\n"
    )
    if w.get("group"):
        out.write(f"array group {w['group']}: fairway ls --group {w['group']}; fairway cancel --group {w['group']}\n")
    if w.get("hold"):
        release = f"--group {w['group']}" if w.get("group") else str(w["id"])
        out.write(f"held: it starts only after `fairway release {release}`\n")
    elif w.get("pending_reason") in BUDGET_HOLD_REASONS and w.get("why_pending"):
        # its budget's hold or cap, which the submission wrote at once as it writes a hold of its own:
        # in `fairway show`'s words (tryout47b: it said just "pending"; rules48: nor that a cap of 0
        # runs it unfunded)
        out.write(f"{w['why_pending'][0]}\n")
    return EXIT_OK


BUDGET_HOLD_REASONS = ("held", "budget_capped")
"""The pending reasons a submission may have at once from its budget alone
(``scheduler.policy.queues.submission_verdict``): ``held``, and ``budget_capped`` of a cap of 0 GPU-hours
that holds allocated work or runs it unfunded (detail ``unfunded``)."""


def _array_submitted(array: dict[str, Any]) -> str:
    """``4 members #964–#967 (sweep[0]…sweep[3]), at most 2 at a time``: the ``array`` of a
    submission's answer (ids listed one by one where another submission took ids between them)."""
    ids, indices, count = array["members"], array["indices"], array["count"]
    if count == 1:
        return f"1 member #{ids[0]} ({array['name']}[{indices[0]}])"
    if ids == list(range(ids[0], ids[0] + count)):
        numbers = f"#{ids[0]}–#{ids[-1]}"
    else:
        numbers = ", ".join(f"#{i}" for i in ids[:5]) + (f", … #{ids[-1]}" if count > 5 else "")
    names = f"{array['name']}[{indices[0]}]…{array['name']}[{indices[-1]}]"
    limit = f", at most {array['limit']} at a time" if array.get("limit") else ""
    return f"{count} members {numbers} ({names}){limit}"


def _quote(args: argparse.Namespace, config: Config, out: TextIO, path: str = "workloads/quote/") -> int:
    """``fairway submit --quote`` (``resubmit --quote``: ``path`` its quote): the server's quote for
    this submission; nothing is submitted."""
    api = Api(config.server, config.token, escape=not args.json)
    body = _resubmission(args) if path != "workloads/quote/" else _submission(args, api, quote=True)
    q = api.call("POST", path, body=body)
    if args.json:
        emit_json(q, out)
        return EXIT_OK
    out.write(
        f"quote (nothing submitted): {q['gpu_count']} × {q['gpu_model']} on {q['cluster']}, budget {q['budget']}\n"
    )
    table(
        q["quotes"],
        [
            (
                "MIN-RUNTIME",
                lambda r: (
                    (duration(r["min_runtime_s"]) if r["min_runtime_s"] else "0 (unalloc.)")
                    + (" *" if r["yours"] else "")
                ),
            ),
            # the server's words (an older server sends none: its fields, in the same words)
            ("STARTS BY", lambda r: r.get("start_text") or quote_start_text(r, q.get("waits_for") or ())),
            # as ``ls`` writes GPU-time charged: "30 GPU-min", "2.00 GPU-h" (try63: "0.50 GPU-h")
            ("CHARGES", lambda r: gpu_time_text(r["charge_gpu_hours"] * 3600)),
            ("RATIO AFTER", lambda r: f"{r.get('ratio_after_text') or format(r['ratio_after'], '.4g')}×"),
        ],
        out,
    )
    if any(r["yours"] for r in q["quotes"]):
        out.write("* your minimum runtime.\n")
    # The server's words for what the lines assume (an older server sends none).
    for note in q.get("notes") or ["Starts are upper bounds: nothing else ending earlier is assumed."]:
        out.write(f"{note}\n")
    return EXIT_OK


def _pending_words(w: dict[str, Any]) -> str:
    """Why a pending workload waits, in the list's words ("" when it is not pending)."""
    if w.get("state") != "pending":
        return ""
    # an older server sends neither pending_resources nor pending_group_limit (nor hold, nor pending_drain)
    return reason_words(
        w.get("pending_reason"),
        w.get("pending_resources"),
        w.get("pending_group_limit"),
        w.get("hold"),
        w.get("pending_drain"),
    )


def _why_short(w: dict[str, Any]) -> str:
    """:func:`_pending_words` and the estimated start: ``fairway ls``'s column, ``fairway wait``'s lines."""
    words = _pending_words(w)
    return (
        why_waits_text(words, w.get("estimated_start"), w.get("estimate_unfunded"))
        if w.get("state") == "pending"
        else words
    )


UNFINISHED_STATES = "pending,starting,running,preempting"


def workload_filters(args: argparse.Namespace, *, everything: bool = False) -> dict[str, Any]:
    """The workload list's filters from ``--state``, ``--budget``, ``--mine``/``--owner``,
    ``--cluster``, ``--group`` (``ls``'s ``--resubmitted-from`` and ``--id`` too): ``fairway ls``'s
    query and a bulk cancel/hold/release's alike, so the bulk action takes what ``ls`` shows.
    Without ``--state`` (and ``--group``, ``--resubmitted-from``, ``--id``) the unfinished states,
    unless ``everything`` (``ls --all``)."""
    if args.mine and args.owner:
        raise CliError(EXIT_USAGE, "give --mine or --owner USER, not both")
    params = {
        "state": args.state.lower() if args.state else args.state,  # squeue -t RUNNING (try55)
        "budget": args.budget,
        "owner": "me" if args.mine else args.owner,
        "cluster": args.cluster,
        "group": args.group,
        "resubmitted_from": getattr(args, "resubmitted_from", None),
        "id": getattr(args, "id_list", None),
    }
    if not everything and not args.state and args.group is None and not (params["resubmitted_from"] or params["id"]):
        params["state"] = UNFINISHED_STATES
    return params


def read_pages(api: Api, path: str, params: dict[str, Any], limit: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Up to ``limit`` rows of a paged list, newest first, and the last page read: as many pages as
    it takes, a page holding at most the server's bound (1000 rows, sec63)."""
    rows: list[dict[str, Any]] = []
    while True:
        page = api.call("GET", path, params={**params, "limit": limit - len(rows), "offset": len(rows)})
        rows += page["results"]
        if not page["results"] or not page.get("next") or len(rows) >= limit:
            return rows[:limit], page


def cmd_ls(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    params = workload_filters(args, everything=args.all)
    if args.idle:
        params["idle"] = "true"
    api = Api(config.server, config.token, escape=not args.json)
    rows, page = read_pages(api, "workloads/", params, args.limit)
    if not rows and args.group is not None:
        _require_group(api, args.group)
    if args.json:
        emit_json(rows, out)
        return EXIT_OK
    table(
        rows,
        [
            ("ID", lambda w: w["id"]),
            ("NAME", lambda w: w["name"][:40]),
            ("USER", lambda w: w["owner"]),
            ("BUDGET", lambda w: w["budget"]),
            ("CLUSTER", lambda w: w["cluster"]),
            ("GPUS", lambda w: f"{w['gpu_count']}×{w['gpu_model']}"),
            (
                "MIN-RUNTIME",
                # an older server sends no accounting.unfunded
                lambda w: (
                    unfunded_text(duration(w["min_runtime_s"]), _acct(w).get("unfunded"))
                    if w["min_runtime_s"]
                    else "0 (unalloc.)"
                ),
            ),
            ("STATE", lambda w: w["state"] + (" (idle)" if w.get("idle") else "")),
            ("WHY / ESTIMATE", _why_short),
            ("SUBMITTED", lambda w: when(w["submitted_at"])),
            ("STARTED", lambda w: when(_acct(w).get("started_at")) or "-"),
            ("WAIT", lambda w: duration(_acct(w).get("wait_s")) or "-"),
            ("ELAPSED", _elapsed),
            ("CHARGED", lambda w: gpu_hours_cell(w)),
            ("REQUEUES", lambda w: _acct(w).get("requeues", "-")),
        ],
        out,
        right={"ID", "WAIT", "ELAPSED", "CHARGED", "REQUEUES"},
    )
    for w in rows:
        if w.get("idle"):
            out.write(f"#{w['id']} {idle_held_text(w['idle'])}\n")
    if not rows:
        out.write(f"{NO_UNFINISHED_WORKLOADS if params['state'] == UNFINISHED_STATES else NO_WORKLOADS_MATCH}\n")
    if page.get("count", 0) > len(rows):
        out.write(f"({len(rows)} of {page['count']}; --limit for more)\n")
    return EXIT_OK


def _require_group(api: Api, group: int) -> dict[str, Any]:
    """Array group ``group`` (``groups/{id}/``); stop with "no group N" when it does not exist (an
    empty listing of a group that exists stays an empty table)."""
    try:
        return api.call("GET", f"groups/{group}/")
    except CliError as exc:
        if exc.exit_code != EXIT_API or _busy(exc):  # a 429 is not "no group" (left52)
            raise
        raise CliError(EXIT_API, f"no group {group}") from None


def _acct(w: dict[str, Any]) -> dict[str, Any]:
    return w.get("accounting") or {}


def _requeues_text(acct: dict[str, Any]) -> str:
    """``2 (1 preempted)``: the times it went back to the queue, every cause, and of them the preemptions."""
    if "requeues" not in acct:
        return "-"
    return f"{acct['requeues']} ({acct.get('preemptions', 0)} preempted)" if acct["requeues"] else "0"


def _elapsed(w: dict[str, Any]) -> str:
    """A workload's elapsed run time, "-" while it never started, as the web list writes it (`ls`
    and `show` wrote "0" for a pending one: brk31); "0" for work that ran under a second (it read
    as never started beside its start time: try32)."""
    if not _acct(w).get("started_at"):
        return "-"
    return duration(_acct(w).get("elapsed_s") or 0)


def gpu_hours_cell(w: dict[str, Any]) -> str:
    """GPU-time charged, as the web writes it (``gpu_time_text``); unallocated work says so instead
    of a 0 that reads as free by mistake."""
    if not w.get("min_runtime_s"):
        return "free"
    return charged_text(_acct(w))


def charged_text(row: dict[str, Any]) -> str:
    """A charge (a workload's ``accounting``, a history row) in :func:`gpu_time_text`'s words, of the
    whole GPU-seconds the pages write (same47: of the GPU-hours rounded to 4 decimals, 1,290 GPU-s
    read "21 GPU-min" here and "22 GPU-min" on the page); an older server sends only the hours."""
    seconds = row.get("charged_gpu_seconds")
    return gpu_time_text(seconds if seconds is not None else row.get("charged_gpu_hours", 0) * 3600)


def _workload_id(value: str) -> int:
    """A workload's id as typed, ``12`` or ``#12``: 1 up (brk55: ``fairway wait 0`` asked the server,
    whose 400 exited 1, wait's "did not succeed"); a usage error otherwise."""
    text = value.lstrip("#")
    if not text.isascii() or not text.isdigit() or len(text) > 18 or int(text) < 1:
        raise CliError(EXIT_USAGE, f"{value!r} is not a workload id")
    return int(text)


def _one_id(text: str) -> int:
    """An argument naming one workload, ``12`` or ``#12`` as the pages write it (:func:`_workload_id`;
    brk55: ``ls --resubmitted-from #12`` was "not a whole number" where the list's filter takes it)."""
    try:
        return _workload_id(text)
    except CliError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _id_list(text: str) -> str:
    """``ls --id 12,#13``: workload ids, comma-separated (:func:`_one_id` each, at most
    :data:`LIST_MAX_IDS`), as the list's ``id`` filter reads them: ``12,13``."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise argparse.ArgumentTypeError("give at least one id")
    if len(parts) > LIST_MAX_IDS:
        raise argparse.ArgumentTypeError(f"at most {LIST_MAX_IDS} ids at once, not {len(parts)}")
    return ",".join(str(_one_id(p)) for p in parts)


def gpu_words(names: Sequence[str]) -> str:
    """An attempt's GPUs (``host:index`` names) with each host once, as the events write them:
    ``h1:0,1,2,3, h2:0,1,2,3``."""
    by_host: dict[str, list[str]] = {}
    for name in names:
        host, _, index = name.rpartition(":")
        by_host.setdefault(host, []).append(index)
    return ", ".join(f"{host}:{','.join(indices)}" for host, indices in by_host.items())


def host_words(attempt: dict[str, Any]) -> str:
    """Every host an attempt holds GPUs on (a gang's parts), rank 0 first: ``h1,h2``. The API's
    ``hosts``; a server older than it gives only the first, ``host``."""
    return ",".join(attempt.get("hosts") or [attempt["host"]])


def cmd_show(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    if args.spec and not args.json:
        return _show_spec(_workload_id(args.id), config, out)
    path = f"workloads/{_workload_id(args.id)}/" + ("spec/" if args.spec else "")
    w = Api(config.server, config.token, escape=not args.json).call("GET", path)
    if args.json:
        emit_json(w, out)
        return EXIT_OK
    out.write(f"#{w['id']} {w['name']} — {w['state']}\n")
    unfunded = any(a.get("unfunded") and a.get("ended_at") is None for a in w.get("attempts") or [])
    kind = (
        f"{duration(w['min_runtime_s'])} (allocated: protected and charged"
        + (f"; {UNFUNDED_ATTEMPT})" if unfunded else ")")
        if w["min_runtime_s"]
        else "0 (unallocated: free, preemptible)"
    )
    facts = [
        ("user", w["owner"]),
        ("budget", w["budget"]),
        ("cluster", w["cluster"]),
        ("gpus", f"{w['gpu_count']} × {w['gpu_model']}"),
        ("resources", w.get("requests_text") or resources(w)),  # the server's words (an older one sends none)
        ("minimum runtime", kind),
        ("submitted", when(w["submitted_at"])),
        ("started", when(_acct(w).get("started_at"))),
        ("wait", duration(_acct(w).get("wait_s")) or "0"),
        ("elapsed", _elapsed(w)),
        (
            "charged",
            charged_text(_acct(w)) if w["min_runtime_s"] else "unallocated: never charged",
        ),
        ("requeues", _requeues_text(_acct(w))),
        ("finished", when(w.get("finished_at"))),
        ("image", w.get("image") or "-"),
        ("command", shlex.join(w.get("command") or [])),
        ("wall-time limit", duration(w["max_runtime_s"]) if w.get("max_runtime_s") else ""),
        ("retries", f"{w.get('retries_used', 0)} of {w['retries']} used" if w.get("retries") else ""),
        (
            "mounts",
            ", ".join(
                f"{m['name']} at {m['container_path']}" + (" (ro)" if m.get("read_only") else "")
                for m in w.get("mounts") or []
            ),
        ),
        ("after", ", ".join(f"#{d['workload']}:{d['condition']} ({d['state']})" for d in w.get("after") or [])),
        ("array", f"group {w['group']}, index {w['array_index']}" if w.get("group") else ""),
        ("origin", resubmitted_from_text(w["resubmitted_from"]) if w.get("resubmitted_from") else ""),
        # an older server sends no resubmissions
        ("resubmissions", resubmitted_as_text(w["resubmissions"]) if w.get("resubmissions") else ""),
    ]
    if w.get("env") is not None:
        facts.append(("env", " ".join(f"{k}={v['value']}" for k, v in w["env"].items()) or "-"))
    for label, value in facts:
        if value:
            out.write(f"  {label + ':':<17}{value}\n")
    if w.get("idle"):
        out.write(f"  {idle_held_text(w['idle'])}\n")
    _why(w, out)
    if w.get("attempts"):
        out.write("attempts:\n")
        table(
            w["attempts"],
            [
                ("  #", lambda a: f"  {a['number']}"),
                ("HOSTS", host_words),
                ("GPUS", lambda a: gpu_words(a["gpus"])),
                ("STARTED", lambda a: when(a["started_at"]) or ("never started" if a["ended_at"] else "starting")),
                (
                    "PROTECTED-UNTIL",
                    lambda a: (
                        "unfunded"
                        if a.get("unfunded")
                        else when(a["protected_until"])
                        if a["allocated"]
                        else "unallocated"
                    ),
                ),
                ("ENDED", lambda a: when(a["ended_at"]) or ("stopping" if a["stop_requested_at"] else "running")),
                (
                    "REASON",
                    lambda a: end_words(a["end_reason"], a["exit_code"]),
                ),
            ],
            out,
        )
        for a in w["attempts"]:
            for silent in a.get("silent_hosts") or []:
                out.write(f"  attempt {a['number']}: {silent_host_words(silent)}\n")
            for draining in a.get("draining_hosts") or []:  # an older server sends none
                out.write(f"  attempt {a['number']}: {draining_host_words(draining)}\n")
        if w.get("efficiency"):  # an older server sends none
            several = len(w["attempts"]) > 1
            out.write(f"efficiency (all attempts; each: fairway seff {w['id']}):\n" if several else "efficiency:\n")
            _efficiency_block(w["efficiency"], out)
    events = w.get("events") or []
    # [-0:] was every event; with fewer events than --events, len - N < 0 showed only the last ones
    shown = events[max(0, len(events) - args.events) :] if args.events else []
    if shown:
        out.write("events:\n")
        if left_out := len(events) - len(shown):  # the page and the API show every one (try42)
            plural = "s" if left_out > 1 else ""
            out.write(f"  … {left_out} earlier event{plural}: fairway show {w['id']} --events {len(events)}\n")
        for e in shown:
            actor = f" (by {e['actor']})" if e.get("actor") else ""
            out.write(f"  {when(e['at'])}  {e['kind']}: {e['message']}{actor}\n")
    return EXIT_OK


def _efficiency_block(e: dict[str, Any], out: TextIO, indent: str = "  ") -> None:
    for label, words in efficiency_lines(e):
        out.write(f"{indent}{label + ':':<17}{words}\n")


def cmd_seff(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway seff ID``: how well a workload used the GPUs it held, like Slurm's ``seff``: all its
    attempts together, then each (the API's ``efficiency``; docs/jobs.md "Efficiency")."""
    w = Api(config.server, config.token, escape=not args.json).call("GET", f"workloads/{_workload_id(args.id)}/")
    attempts = w.get("attempts") or []
    if args.json:
        emit_json(
            {
                "id": w["id"],
                "efficiency": w.get("efficiency"),
                "attempts": [{"number": a["number"], "efficiency": a.get("efficiency")} for a in attempts],
            },
            out,
        )
        return EXIT_OK
    out.write(f"Workload:        #{w['id']} {w['name']}\n")
    out.write(f"State:           {w['state']}\n")
    out.write(f"User:            {w['owner']}\n")  # try61: "alice/nlp/olmo" read as one budget path
    out.write(f"Budget:          {w['budget']}\n")
    out.write(f"GPUs:            {w['gpu_count']} × {w['gpu_model']}\n")
    if w.get("efficiency") is None:
        raise CliError(EXIT_API, "the server does not report efficiency (an older version)")
    if not attempts:
        final = w["state"] in FINAL_WORKLOAD_STATES  # brk58: "none yet" of one canceled before it started
        out.write(f"Attempts:        none\n{no_attempt_text(w['state'], final)}\n")
        return EXIT_OK
    out.write(f"Attempts:        {len(attempts)}\n")
    _efficiency_block(w["efficiency"], out, indent="")
    if len(attempts) > 1:
        for a in attempts:
            if a.get("efficiency"):
                out.write(f"attempt {a['number']}:\n")
                _efficiency_block(a["efficiency"], out)
    return EXIT_OK


EXEC_HTTP_MARGIN_S = 15.0
"""How much longer than the command's timeout ``fairway exec`` waits for the server's answer."""


def cmd_exec(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway exec ID [--timeout 60] [--attempt N] -- CMD...``: run CMD once inside one's own
    running workload (Slurm's ``srun --jobid --overlap``, ``kubectl exec``; docs/jobs.md, "Run a
    command in a running workload"); its stdout and stderr to ours, its exit code ours (124: killed
    at the timeout). No TTY, no stdin. Written as it came when not to a terminal (``> file``), its
    control characters escaped on one (as ``fairway logs``)."""
    if not args.command:  # try60: -it was shown the one-shot's example
        example = "fairway exec -it ID -- bash" if args.stdin or args.tty else "fairway exec ID -- nvidia-smi"
        raise CliError(EXIT_USAGE, f"give the command after --: {example}")
    if args.stdin or args.tty:
        return _exec_interactive(args, config)
    body: dict[str, Any] = {"command": list(args.command), "timeout": args.timeout}
    if args.attempt is not None:
        body["attempt"] = args.attempt
    if args.rank:
        body["rank"] = args.rank
    api = Api(config.server, config.token, timeout=args.timeout + EXEC_HTTP_MARGIN_S, escape=False)
    wid = _workload_id(args.id)
    try:
        done = api.call("POST", f"workloads/{wid}/exec/", body=body)
    except CliError as exc:
        # the agent never answered (exit 124); a proxy's 504 is not this (left60)
        exit_code = EXIT_TIMEOUT if exc.code == "exec_timeout" else exc.exit_code
        raise CliError(exit_code, _workload_words(wid, exc.message), exc.code, exc.retry_after) from None
    if args.json:
        emit_json(done, out)
        return int(done["exit_code"])
    err = getattr(args, "err", None) or sys.stderr
    for stream, name in ((out, "stdout"), (err, "stderr")):
        _write_output(stream, _exec_output(done, name))
    if done.get("truncated"):
        err.write(  # try59: said nothing of how to read the rest
            "fairway: output cut at 1 MiB per stream; for all of it, write it to a file in the workload "
            f"(... > /tmp/out) and read that in parts: fairway exec {wid} -- tail -c 1000000 /tmp/out\n"
        )
    if done.get("timed_out"):
        err.write(f"fairway: killed after {args.timeout:g} s (--timeout)\n")
    return int(done["exit_code"])


def _exec_output(done: dict[str, Any], stream: str) -> bytes:
    """A one-shot command's ``stream`` as it was (exec47: ``stdout_base64``); a server older than
    that answers only its text (UTF-8, bad bytes replaced)."""
    if (data := done.get(f"{stream}_base64")) is not None:
        return base64.b64decode(str(data))
    return str(done.get(stream, "")).encode()


def _write_output(stream: TextIO, data: bytes) -> None:
    """``data`` to ``stream`` as it is (``> file``, ``| tar x``: its bytes, to ``stream.buffer``);
    on a terminal as text, its control characters escaped (as ``fairway logs``)."""
    isatty = getattr(stream, "isatty", None)
    raw = getattr(stream, "buffer", None)
    if (isatty is not None and isatty()) or raw is None:  # a terminal, or text only (a test's StringIO)
        text = data.decode(errors="replace")
        stream.write(escape_text(text) if isatty is not None and isatty() else text)
    else:
        stream.flush()  # what was written as text goes first
        raw.write(data)
        raw.flush()
    stream.flush()


def _exec_interactive(args: argparse.Namespace, config: Config) -> int:
    """``fairway exec -it ID -- CMD``: CMD on a terminal inside one's running workload, this
    terminal in raw mode for it (kubectl's ``exec -it``, Slurm's ``srun --pty --overlap``;
    ``fairway_cli.session``); its exit code ours."""
    from fairway_cli import session
    from fairway_cli.wsclient import WebSocketError

    if not args.stdin:
        raise CliError(EXIT_USAGE, "an interactive session takes both -i and -t: fairway exec -it ID -- bash")
    if args.json:
        raise CliError(EXIT_USAGE, "--json is for a one-shot command, not an interactive session (-it)")
    wid = _workload_id(args.id)
    if not args.tty:  # pf63: kubectl's exec -i, stdin piped to the command, no terminal
        return _exec_piped(args, config, wid)
    try:
        stdin_fd = sys.stdin.fileno()
    except (OSError, ValueError):  # no descriptor at all (io.UnsupportedOperation is both)
        stdin_fd = -1
    if stdin_fd < 0 or not os.isatty(stdin_fd):
        raise CliError(
            EXIT_USAGE,
            "-t needs a terminal: stdin is not one (-i alone pipes it to the command; leave out -it to run a "
            "one-shot command)",
        )
    rows, cols = session.terminal_size(stdin_fd)
    first = {"workload": wid, "attempt": args.attempt, "command": list(args.command), "tty": True}
    if args.rank:
        first["rank"] = args.rank
    try:
        ws, started = session.open_session(
            config.server, config.token, f"fairway-cli/{__version__}", {**first, "rows": rows, "cols": cols}
        )
        return session.relay(ws, stdin_fd, sys.stdout.buffer, raw=True, window=bool(started.get("window")))
    except session.SessionRefused as exc:
        raise _stream_refusal(exc, wid) from None
    except WebSocketError as exc:
        raise _stream_unreached(config.server, exc) from None


def _exec_piped(args: argparse.Namespace, config: Config, wid: int) -> int:
    """``fairway exec -i ID -- CMD`` (pf63; kubectl's ``exec -i``): this stdin piped to CMD inside
    one's running workload, no terminal, its end CMD's end of input; its stdout and stderr to ours as
    they came (bytes, not text), its exit code ours (``fairway_cli.session.relay_pipe``)."""
    from fairway_cli import session
    from fairway_cli.wsclient import WebSocketError

    first: dict[str, Any] = {"workload": wid, "attempt": args.attempt, "command": list(args.command), "tty": False}
    if args.rank:
        first["rank"] = args.rank
    err = getattr(args, "err", None) or sys.stderr
    try:
        ws, _started = session.open_session(config.server, config.token, f"fairway-cli/{__version__}", first)
        return session.relay_pipe(ws, sys.stdin.buffer, sys.stdout.buffer, getattr(err, "buffer", sys.stderr.buffer))
    except session.SessionRefused as exc:
        raise _stream_refusal(exc, wid) from None
    except WebSocketError as exc:
        raise _stream_unreached(config.server, exc) from None


def _stream_refusal(exc: Any, wid: int) -> CliError:
    """The CLI's error for a stream to a workload the server refused (``fairway exec -it``,
    ``fairway port-forward``: a :class:`fairway_cli.session.SessionRefused`): try60, the flag typed
    (``--attempt``) as the one-shot's refusal names it; exl61, the server's code in the one-shot's
    words (:func:`_error_text`) where the server refused."""
    said = _error_text(0, {"detail": exc.message, "code": exc.code}) if exc.from_server else exc.message
    if exc.code == TOKEN_EXPIRED and exc.from_server:  # the server's words, as answer_error's (tok46)
        return CliError(EXIT_AUTH, said, TOKEN_EXPIRED)
    if exc.code in ("not_authenticated", "authentication_failed"):
        return CliError(EXIT_AUTH, NOT_LOGGED_IN_TEXT)
    if exc.unavailable:  # close 4503, 4429: as an API request's 503, 429 (answer_error; cli46, cli46b: exited 1)
        # ws47: the seconds its close reason gave, as a Retry-After's
        said = try_later_text(exc.status, _workload_words(wid, said), exc.retry_after)
        return CliError(EXIT_TEMPFAIL, said, exc.code, exc.retry_after, exc.status)
    return CliError(EXIT_API, _workload_words(wid, said), exc.code)


def _stream_unreached(server: str, exc: Any) -> CliError:
    """The CLI's error for a stream's websocket that could not be opened or broke (a
    :class:`fairway_cli.wsclient.WebSocketError`): an HTTP 503 or 429 at its upgrade as an API request's
    (:func:`answer_error`), anything else the server unreachable."""
    said = f"{server}: {exc}"
    if exc.status in TRY_LATER_STATUSES:
        retry_after = retry_after_s(exc.retry_after)  # its upgrade's Retry-After, as an API answer's (ws47)
        return CliError(EXIT_TEMPFAIL, try_later_text(exc.status, said, retry_after), "", retry_after, exc.status)
    return CliError(EXIT_UNREACHABLE, said)


def _workload_words(wid: int, said: str) -> str:
    """A refusal of a command or stream in workload ``wid`` (``said``: the server's words and code,
    or the CLI's own), the one wording of the one-shot ``fairway exec``, ``-it`` and ``port-forward``
    (pf63: ``-it``'s began "workload N: ", the one-shot's did not): the flag typed for each field
    (:func:`in_flags`), and the workload named once, first where the words do not name it."""
    said = in_flags(said)
    return said if re.search(rf"\b[Ww]orkload {wid}\b", said) else f"workload {wid}: {said}"


def cmd_port_forward(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway port-forward ID [LOCAL:]REMOTE [--address 127.0.0.1] [--attempt N] [--rank R]``: a local port
    that reaches port REMOTE inside one's own running workload (``kubectl port-forward``, ``ssh -L``
    through a login node; ``fairway_cli.portforward``; docs/jobs.md, "Reach a port in a running
    workload"). Until Ctrl-C (exit 0) or the workload no longer runs (said, exit 1)."""
    import socket
    import threading

    from fairway_cli import portforward, session
    from fairway_cli.wsclient import WebSocketError

    try:
        local, remote = portforward.parse_ports(args.ports)
    except ValueError as exc:
        raise CliError(EXIT_USAGE, str(exc)) from None
    wid = _workload_id(args.id)
    agent = f"fairway-cli/{__version__}"
    fwd = portforward.Forward(config.server, config.token, agent, wid, args.attempt, remote, args.rank)
    try:
        fwd.check()
    except session.SessionRefused as exc:
        raise _stream_refusal(exc, wid) from None
    except WebSocketError as exc:
        raise _stream_unreached(config.server, exc) from None
    family = socket.AF_INET6 if ":" in args.address else socket.AF_INET
    try:
        listener = socket.create_server((args.address, local), family=family)
    except OSError as exc:
        raise CliError(EXIT_USAGE, f"cannot listen on {args.address}:{local}: {exc.strerror or exc}") from None
    err = getattr(args, "err", None) or sys.stderr
    if args.json:  # try62: --json printed this text line
        json.dump({"address": args.address, "port": local, "workload": wid, "remote_port": remote}, out)
        out.write("\n")
    else:
        out.write(f"Forwarding {args.address}:{local} -> workload {wid} port {remote} (Ctrl-C to stop)\n")
    out.flush()
    api = Api(config.server, config.token)

    def still_running() -> bool:
        try:
            return bool(api.call("GET", f"workloads/{wid}/")["state"] == "running")
        except (CliError, KeyError, TypeError):
            return True  # asked again at the next poll; the server's own check says why if not

    stop = threading.Event()
    try:
        why = portforward.serve(fwd, listener, err, still_running, stop)
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        stop.set()
        listener.close()
    raise CliError(EXIT_API, f"workload {wid} no longer takes connections, the forward ended: {in_flags(why)}")


def _resubmission(args: argparse.Namespace) -> dict[str, Any]:
    """The body of ``fairway resubmit``: only the fields its flags change (the server keeps the
    rest of the workload's spec; ``--env``/``--secret-env`` replace those variables only)."""
    body: dict[str, Any] = {}
    _flagged(args, body)
    return body


def cmd_resubmit(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway resubmit ID [flags]``: a new workload from ID's spec, the flags changing it."""
    pk = _workload_id(args.id)
    _check_wait_flags(args)
    if args.quote:
        return _quote(args, config, out, f"workloads/{pk}/resubmit/quote/")
    api = Api(config.server, config.token, escape=not args.json)
    return _submitted(args, api.call("POST", f"workloads/{pk}/resubmit/", body=_resubmission(args)), out, api)


SPEC_HEADER = (
    "# The spec of workload #{id}: `fairway submit -f FILE` submits it (or `fairway resubmit {id}`).\n"
    "# A secret's value is never shown: give it where it says <secret: give its value>.\n"
)


def _show_spec(pk: int, config: Config, out: TextIO) -> int:
    """``fairway show ID --spec``: the workload's spec as YAML that ``fairway submit -f`` reads.
    Not escaped for the terminal: YAML writes every control and non-ASCII character as an escape."""
    import yaml

    spec = Api(config.server, config.token, escape=False).call("GET", f"workloads/{pk}/spec/")
    out.write(SPEC_HEADER.format(id=pk))
    out.write(yaml.safe_dump(spec, sort_keys=False, allow_unicode=False, default_flow_style=None, width=100))
    return EXIT_OK


BULK_FILTERS = ("mine", "owner", "state", "budget", "cluster")
"""The options that make cancel, hold and release act on what a filter matches (with ``--group``
too, once one of these or ``--dry-run`` is given)."""
BULK_CHUNK = 200
"""Ids per request of a confirmed bulk action: each workload is a transaction of its own (2-30 ms
measured), so a request stays well inside the 30 s the CLI waits for an answer, whatever the count."""
BULK_PAST = {"cancel": "canceled", "hold": "held", "release": "released"}
SKIPS_SHOWN = 20
"""Ids shown per reason a workload was left as it is (others' work can be thousands)."""


def _workloads(n: int) -> str:
    return f"{n} workload{'' if n == 1 else 's'}"


def _skip_lines(answer: dict[str, Any]) -> list[str]:
    """The skipped workloads by reason: ``2 workloads left as they are (forbidden): #4 #5 — Only ...``."""
    by_code: dict[str, list[int]] = {}
    for skip in answer["skips"]:
        by_code.setdefault(skip["code"], []).append(skip["id"])
    lines = []
    for code, ids in by_code.items():
        shown = " ".join(f"#{i}" for i in ids[:SKIPS_SHOWN])
        more = f" (+{len(ids) - SKIPS_SHOWN} more; --json lists them)" if len(ids) > SKIPS_SHOWN else ""
        reason = answer["reasons"].get(code, "")
        lines.append(f"{_workloads(len(ids))} left as they are ({code}): {shown}{more} — {reason}")
    return lines


def _confirmed(args: argparse.Namespace, verb: str, n: int) -> bool:
    """``--yes``, or the person at the terminal answers yes; without a terminal, a refusal. The
    question goes to stderr, as ``rm -i``'s: with stdout redirected (``> log``) it was written
    into the file while the command waited on the keyboard (brk51)."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise CliError(
            EXIT_USAGE,
            f"{_workloads(n)} to {verb}: add --yes to {verb} them (no terminal to ask on), or --dry-run to list them",
        )
    sys.stderr.write(f"{verb.capitalize()} these {_workloads(n)}? [y/N] ")
    sys.stderr.flush()
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def _bulk(verb: str, args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway cancel|hold|release`` by filters (``POST workloads/bulk/``; docs/jobs.md "Bulk
    actions"): the count (``--dry-run``: the ids too, nothing changed), a confirmation unless
    ``--yes``, then the action on exactly the ids counted, :data:`BULK_CHUNK` a request."""
    if getattr(args, "ids", None) or getattr(args, "id", None) is not None:
        raise CliError(EXIT_USAGE, "give workload ids or filters (--mine, --state, ...), not both")
    if args.json and not (args.yes or args.dry_run):
        raise CliError(EXIT_USAGE, "--json needs --yes (or --dry-run): there is no question to answer")
    # The server's rule (scheduler.bulk.require_filter) on the filters given: the unfinished states
    # workload_filters adds by default narrow nothing (left52: `cancel --dry-run` took the whole queue).
    given = workload_filters(args, everything=True)
    if not any(str(value if value is not None else "").strip() for value in given.values()):
        raise CliError(
            EXIT_USAGE,
            "name at least one filter (--mine, --owner, --state, --budget, --cluster, --group): a bulk "
            f"{verb} never takes the whole queue (the unfinished states it takes by default narrow nothing)",
        )
    params = workload_filters(args)
    api = Api(config.server, config.token, escape=not args.json)
    preview = api.call("POST", "workloads/bulk/", params=params, body={"action": verb, "dry_run": True})
    text = out if not args.json else io.StringIO()
    n = preview["changed"]
    if not preview["matched"]:
        text.write(f"no workload matches: nothing to {verb}\n")
    else:
        stopping = len(preview["stopping"])
        started = f" {bulk_stopping_text(stopping, done=False)}" if stopping else ""
        text.write(f"{_workloads(preview['matched'])} match: {n} to {verb}{started}\n")
    if args.dry_run:
        if n:
            text.write("  " + " ".join(f"#{i}" for i in preview["ids"]) + "\n")
        for line in _skip_lines(preview):
            text.write(line + "\n")
        text.write("dry run: nothing changed\n")
        if args.json:
            emit_json(preview, out)
        return EXIT_OK
    for line in _skip_lines(preview):
        text.write(line + "\n")
    if not n:
        if args.json:  # not a dry run: what happened, nothing (it said dry_run: true, left56)
            emit_json({**preview, "dry_run": False}, out)
        return EXIT_OK
    if not _confirmed(args, verb, n):
        text.write("nothing changed\n")
        return EXIT_OK
    done: dict[str, Any] = {**preview, "dry_run": False, "ids": [], "stopping": [], "skips": [], "reasons": {}}
    for start in range(0, n, BULK_CHUNK):
        chunk = preview["ids"][start : start + BULK_CHUNK]
        try:
            answer = api.call("POST", "workloads/bulk/", params=params, body={"action": verb, "ids": chunk})
        except CliError as exc:
            if not start:
                raise
            # brk55: the error alone said nothing of the chunks before it, already done
            raise CliError(
                exc.exit_code,
                f"{BULK_PAST[verb]} {_workloads(len(done['ids']))} of {n} before: {exc.message}; run the "
                "command again for the rest (--dry-run lists them)",
                exc.code,
                exc.retry_after,
            ) from None
        for key in ("ids", "stopping", "skips"):
            done[key] += answer[key]
        done["reasons"].update(answer["reasons"])
    done["changed"], done["skipped"] = len(done["ids"]), len(done["skips"])
    stopped = len(done["stopping"])
    asked = f" {bulk_stopping_text(stopped, done=True)}" if stopped else ""
    text.write(f"{BULK_PAST[verb]} {_workloads(done['changed'])}{asked}\n")
    for line in _skip_lines(done):
        text.write(line + "\n")
    if args.json:
        done["skips"] = sorted(preview["skips"] + done["skips"], key=lambda skip: skip["id"])
        done["reasons"] = {**preview["reasons"], **done["reasons"]}
        done["skipped"] = len(done["skips"])
        emit_json(done, out)
    return EXIT_OK


def _by_filter(args: argparse.Namespace) -> bool:
    return args.dry_run or any(getattr(args, name) for name in BULK_FILTERS)


def cmd_cancel(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway cancel ID...`` (each in turn, as Slurm's ``scancel 3 8``: a refused id does not
    stop the others, the refusals said on stderr at the end, exit :data:`EXIT_API`), ``--group G``
    or filters (:func:`_bulk`)."""
    if _by_filter(args):
        return _bulk("cancel", args, config, out)
    api = Api(config.server, config.token, escape=not args.json)
    if args.group is not None:
        if args.ids:
            raise CliError(EXIT_USAGE, "give workload ids or --group ID, not both")
        g = api.call("POST", f"groups/{args.group}/cancel/", body={})
        if args.json:
            emit_json(g, out)
        else:
            out.write(f"array group {g['group']}: {g['canceled']} workloads canceled or stopping\n")
        return EXIT_OK
    if not args.ids:
        raise CliError(EXIT_USAGE, "give one or more workload ids, --group ID or filters (--mine, --state, ...)")
    # every id checked before anything changes; each once, as wait (brk56: `cancel 3 3` exited 1 on its own cancel)
    ids = list(dict.fromkeys(_workload_id(i) for i in args.ids))
    answers: list[dict[str, Any]] = []
    refused: list[str] = []
    for wid in ids:
        try:
            w = api.call("POST", f"workloads/{wid}/cancel/", body={})
        except CliError as exc:
            if exc.exit_code != EXIT_API or len(ids) == 1:
                raise  # unreachable, not logged in: the next ids would fail alike; one id: as before
            refused.append(f"#{wid}: {exc.message}")
            continue
        answers.append(w)
        if not args.json:
            out.write(_canceled_text(w) + "\n")
    if args.json and answers:  # a refusal prints no document (left60: as gh's --json, kubectl's -o json)
        emit_json(answers[0] if len(ids) == 1 else answers, out)
    if refused:
        raise CliError(EXIT_API, "\n".join(refused))
    return EXIT_OK


def _canceled_text(w: dict[str, Any]) -> str:
    """What ``fairway cancel`` says of one workload the server canceled or asked to stop."""
    if w["state"] == "canceled":
        return f"#{w['id']} {w['name']} canceled"
    stop = w.get("stop") or {}
    charged = (
        "charged until then"
        if stop.get("charged_until_release", w.get("allocated"))
        else "unfunded: not charged"
        if w.get("allocated")  # its budget's cap made this attempt unfunded
        else "unallocated: never charged"
    )
    return (
        f"#{w['id']} {w['name']}: stop issued to attempt {stop.get('attempt', '?')}; "
        f"it ends {stop.get('ends_as', 'canceled')} once its GPUs are released ({charged})"
    )


UPDATE_OPTIONS = (
    ("name", "name"),
    ("budget", "budget"),
    ("gpus", "gpu_count"),
    ("gpu_model", "gpu_model"),
    ("min_runtime", "min_runtime"),
    ("max_runtime", "max_runtime"),
    ("retries", "retries"),
    ("cpus", "cpus"),
    ("memory", "memory"),
    ("shm", "shared_memory"),
)
"""``fairway update``'s options → the fields of ``PATCH workloads/{id}/`` (the server checks them)."""


def _override(field: str, value: Any) -> Any:
    """A flag's value for the API's ``field``: ``none`` in a field of :data:`CLEARABLE` is ``null``
    (no limit, the default again), for ``fairway update`` and ``submit``/``resubmit`` alike
    (:func:`fairway_cli.numbers.means_none`, the server's rule too)."""
    return None if field in CLEARABLE and means_none(value) else value


def cmd_update(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway update ID|--group G [options]``: change a pending workload (``scontrol update``), or
    the wall-time limit (``-t``) of a running one (lowered by its owner, raised by an admin)."""
    body: dict[str, Any] = {}
    for option, field in UPDATE_OPTIONS:
        value = getattr(args, option)
        if value is None:
            continue
        body[field] = _override(field, value)
    if not body:
        raise CliError(EXIT_USAGE, "give something to change, e.g. -g 8, -M 2h, -t 12h (fairway update --help)")
    api = Api(config.server, config.token, escape=not args.json)
    if args.group is not None:
        if args.id is not None:
            raise CliError(EXIT_USAGE, "give a workload id or --group ID, not both")
        g = api.call("PATCH", f"groups/{args.group}/", body=body)
        if args.json:
            emit_json(g, out)
        elif g.get("changed") is False:
            out.write(group_unchanged_text(g["group"], "update") + "\n")
        else:
            n = g["updated"]
            out.write(f"array group {g['group']}: {n} pending member{'' if n == 1 else 's'} changed\n")
        return EXIT_OK
    if args.id is None:
        raise CliError(EXIT_USAGE, "give a workload id or --group ID")
    w = api.call("PATCH", f"workloads/{_workload_id(args.id)}/", body=body)
    if args.json:
        emit_json(w, out)
        return EXIT_OK
    if w.get("changed") is False:  # every value was already its own: nothing written (left52)
        out.write(nothing_to_change_text(w["id"]) + "\n")
        return EXIT_OK
    if w["state"] != "pending":  # a started workload changes only its wall-time limit (docs/jobs.md)
        limit = duration(w["max_runtime_s"]) if w.get("max_runtime_s") else "none"
        updated = [e for e in w.get("events") or [] if e.get("kind") == "updated"]  # this change's, the last
        passed = bool(updated and (updated[-1].get("data") or {}).get("passed"))
        out.write(f"#{w['id']} {w['name']} — {w['state']}: {running_limit_text(limit, passed)}\n")
        return EXIT_OK
    kind = f"minimum runtime {duration(w['min_runtime_s'])}" if w["min_runtime_s"] else "unallocated"
    limit = f", wall-time limit {duration(w['max_runtime_s'])}" if w.get("max_runtime_s") else ""
    held = f", held (fairway release {w['id']})" if w.get("hold") else ""  # changed, still waiting for it
    out.write(
        f"#{w['id']} {w['name']} now asks {w['gpu_count']} × {w['gpu_model']}, budget {w['budget']}, "
        f"{kind}{limit} — {w['state']}{held}, its place in the queue kept\n"
    )
    return EXIT_OK


HOLD_KIND_WORDS = {"user": "user hold: you, the owner or a budget manager may release it", "admin": "admin hold"}


def _hold_or_release(verb: str, args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway hold`` / ``fairway release`` (Slurm's ``scontrol hold/release``; docs/jobs.md
    "Hold and release"): each id in turn, or every pending member of ``--group``. A refused id
    does not stop the others: the refusals are said on stderr at the end, exit :data:`EXIT_API`."""
    if _by_filter(args):
        return _bulk(verb, args, config, out)
    api = Api(config.server, config.token, escape=not args.json)
    if args.group is not None:
        if args.ids:
            raise CliError(EXIT_USAGE, "give workload ids or --group ID, not both")
        g = api.call("POST", f"groups/{args.group}/{verb}/", body={})
        if args.json:
            emit_json(g, out)
        elif g.get("changed") is False:
            out.write(group_unchanged_text(g["group"], verb) + "\n")
        else:
            done = g["held" if verb == "hold" else "released"]
            which = "pending" if verb == "hold" else "held"
            out.write(f"array group {g['group']}: {done} {which} member{'' if done == 1 else 's'} {verb_past(verb)}\n")
        return EXIT_OK
    if not args.ids:
        raise CliError(EXIT_USAGE, "give one or more workload ids, --group ID or filters (--mine, --state, ...)")
    # every id checked before anything changes; each once, as wait (brk56: `cancel 3 3` exited 1 on its own cancel)
    ids = list(dict.fromkeys(_workload_id(i) for i in args.ids))
    answers: list[dict[str, Any]] = []
    refused: list[str] = []
    me: list[str] = []  # the requester's user name, read once where an answer needs it
    for wid in ids:
        try:
            w = api.call("POST", f"workloads/{wid}/{verb}/", body={})
        except CliError as exc:
            if exc.exit_code != EXIT_API:
                raise  # unreachable, not logged in: the next ids would fail alike
            refused.append(f"#{wid}: {exc.message}")
            continue
        answers.append(w)
        if args.json:
            continue
        if verb == "hold" and w.get("hold") and not me:
            me.append(str(api.call("GET", "me/").get("username") or ""))
        # Someone else's hold changed nothing (the API's 200 no-op), since a hold that changes
        # writes its requester as held_by (an admin's replacing a user hold included); one's own
        # changed nothing where the answer says so (``changed``, left53).
        if verb == "hold" and w.get("hold") and (w.get("held_by") != me[0] or w.get("changed") is False):
            out.write(f"#{w['id']} {w['name']} {hold_unchanged_text(w, me[0])}\n")
            continue
        kind = f" ({HOLD_KIND_WORDS.get(w.get('hold') or '', w.get('hold'))})" if w.get("hold") else ""
        out.write(f"#{w['id']} {w['name']} {verb_past(verb)}{kind}\n")
    if args.json and answers:  # a refusal prints no document (left60: as gh's --json, kubectl's -o json)
        emit_json(answers, out)
    if refused:
        raise CliError(EXIT_API, "\n".join(refused))
    return EXIT_OK


def verb_past(verb: str) -> str:
    return "held" if verb == "hold" else "released"


def cmd_hold(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    return _hold_or_release("hold", args, config, out)


def cmd_release(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    return _hold_or_release("release", args, config, out)


NOTIFY_KINDS = ("started", "succeeded", "failed", "preempted", "estimate_moved", "idle")


def cmd_notifications(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    api = Api(config.server, config.token, escape=not args.json)
    current = api.call("GET", "notifications/")
    if args.email is not None or args.webhook_kinds is not None or args.webhook is not None:

        def kinds(text: str) -> list[str]:
            return [k.strip() for k in text.split(",") if k.strip()]

        body = dict(current)
        if args.email is not None:
            body["email_kinds"] = kinds(args.email)
        if args.webhook_kinds is not None:
            body["webhook_kinds"] = kinds(args.webhook_kinds)
        if args.webhook is not None:
            body["webhook_url"] = args.webhook
        try:
            current = api.call("PUT", "notifications/", body=body)
        except CliError as exc:
            if exc.code != "webhook_url_required":
                raise
            # the server's words name its field, webhook_url (try61): here it is --webhook
            kinds_text = ",".join(body.get("webhook_kinds") or []) or "KINDS"
            hint = f"name the URL: fairway notifications --webhook URL --webhook-kinds {kinds_text}"
            raise CliError(exc.exit_code, f"{exc.message}\n  {hint}", exc.code) from None
    if args.json:
        emit_json(current, out)
        return EXIT_OK
    email = ""
    if current["email_kinds"]:
        # the server sends to the account's address: without one every email is refused unsent
        address = api.call("GET", "me/").get("email")
        email = f" -> {address or '(no address on your account: ask an admin)'}"
    # Said plainly when nothing is set (tryout45: "webhook: - -> (no URL)").
    out.write(f"email:   {', '.join(current['email_kinds']) + email if email else 'none (--email KINDS sends them)'}\n")
    kinds, url = ", ".join(current["webhook_kinds"]), current["webhook_url"]
    if kinds and url:
        webhook = f"{kinds} -> {url}"
    elif url:
        webhook = f"{url}, for no kinds: nothing is sent (--webhook-kinds KINDS)"
    elif kinds:  # refused by the server (webhook_url_required) since a tryout: said if an old row has it
        webhook = f"{kinds}, but no URL: nothing is sent (--webhook URL)"
    else:
        webhook = "none (--webhook URL --webhook-kinds KINDS sets one)"
    out.write(f"webhook: {webhook}\n")
    return EXIT_OK


FINAL_WORKLOAD_STATES = ("succeeded", "failed", "canceled")
"""States a workload never leaves (``scheduler.models.Workload.FINAL_STATES``; a test keeps the
two equal: the CLI imports nothing of the server)."""
SUCCEEDED = FINAL_WORKLOAD_STATES[0]
"""The one final state that is a success (``fairway wait`` exits 0 when every workload reached it)."""


def _workload_open(api: Api, wid: int) -> bool:
    """Whether workload ``wid`` has not ended (it may still start or print)."""
    return api.call("GET", f"workloads/{wid}/")["state"] not in FINAL_WORKLOAD_STATES


def cmd_logs(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    api = Api(config.server, config.token, escape=False)  # the log text is escaped below, offsets need it raw
    wid = _workload_id(args.id)
    printed: dict[int, int] = {}  # rank -> end offset already written
    errors: set[str] = set()  # each part's error, said once
    waited = False
    while True:
        try:
            tail = api.call("GET", f"workloads/{wid}/logs/", params={"tail": args.tail, "attempt": args.attempt})
        except CliError as exc:
            # `fairway submit … && fairway logs ID -f` met a workload still pending and stopped at
            # once (tryout36): following waits for its first attempt, unless it ended without one.
            if exc.code == "no_attempt" and args.attempt is None and not args.follow:
                # try50: said nothing of -f, which waits for the start
                state = api.call("GET", f"workloads/{wid}/")["state"]
                if state not in FINAL_WORKLOAD_STATES:
                    hint = f"it is {state}: `fairway logs {wid} -f` waits for its start"
                    raise CliError(exc.exit_code, f"{exc.message}\n  {hint}", exc.code) from None
            if not (args.follow and args.attempt is None and exc.code == "no_attempt"):
                raise
            state = api.call("GET", f"workloads/{wid}/")["state"]
            if state in FINAL_WORKLOAD_STATES:
                raise CliError(EXIT_API, f"#{wid} ended {state} without an attempt: no log") from None
            if not waited and not args.json:
                out.write(f"[#{wid} is {state}: waiting for its first attempt to start]\n")
                out.flush()
            waited = True
            time.sleep(args.interval)
            continue
        if args.json:
            emit_json(tail, out)
            return EXIT_OK
        # an attempt named that has ended grows no more: printed once (left53: followed, its host
        # gone, until the workload ended)
        finished = args.attempt is not None and bool(tail.get("ended"))
        done = True
        for part in tail["parts"]:
            if part.get("error"):
                said = f"[{escape_text(str(part['host']))}: {escape_text(str(part['error']))}]\n"
                if not printed and said not in errors:
                    out.write(said)
                    out.flush()
                errors.add(said)
                # no data is no end: an attempt still starting, a host offline for a while (try50:
                # "agent: no attempt … here" ended `logs -f` at once); followed until the workload ends
                done = done and not (args.follow and not finished and _workload_open(api, wid))
                continue
            data = part["data"]
            start = part["offset"]
            end = start + len(data.encode("utf-8"))
            seen = printed.get(part["rank"], start)
            if end > seen:
                skip = max(0, seen - start)
                text = data.encode("utf-8")[skip:].decode("utf-8", "replace")
                out.write(text if args.raw else escape_text(text, keep="\n\t"))
                out.flush()
            printed[part["rank"]] = max(seen, end)
            done = done and part["eof"]
        if not args.follow and tail["parts"] and not any(p.get("data") or p.get("error") for p in tail["parts"]):
            # nothing printed read as a command that did nothing (the page says "(empty)"); on
            # stderr, so `fairway logs ID > file` still holds only the log (try40)
            sys.stderr.write(f"[#{wid} attempt {tail.get('attempt', '?')}: {_no_log_text(tail['parts'], args.tail)}]\n")
        if args.follow and done and not finished:
            return _followed_end(api, args, wid, tail.get("attempt"))
        if not args.follow or done or finished:
            return EXIT_OK
        time.sleep(args.interval)


def _no_log_text(parts: list[dict[str, Any]], asked: int) -> str:
    """What ``fairway logs`` says of a tail with no text: an empty log, or a log whose last
    ``asked`` bytes hold none of it (try50b: ``--tail 0`` of a 471-byte log read "the log is
    empty"; a part's ``offset`` is where its text starts, the log's end when it sends none)."""
    size = max((int(p.get("offset") or 0) for p in parts), default=0)
    if size == 0:
        return "the log is empty"
    return f"none of its log's {size:,} bytes is within --tail {asked}"


def _followed_end(api: Api, args: argparse.Namespace, wid: int, number: Any) -> int:
    """How a followed workload stands once its attempt's log has ended (``fairway logs -f``), on
    stderr in ``fairway wait``'s words (``[#12 train: failed (exit 5)]``), and the exit code
    ``fairway wait`` gives it (:func:`wait_exit_code`): exit 0 said nothing of a failure (tryout47b).
    The agent ends the log before it reports the exit: asked again until the server has the
    attempt's end. An attempt ended while the workload goes on (a retry) exits 0."""
    while True:
        w = api.call("GET", f"workloads/{wid}/")
        open_attempt = any(a.get("number") == number and not a.get("ended_at") for a in w.get("attempts") or ())
        if w["state"] in FINAL_WORKLOAD_STATES or not open_attempt:
            break
        time.sleep(args.interval)
    args.err.write(f"[{escape_text(_wait_line(None, w))}]\n")
    return wait_exit_code([w]) if w["state"] in FINAL_WORKLOAD_STATES else EXIT_OK


EXIT_NOT_SUCCEEDED = 1
"""``fairway wait``: every workload is final, and at least one did not succeed (failed, canceled)."""
EXIT_TIMEOUT = 124
"""``fairway wait --timeout``: the time ran out first (the code GNU ``timeout`` exits with)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT): what a shell reports for a program it stopped so."""


def _wait_flags(p: argparse.ArgumentParser, *, after_submit: bool = False) -> None:
    """The options of ``fairway wait``, and of ``submit``/``resubmit`` (``after_submit``: ``--wait``,
    and ``--wait-timeout``, since their ``-t`` is the wall-time limit); both fill ``args.timeout``
    and ``args.interval``."""
    timeout = "--wait-timeout" if after_submit else "--timeout"
    if after_submit:
        p.add_argument(
            "--wait",
            action="store_true",
            help="then wait until it ends (an array: every member), as `fairway wait`; exit 0 only if it succeeded",
        )
    p.add_argument(
        timeout,
        dest="timeout",
        type=_wait_timeout,
        metavar="DURATION",
        help=f"stop waiting after this long (90s, 30m, 2h30m), exit {EXIT_TIMEOUT}; the work goes on. The"
        f" wait outlives a server restart but gives up (exit {EXIT_UNREACHABLE}) once every poll has failed"
        f" (HTTP 5xx, no connection) for {duration(int(GIVE_UP_S))} and {GIVE_UP_TRIES} polls in a row",
    )
    # The first pause between polls (then backing off to 15x it): short in tests, as `logs --interval`.
    interval = "--wait-interval" if after_submit else "--interval"
    p.add_argument(interval, dest="interval", type=_poll_interval, default=FIRST_INTERVAL_S, help=argparse.SUPPRESS)


_wait_timeout = duration_s(1)
_poll_interval = positive_number(60)


def _wait_key(w: dict[str, Any]) -> tuple[str, str]:
    """What makes a progress line: a new state, or while pending a new reason (an estimate that
    moves alone is not news every poll)."""
    return w["state"], _pending_words(w)


def _wait_line(before: dict[str, Any] | None, w: dict[str, Any]) -> str:
    """``#12 train: pending (…)`` first, then ``#12 pending → running``; while pending, why and
    the estimated start in ``fairway ls``'s words (:func:`_why_short`, the API's ``pending_reason``
    and ``estimated_start`` that ``fairway show`` explains)."""
    why = _why_short(w)
    why = f" {in_brackets(why)}" if why else ""
    state = w["state"]
    if state in FINAL_WORKLOAD_STATES and (end := w.get("last_end")):  # an older server sends none
        # "running → failed" said nothing of the exit code `fairway show` gives (left56)
        ended = end_words(end["reason"], end.get("exit_code"))
        state = ended if end["reason"] == state else f"{state}: {ended}"
    if before is None:
        return f"#{w['id']} {w['name']}: {state}{why}"
    return f"#{w['id']} {before['state']} → {state}{why}"


def wait_for(
    api: Api,
    args: argparse.Namespace,
    out: TextIO,
    ids: Sequence[int] = (),
    group: int | None = None,
    *,
    submitted: str = "",
) -> int:
    """Wait until every workload of ``ids`` (or every member of array ``group``) is final
    (:data:`FINAL_WORKLOAD_STATES`), a line on ``out`` per change (none with ``--json``, which
    prints the final states), and exit as docs/jobs.md "Wait for workloads" says: 0 every one
    succeeded, :data:`EXIT_NOT_SUCCEEDED` else, :data:`EXIT_TIMEOUT` when ``args.timeout``
    seconds ran out first, :data:`EXIT_INTERRUPTED` on Ctrl-C. Every id is read once before
    waiting: an unknown one stops it with ``CliError`` (:data:`EXIT_API`), nothing waited for.
    The one function of ``fairway wait``, ``submit --wait`` and ``resubmit --wait``; ``submitted``
    names the work those just submitted (``#12``, ``array group 3``), whose first read
    :func:`_read_submitted` asks again while the server is busy or unreachable."""

    def said(text: str) -> None:
        if not args.json:
            out.write(text + "\n")
            out.flush()

    deadline = None if args.timeout is None else waiting.time.monotonic() + args.timeout

    def entry(read: Callable[[], _T]) -> _T:
        return _read_submitted(read, submitted, args, said, deadline) if submitted else read()

    if group is not None:
        members = len(entry(lambda: _require_group(api, group))["members"])

        def fetch(todo: set[int]) -> dict[int, dict[str, Any]]:  # every member, in pages of the server's most
            rows, _page = read_pages(api, "workloads/", {"group": group}, max(members, 1))
            return {w["id"]: w for w in sorted(rows, key=lambda w: w["id"])}  # newest first: in order

    else:

        def fetch(todo: set[int]) -> dict[int, dict[str, Any]]:
            rows = _by_ids(api, todo)
            if gone := sorted(todo - rows.keys()):  # deleted while waited for (read once already)
                raise CliError(EXIT_API, f"no workload {', '.join(f'#{pk}' for pk in gone)} any more", "not_found")
            return rows

    first = entry(lambda: _first_read(api, set(ids)) if group is None else fetch(set()))
    first = dict(sorted(first.items()))

    def polled(todo: set[int]) -> dict[int, dict[str, Any]]:
        try:
            return fetch(todo)
        except CliError as exc:  # busy or unreachable for a moment: the wait goes on (not signed out)
            if _busy(exc):
                raise _try_later(exc) from None
            if submitted:  # with --json nothing named it before (brk55), as the first read's errors do
                raise CliError(exc.exit_code, f"{submitted} was submitted, but {exc.message}", exc.code) from None
            raise

    try:
        outcome = poll_until_final(
            first,
            polled,
            is_final=lambda w: w["state"] in FINAL_WORKLOAD_STATES,
            key=_wait_key,
            on_change=lambda before, w: said(_wait_line(before, w)),
            on_later=lambda later, pause: said(f"[{later.message}: asking again in {duration(round(pause))}]"),
            interval=args.interval,
            timeout=None if deadline is None else max(deadline - waiting.time.monotonic(), 0.0),
        )
    except KeyboardInterrupt:
        # submit --json --wait printed no id before the wait's document (brk55): name what it submitted
        going = f"{submitted} was submitted and goes on" if submitted else "the workloads go on"
        raise CliError(
            EXIT_INTERRUPTED, f"interrupted: stopped waiting; {going} (`fairway cancel ID` stops one)"
        ) from None
    except GaveUp as gave_up:
        raise _gave_up_error(gave_up, submitted) from None
    return _waited(args, outcome, out)


def _gave_up_error(gave_up: GaveUp, submitted: str = "") -> CliError:
    """Why a wait stopped asking a server that kept failing (``fairway_cli.waiting.Outage``): exit 3, or
    :data:`EXIT_TEMPFAIL` with the words to try again when the last failed poll was answered 503 or 429
    (cli46b: a server that answered "try again later" on every poll read as one that cannot be reached)."""
    going = f"{submitted} was submitted and goes on" if submitted else "the workloads go on"
    text = (
        f"gave up waiting: the server failed every poll for {duration(round(gave_up.seconds))}"
        f" ({gave_up.tries} in a row; last: {gave_up.last.message}); {going}: wait again once it answers"
    )
    if gave_up.last.status in TRY_LATER_STATUSES:
        return CliError(EXIT_TEMPFAIL, try_later_text(gave_up.last.status, text, gave_up.last.after))
    return CliError(EXIT_UNREACHABLE, text)


def _try_later(exc: CliError) -> TryLater:
    """A :func:`_busy` error as a wait's poll reads it: a failure where the server gave no ``Retry-After``."""
    status = exc.status if exc.status in TRY_LATER_STATUSES else 0
    return TryLater(_busy_words(exc), exc.retry_after, failed=exc.retry_after is None, status=status)


def _busy(exc: CliError) -> bool:
    """The server is busy (429, 503: ``retry_after``; any 503), or unreachable for a moment: a wait asks again."""
    return exc.exit_code in (EXIT_UNREACHABLE, EXIT_TEMPFAIL) or exc.retry_after is not None


def _busy_words(exc: CliError) -> str:
    """A :func:`_busy` error's first sentence: "cannot reach URL: ConnectionError", "Request was throttled"."""
    return exc.message.split(". ")[0]


def _read_submitted(
    read: Callable[[], _T],
    submitted: str,
    args: argparse.Namespace,
    said: Callable[[str], None],
    deadline: float | None,
) -> _T:
    """The first read of a wait for work just submitted (``submit``/``resubmit --wait``). The
    submission succeeded: a busy or unreachable server is asked again, as the wait's polls are
    (``fairway_cli.waiting``'s pauses, never shorter than a ``Retry-After``), where exiting 1 or 3
    read as a failed submission and a script submitted it again (left52). Any error, and a
    ``--wait-timeout`` that runs out first, says that ``submitted`` was submitted."""
    pause, failing, outage = args.interval, False, Outage()
    while True:
        try:
            return read()
        except KeyboardInterrupt:  # during the read itself (a server slow to answer), not only the pause
            raise CliError(EXIT_INTERRUPTED, f"interrupted: stopped waiting; {submitted} was submitted") from None
        except CliError as exc:
            if not _busy(exc):
                raise CliError(exc.exit_code, f"{submitted} was submitted, but {exc.message}", exc.code) from None
            try:
                outage.note(_try_later(exc))
            except GaveUp as gave_up:
                raise _gave_up_error(gave_up, submitted) from None
            grown = pause * BACKOFF if failing else pause
            pause = max(min(grown, args.interval * CAP_FACTOR), exc.retry_after or 0.0)
            left = None if deadline is None else deadline - waiting.time.monotonic()
            if left is not None and left <= 0:
                raise CliError(
                    EXIT_TIMEOUT,
                    f"timed out after {duration(args.timeout)}; {submitted} was submitted, but could not be read:"
                    f" {exc.message}",
                ) from None
            if not failing:
                said(f"[{submitted} was submitted; {_busy_words(exc)}: asking again in {duration(round(pause))}]")
            failing = True
            try:
                waiting.time.sleep(pause if left is None else min(pause, left))
            except KeyboardInterrupt:
                raise CliError(EXIT_INTERRUPTED, f"interrupted: stopped waiting; {submitted} was submitted") from None


LIST_MAX_IDS = 500
"""The most ids one ``GET workloads/?id=…`` takes (the server's ``scheduler.api.filters.MAX_IDS``;
a test keeps the two equal: the CLI imports nothing of the server)."""


def _by_ids(api: Api, ids: set[int]) -> dict[int, dict[str, Any]]:
    """The list rows of the workloads ``ids`` that exist, by id ascending: one list request per
    :data:`LIST_MAX_IDS` ids (``fairway wait``'s poll: one ``GET workloads/{id}/`` each before)."""
    rows: dict[int, dict[str, Any]] = {}
    todo = sorted(ids)
    for start in range(0, len(todo), LIST_MAX_IDS):
        chunk = todo[start : start + LIST_MAX_IDS]
        page = api.call("GET", "workloads/", params={"id": ",".join(map(str, chunk)), "limit": len(chunk)})
        rows.update((w["id"], w) for w in page["results"])
    return dict(sorted(rows.items()))


def _first_read(api: Api, ids: set[int]) -> dict[int, dict[str, Any]]:
    """Every id read once; the unknown ones named together (``CliError``, :data:`EXIT_API`)."""
    rows = _by_ids(api, ids)
    if unknown := sorted(ids - rows.keys()):
        raise CliError(
            EXIT_API, f"no workload {', '.join(f'#{pk}' for pk in unknown)}: nothing waited for", "not_found"
        )
    return rows


def wait_exit_code(rows: Sequence[dict[str, Any]]) -> int:
    """The exit code of workloads every one final: 0 every one succeeded, :data:`EXIT_NOT_SUCCEEDED`
    else (``fairway wait``, ``submit --wait``, ``logs -f``: :func:`exit_codes_text`)."""
    return EXIT_NOT_SUCCEEDED if any(w["state"] != SUCCEEDED for w in rows) else EXIT_OK


def _waited(args: argparse.Namespace, outcome: Outcome, out: TextIO) -> int:
    """Print how the wait ended (``--json``: every workload's id, name and state, and whether the
    time ran out) and return its exit code."""
    rows = list(outcome.rows.values())
    failed = [w for w in rows if w["state"] != SUCCEEDED]
    code = EXIT_TIMEOUT if outcome.timed_out else wait_exit_code(rows)
    if args.json:
        emit_json(
            {
                "workloads": [{"id": w["id"], "name": w["name"], "state": w["state"]} for w in rows],
                "timed_out": outcome.timed_out,
                "exit_code": code,
            },
            out,
        )
        return code
    if outcome.timed_out:
        failed = [w for w in rows if w["state"] not in FINAL_WORKLOAD_STATES]
    listed = ", ".join(f"#{w['id']} {w['state']}" for w in failed[:10]) + (", …" if len(failed) > 10 else "")
    if outcome.timed_out:
        out.write(f"timed out after {duration(args.timeout)}; still not final: {listed}\n")
    elif failed:
        out.write(f"{len(rows) - len(failed)} of {len(rows)} succeeded; not: {listed}\n")
    else:
        out.write(f"{'all ' if len(rows) > 1 else ''}{len(rows)} succeeded\n")
    return code


def cmd_wait(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """``fairway wait ID... | --group G``: block until they end (Slurm's ``sbatch --wait``)."""
    if args.group is not None and args.ids:
        raise CliError(EXIT_USAGE, "give workload ids or --group ID, not both")
    if args.group is None and not args.ids:
        raise CliError(EXIT_USAGE, "give one or more workload ids or --group ID")
    ids = list(dict.fromkeys(_workload_id(i) for i in args.ids))  # every id checked before any request
    return wait_for(Api(config.server, config.token, escape=not args.json), args, out, ids, args.group)


def ratio_cell(b: dict[str, Any]) -> str:
    """A budget's ratio as the server wrote it (digits enough to tell every two budgets apart)."""
    if b.get("ratio") is None:
        return "-"
    return f"{b.get('ratio_text') or b['ratio']}×"


def attainment_cell(b: dict[str, Any]) -> str:
    return percent_text(b["attainment"], 1) if b.get("attainment") is not None else "-"  # the page's words


def cmd_budgets(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    trees = Api(config.server, config.token, escape=not args.json).call(
        "GET", "budgets/tree/", params={"cluster": args.cluster}
    )
    if args.json:
        emit_json(trees, out)
        return EXIT_OK
    for tree in trees:
        out.write(f"{tree['heading_text']}\n")
        table(
            tree["budgets"],
            [
                (
                    "BUDGET",
                    lambda b: (
                        "  " * b["depth"]
                        + b["name"]
                        + (" (archived)" if b["archived"] else "")
                        + (" (hold)" if b["hold"] else "")
                    ),
                ),
                ("SHARES", shares_cell),
                ("SHARE", lambda b: percent_text(b["normalized_share"], 1)),
                ("ENTITLED GPU-H", lambda b: gpu_hours_text(b["entitlement_gpu_hours"])),
                ("USED GPU-H", lambda b: gpu_hours_text(b["usage_gpu_hours"])),
                ("COMMITTED GPU-H", lambda b: gpu_hours_text(b["committed_gpu_hours"])),
                ("RATIO", ratio_cell),
                ("RANK", lambda b: rank_words(b["rank"], b["siblings"])),
                ("OWED GPU-H", lambda b: gpu_hours_text(b["owed_gpu_hours"])),
                ("ATTAINMENT", attainment_cell),
                ("RUNNING GPUS", lambda b: b["running_gpus"]),  # GPUs, as the page's "running GPUs"
                ("PENDING WORKLOADS", lambda b: b["pending_workloads"]),  # workloads, not GPUs
                ("CAP", lambda b: b.get("cap_text") or "-"),  # the server's words (an older one sends none)
            ],
            out,
            right={
                "SHARES",
                "SHARE",
                "ENTITLED GPU-H",
                "USED GPU-H",
                "COMMITTED GPU-H",
                "RATIO",
                "OWED GPU-H",
                "ATTAINMENT",
                "RUNNING GPUS",
                "PENDING WORKLOADS",
            },
        )
        out.write(boost_notes(tree["budgets"]) + "\n")
    return EXIT_OK


def shares_cell(b: dict[str, Any]) -> str:
    """``fairway budgets``' SHARES: the shares, or a temporary share short (``3 → 1 @18:00``:
    :func:`~fairway_cli.words.boost_cell`), its sentence below the table (:func:`boost_notes`)."""
    if not b["parent_id"]:
        return ""
    if b.get("boost_text") and b.get("boost_until"):  # an older server sends neither
        return boost_cell(b["shares"], b["boost_until"], b.get("boost_then_shares"))
    return str(b["shares"])


def boost_notes(budgets: list[dict[str, Any]]) -> str:
    """Each temporary share of a tree in the server's words, below its table (``fairway budgets``,
    ``fairway share``; try61, pages46), as ``fairway hosts`` names a scheduled drain below its own."""
    return "".join(f"  temporary: {b['path']} {b['boost_text']}\n" for b in budgets if b.get("boost_text"))


def cmd_share(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """The share tree like Slurm's ``sshare``: raw and normalized shares, raw and effective usage,
    and the fair-share standing, from the one standing (``budgets/tree/``). ``EffectvUsage`` is
    Slurm's under Fair Tree, the server's ``effective_usage``: the budget's usage over its parent's
    (it printed usage over the cluster's GPU-hours in the window, computed here)."""
    trees = Api(config.server, config.token, escape=not args.json).call(
        "GET", "budgets/tree/", params={"cluster": args.cluster}
    )
    if args.json:
        emit_json(trees, out)
        return EXIT_OK
    for tree in trees:
        # the columns' unit, which the table's Slurm headers do not say
        out.write(f"{tree['heading_text']} (RawUsage, Committed, Entitled: GPU-h)\n")
        table(
            tree["budgets"],
            [
                (
                    "Account",
                    lambda b: (
                        " " * b["depth"]
                        + b["name"]
                        + (" (archived)" if b.get("archived") else "")
                        + (" (hold)" if b.get("hold") else "")  # as `fairway budgets` (try38)
                    ),
                ),
                ("RawShares", lambda b: b["shares"] if b["parent_id"] else ""),
                ("NormShares", lambda b: f"{b['normalized_share']:.6f}"),
                ("RawUsage", lambda b: f"{b['usage_gpu_hours']:.3f}"),
                ("Committed", lambda b: f"{b['committed_gpu_hours']:.3f}"),
                ("EffectvUsage", lambda b: f"{b['effective_usage']:.6f}" if "effective_usage" in b else ""),
                ("Entitled", lambda b: f"{b['entitlement_gpu_hours']:.3f}"),
                ("Ratio", ratio_cell),
                ("Rank", lambda b: rank_words(b["rank"], b["siblings"])),
                ("Attainment", attainment_cell),
            ],
            out,
            right={
                "RawShares",
                "NormShares",
                "RawUsage",
                "Committed",
                "EffectvUsage",
                "Entitled",
                "Ratio",
                "Attainment",
            },
        )
        out.write(boost_notes(tree["budgets"]) + "\n")  # the RawShares of now (try61)
    return EXIT_OK


HISTORY_COLUMNS = (
    "workload",
    "attempt",
    "name",
    "owner",
    "budget",
    "cluster",
    "host",
    "hosts",
    "gpus",
    "gpu_model",
    "allocated",
    "submitted_at",
    "started_at",
    "ended_at",
    "elapsed_s",
    "end_reason",
    "exit_code",
    "charged_gpu_hours",
    "utilization",
)


def cmd_statement(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """A budget's accounting statement, the API's ``budgets/{id}/statement.csv``, by the budget's path."""
    api = Api(config.server, config.token, escape=False)
    path = args.budget.strip().strip("/")
    budgets = api.call("GET", "budgets/")
    found = [b for b in budgets if b["path"] == path]
    if not found:  # `olmo` for nlp/olmo: the server's suggestion, from the list (left52), archived too (tryout46)
        paths = [b["path"] for b in budgets if b["parent"] is not None]
        listed = "" if budget_hint_text(path, paths) else " `fairway budgets` lists them."
        raise CliError(EXIT_API, escape_text(unknown_budget_text(path, paths)) + listed)
    budget = min(found, key=lambda b: (b["archived"], -b["id"]))  # the live one, else the latest archived
    text = api.call(
        "GET", f"budgets/{budget['id']}/statement.csv", params={"since": args.since, "until": args.until}, raw=True
    )
    out.write(escape_text(text, keep="\n"))
    return EXIT_OK


def cmd_history(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """Finished attempts like ``sacct``; ``--csv`` for a spreadsheet (every field, one row each)."""
    # CSV too: it goes to the terminal unless redirected, and its cells are other users' text.
    page = Api(config.server, config.token, escape=not args.json).call(
        "GET",
        "workloads/history/",
        params={"since": args.since, "budget": args.budget, "cluster": args.cluster, "limit": args.limit},
    )
    rows = page["results"]
    if args.json:
        emit_json(rows, out)
        return EXIT_OK
    if args.csv:
        import csv

        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(HISTORY_COLUMNS)
        for r in rows:
            writer.writerow(
                [csv_cell(host_words(r) if c == "hosts" else "" if r.get(c) is None else r[c]) for c in HISTORY_COLUMNS]
            )
        return EXIT_OK
    # an older server sends no utilization: not measured is not what it said
    measured = [r for r in rows if "utilization" in r]
    cells, notes = utilization_cells((r["utilization"], r.get("utilization_why")) for r in measured)
    util = {id(r): cell for r, cell in zip(measured, cells, strict=True)}
    table(
        rows,
        [
            ("ID", lambda r: f"{r['workload']}.{r['attempt']}"),
            ("NAME", lambda r: r["name"][:30]),
            ("USER", lambda r: r["owner"]),
            ("BUDGET", lambda r: r["budget"]),
            ("GPUS", lambda r: f"{r['gpus']}×{r['gpu_model']}"),
            ("HOSTS", host_words),
            ("STARTED", lambda r: when(r["started_at"]) or "-"),
            ("ENDED", lambda r: when(r["ended_at"])),
            ("ELAPSED", lambda r: duration(r["elapsed_s"]) or "0"),
            ("STATE", lambda r: end_words(r["end_reason"], r["exit_code"])),
            ("CHARGED", lambda r: charged_text(r) if r["allocated"] else "free"),
            # not measured: a short cell, why in a note under the table (tryout47b: ~200 columns)
            ("UTIL", lambda r: util.get(id(r), "-")),
        ],
        out,
        right={"ELAPSED", "CHARGED", "UTIL"},
    )
    for note in notes:
        out.write(f"{note}\n")
    if page["count"] > len(rows):
        out.write(f"({len(rows)} of {page['count']}; --limit for more)\n")
    elif not rows:
        out.write(f"no attempt ended since {when(page['since'])}\n")
    return EXIT_OK


def _pct(value: Any) -> str:
    return percent_text(value) if isinstance(value, int | float) else "-"  # the metrics page's words


def cmd_metrics(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    """The four-metric pyramid (DESIGN.md §8) per cluster of ``--since``/``--until`` (read by the
    server, as the metrics page's form and the API read them), or of the last ``--days``, as the
    metrics page shows it: the utilization in the server's words (not measured, or over how much of
    the occupied time it was measured)."""
    since = args.since  # neither: the server's default, the 7 days before --until (or now)
    if args.days is not None:
        since = datetime.fromtimestamp(time.time() - args.days * 86400, tz=UTC).isoformat().replace("+00:00", "Z")
    api = Api(config.server, config.token, escape=not args.json)
    reports = api.call("GET", "metrics/pyramid/", params={"cluster": args.cluster, "since": since, "until": args.until})
    if args.json:  # the API's pyramid as it is (its occupancy now: the API's metrics/)
        emit_json(reports, out)
        return EXIT_OK
    # the page's occupancy right now, after the pyramid: the API's metrics/ (left51)
    now = {o["cluster"]: o for o in api.call("GET", "metrics/", params={"cluster": args.cluster})}
    for r in reports:
        _pyramid_lines(r, out)
        if r["cluster"] in now:
            out.write(f"  right now     {occupancy_now_text(now[r['cluster']])}\n")
    return EXIT_OK


def _pyramid_lines(r: dict[str, Any], out: TextIO) -> None:
    """One cluster's pyramid of ``fairway metrics``, as the metrics page shows it."""
    cover = r["range"]
    if not r["hours"]:
        out.write(f"{r['cluster']}: {NO_PYRAMID_HOURS}\n")
        return
    until = cover["partial_hour_until"]
    partial = f" and the current hour up to {when(until)}" if until else ""
    hours = cover["complete_hours"]
    out.write(
        f"{r['cluster']}: {when(cover['since'])} to {when(cover['until'])}, "
        f"{hours} complete hour{'' if hours == 1 else 's'}{partial}\n"
    )
    t = r["total"]
    out.write(f"  availability  {_pct(t['availability'])} ({AVAILABILITY_MEANS})\n")
    out.write(f"  occupancy     {_pct(t['occupancy'])} ({occupancy_parts_text(t)})\n")
    out.write(f"  utilization   {t['utilization_text']}\n")
    out.write(f"  impact        {_pct(t['impact'])}\n")
    _impact_per_budget(r, out)


def _impact_per_budget(report: dict[str, Any], out: TextIO) -> None:
    """The metrics page's "Impact per budget" of one cluster's report (``pyramid_report``'s
    ``budgets``, the same figures in the same words: lt61, the CLI lacked it); none from an older server."""
    if not report.get("budgets"):
        return
    window = duration_text(report.get("budgets_window_s"))
    out.write(f"  impact per budget, last {window}: {IMPACT_PER_BUDGET_MEANS}\n")
    buf = io.StringIO()
    columns: list[Column] = [
        ("BUDGET", lambda b: b["path"]),
        ("DELIVERED GPU-H", lambda b: gpu_hours_text(b["delivered_gpu_hours"])),
        ("OWED GPU-H", lambda b: gpu_hours_text(b["owed_gpu_hours"])),
        ("ENTITLEMENT GPU-H", lambda b: gpu_hours_text(b["entitlement_gpu_hours"])),
        ("DEMAND GPU-H", lambda b: gpu_hours_text(b["demand_gpu_hours"])),
        ("ATTAINMENT", lambda b: percent_text(b["attainment"], 1)),
        ("", lambda b: "archived" if b.get("archived") else ""),
    ]
    table(report["budgets"], columns, buf, right={h for h, _fn in columns[1:6]})
    out.write("".join(f"    {line}\n" for line in buf.getvalue().splitlines()))


HOST_ACTIONS = ("cordon", "drain", "drain-now", "resume", "cancel-drain", "remove")
SCHEDULABLE_HOST_ACTIONS = ("drain", "drain-now")
"""The actions ``--at`` / ``--in`` schedule for later (the API's ``at`` and ``in``)."""


def cmd_hosts(args: argparse.Namespace, config: Config, out: TextIO) -> int:
    api = Api(config.server, config.token, escape=not args.json)
    scheduled = args.at is not None or args.in_ is not None
    if scheduled and args.action not in SCHEDULABLE_HOST_ACTIONS:  # brk58: with no action, dropped unsaid
        what = args.action if args.action in HOST_ACTIONS else "showing hosts"
        raise CliError(EXIT_USAGE, f"fairway hosts: --at and --in schedule a drain or drain-now, not {what}")
    if args.action and args.action not in HOST_ACTIONS:
        # ``fairway hosts NAME``: one host (argparse's "invalid choice: 'gpu-07'" answered it, try37)
        if args.name:
            raise CliError(
                EXIT_USAGE,
                f"fairway hosts: {args.action!r} is not an action ({', '.join(HOST_ACTIONS)}); "
                "fairway hosts NAME shows one host",
            )
        return _show_host(api, args.action, args, out)
    if args.action:
        if not args.name:
            raise CliError(EXIT_USAGE, f"fairway hosts {args.action} NAME")
        if args.action == "remove":
            return _remove_host(api, args, out)
        body = {"reason": args.reason or ""}
        if scheduled:
            if args.at is not None and args.in_ is not None:
                raise CliError(EXIT_USAGE, "fairway hosts: give --at (a UTC time) or --in (a duration), not both")
            # the server reads both (the time against its own clock): one rule, the API's
            body.update({"at": args.at} if args.at is not None else {"in": args.in_})
        host = api.call("POST", f"hosts/{args.name}/{args.action}/", body=body)
        if args.json:
            emit_json(host, out)
        else:
            line = f"{host['name']}: {host_state_words({**host, 'scheduled_drain': None})}"
            if host["state"] == "offline" and (reason := host_reason(host)):
                # the action is kept for the agent's return (host_reason says so): "offline" alone read as refused
                line += f"; {reason}"
            elif host["state"] == "offline" and args.action == "resume":  # try56: "offline" alone
                line += "; active from when its agent is back"
            if change := host.get("scheduled_drain_change"):  # left59: a resume cancelled it unsaid
                line += f" ({change})"
            elif scheduled := host.get("scheduled_drain"):
                line += f"; {scheduled['summary']}"
            elif args.action == "cancel-drain":
                line += "; no drain scheduled"
            out.write(line + "\n")
        return EXIT_OK
    state = args.state.lower() if args.state else args.state  # sinfo -t DRAINED, as ls's (try55, brk56)
    hosts = api.call("GET", "hosts/", params={"cluster": args.cluster, "state": state})
    if args.json:
        emit_json(hosts, out)
        return EXIT_OK
    table(
        hosts,
        [
            ("NAME", lambda h: h["name"]),
            ("CLUSTER", lambda h: h["cluster"]),
            ("STATE", host_state_words),
            ("GPUS", lambda h: f"{h['gpu_count']}×{h['model']}"),
            ("CPUS", lambda h: h.get("cpus") or "-"),
            ("MEMORY", lambda h: size(h.get("memory_bytes"))),
            ("BUSY", lambda h: sum(1 for g in h["gpus"] if g["workload"] is not None)),
            ("IDLE", lambda h: h.get("idle_gpus", "-")),  # held idle (docs/jobs.md "Idle GPUs")
            ("UNHEALTHY", lambda h: sum(1 for g in h["gpus"] if g["health"] == "unhealthy")),
            ("ATTEMPTS", lambda h: h["open_attempts"]),
            ("PROTECTED-UNTIL", lambda h: when(h["protected_until"])),
            ("HEARTBEAT", lambda h: when(h["last_heartbeat"]) or "never"),
            ("AGENT", lambda h: h.get("agent_version") or "-"),
            ("ISOLATION", host_isolation),
            ("HEALTH", host_health),
        ],
        out,
        right={"BUSY", "IDLE", "UNHEALTHY", "ATTEMPTS"},
    )
    for h in hosts:
        if reason := host_reason(h):
            print(f"{h['name']}: {reason}", file=out)
        if held := h.get("pending_inventory"):
            print(f"{h['name']}: {held['summary']}", file=out)
        if scheduled := h.get("scheduled_drain"):
            print(f"{h['name']}: {scheduled['summary']}", file=out)
        if lost := h.get("attempts_lost_at"):
            print(f"{h['name']}: offline: {host_lost_words(h['open_attempts'], lost)}", file=out)
    for h in hosts:
        for warning in (h.get("isolation") or {}).get("warnings") or []:
            print(f"WARN {h['name']}: {warning}", file=out)
    return EXIT_OK


def _show_host(api: Api, name: str, args: argparse.Namespace, out: TextIO) -> int:
    """``fairway hosts NAME``: one host as ``GET hosts/{name}/`` gives it: its state and why, its
    hardware and labels, its agent, and each GPU with its health, workload and last sample."""
    host = api.call("GET", f"hosts/{name}/")
    if args.json:
        emit_json(host, out)
        return EXIT_OK
    state = host_state_words(host)
    labels = " ".join(f"{k}={v}" for k, v in sorted((host.get("labels") or {}).items())) or "-"
    fields = [
        ("cluster", host["cluster"]),
        ("state", state),
        ("why", host_reason(host)),
        ("scheduled", (host.get("scheduled_drain") or {}).get("summary", "")),
        ("inventory", (host.get("pending_inventory") or {}).get("summary", "")),
        (
            "hardware",
            f"{host['gpu_count']}×{host['model']}, {host.get('cpus') or '-'} CPUs, "
            f"{size(host.get('memory_bytes'))} memory",
        ),
        ("labels", labels),
        (
            "attempts",
            f"{host['open_attempts']} open"
            + (f", protected until {when(host['protected_until'])}" if host.get("protected_until") else "")
            + (
                f"; {host_lost_words(host['open_attempts'], host['attempts_lost_at'])}"
                if host.get("attempts_lost_at")
                else ""
            ),
        ),
        ("heartbeat", when(host.get("last_heartbeat")) or "never"),
        ("health", host_health(host)),
        ("agent", host.get("agent_version") or "-"),
        ("isolation", host_isolation(host)),
    ]
    out.write(f"{host['name']}\n")
    for key, value in fields:
        if value:
            out.write(f"  {key + ':':<11}{value}\n")
    for warning in (host.get("isolation") or {}).get("warnings") or []:
        out.write(f"WARN {host['name']}: {warning}\n")
    out.write("gpus:\n")

    def sample(g: dict[str, Any], key: str, unit: str) -> str:
        value = g.get(key)
        return "-" if value is None else f"{value:g}{unit}"

    table(
        host.get("gpus") or [],
        [
            ("GPU", lambda g: g["index"]),
            ("MODEL", lambda g: g["model"]),
            ("HEALTH", lambda g: g["health"]),
            (
                "WORKLOAD",
                lambda g: (
                    "-"
                    if g.get("workload") is None
                    else f"#{g['workload']}" + ("" if g.get("allocated") else " (unalloc.)")
                ),
            ),
            ("UTIL", lambda g: sample(g, "utilization_pct", "%")),
            ("MEM-USED", lambda g: sample(g, "memory_used_mb", " MiB")),
            ("TEMP", lambda g: sample(g, "temperature_c", " °C")),
            ("SAMPLED", lambda g: sample_age_text(g.get("sampled_at"))),
        ],
        out,
        right={"GPU", "UTIL", "MEM-USED", "TEMP", "SAMPLED"},
    )
    for g in host.get("gpus") or []:
        if g.get("report_text"):  # no sample: the server's words for why (scheduler.gpu_report)
            out.write(f"GPU {g['index']}: {g['report_text']}\n")
    return EXIT_OK


def _remove_host(api: Api, args: argparse.Namespace, out: TextIO) -> int:
    """``fairway hosts remove NAME --yes``: out of its cluster for good (the API's ``remove``)."""
    if not args.yes:
        raise CliError(
            EXIT_USAGE,
            f"fairway hosts remove {args.name} --yes: this takes the host out of its cluster for good "
            "(its GPUs leave every entitlement, its agent is refused; a machine that comes back joins "
            "under another name). It is refused while it still holds an attempt (drain it first); "
            "add --yes to remove it.",
        )
    removed = api.call("POST", f"hosts/{args.name}/remove/", body={"reason": args.reason or ""})
    if args.json:
        emit_json(removed, out)
    else:
        out.write(f"{removed['name']}: removed from cluster {removed['cluster']} at {when(removed['removed_at'])}\n")
    return EXIT_OK


def host_lost_words(open_attempts: int, lost_at: str) -> str:
    """An offline host's open attempts and when they end ``lost`` (the API's ``attempts_lost_at``),
    as the clusters page says it."""
    which = "its attempt ends" if open_attempts == 1 else f"its {open_attempts} attempts end"
    return f"{which} lost at {when(lost_at)} unless its agent is back"


def host_reason(host: dict[str, Any]) -> str:
    """Why a host is cordoned or drained (the API's ``state_reason``) in the one wording of it
    (:func:`fairway_cli.words.host_reason_words`); "" for an active host (or an older server)."""
    reason = host.get("state_reason")
    if not reason:
        return ""
    # an offline host's reason is that of the state it returns to, as the clusters page says (try41)
    return host_reason_words(reason, offline=host.get("state") == "offline")


def host_isolation(host: dict[str, Any]) -> str:
    """Whose identity attempts run under on the host (``owner`` | ``agent``), ``WARN`` first when
    its agent reported isolation warnings (printed below the table); ``-``: an older agent."""
    iso = host.get("isolation")
    if not iso:
        return "-"
    return ("WARN " if iso.get("warnings") else "") + str(iso.get("identity") or "?")


STALE_HEARTBEAT_S = 60.0


def host_health(host: dict[str, Any], now: datetime | None = None) -> str:
    """The agent's health as the server sees it: ``ok``, ``offline``, ``never connected``,
    ``stale <age>`` (no heartbeat for a minute) or ``<n> GPU unhealthy``."""
    if not host.get("last_heartbeat"):
        return "never connected"  # a joined host is offline until then: say why
    if host.get("state") == "offline":
        return "offline"
    try:
        age = ((now or datetime.now(UTC)) - datetime.fromisoformat(host["last_heartbeat"])).total_seconds()
    except (TypeError, ValueError):
        return "?"
    if age > STALE_HEARTBEAT_S:
        return f"stale {age:.0f}s"
    sick = sum(1 for g in host.get("gpus", []) if g.get("health") == "unhealthy")
    return f"{sick} GPU unhealthy" if sick else "ok"


# --- parser ---------------------------------------------------------------------------------------


CLUSTER_HELP = "only this cluster (its name)"
HOST_STATES = ("active", "cordoned", "draining", "drained", "offline")
"""A host's states (``scheduler.models.Host.State``; a test keeps the two equal)."""


def _submission_flags(p: argparse.ArgumentParser, *, again: bool = False) -> None:
    """The flags of ``fairway submit``, and of ``fairway resubmit`` (``again``: each replaces that
    field of the workload's spec; ``--env``/``--secret-env`` those variables)."""

    def default(text: str) -> str:
        return " (default: the workload's)" if again else f" (default: {text})"

    p.add_argument("--name", help="the name" + default("the program's name, the command's first word"))
    p.add_argument("--budget", "-b", help="leaf budget path, e.g. nlp/olmo" + default("the only one you may submit to"))
    p.add_argument("--cluster", "-c", help="the cluster to run on (its name)" + default("the only cluster"))
    p.add_argument("--gpus", "-g", type=_positive_int, help="GPU count" + default("1"))
    p.add_argument(
        "--gpu-model", "-m", help="e.g. A100" + default("the cluster's only model; name one where it has several")
    )
    p.add_argument("--image", "-i", help="container image, e.g. nvcr.io/nvidia/pytorch:24.05-py3" + default("none"))
    p.add_argument(
        "--min-runtime",
        "-M",
        help="seconds or 2h30m; 0 = unallocated (free, preemptible)"
        + (
            " (default: the workload's)"
            if again
            else " (required, here or in the -f spec; optional with --quote, which then quotes it too)"
        ),
    )
    none = "; none: the host's per-GPU share" if again else ""
    p.add_argument("--cpus", type=_cpus, help="CPUs per host" + default("the host's per-GPU share") + none)
    p.add_argument("--memory", "--mem", help="memory per host, e.g. 32G or 512M" + default("the per-GPU share") + none)
    p.add_argument(
        "--shm",
        help="size of /dev/shm, e.g. 8G, at most --memory"
        + default("the runtime's")
        + ("; none: the runtime's" if again else ""),
    )
    p.add_argument(
        "--env", "-e", action="append", metavar="NAME=VALUE", help="an environment variable of the workload (repeat it)"
    )
    p.add_argument(
        "--secret-env",
        "-s",
        action="append",
        metavar="NAME[=VALUE]",
        help="stored, never shown back; NAME alone reads the value from this shell",
    )
    replaces = " (replaces its list)" if again else ""
    p.add_argument("--mount", "-v", action="append", metavar="NAME", help="a mount of the cluster's catalog" + replaces)
    p.add_argument(
        "--max-runtime",
        "-t",
        help="wall-time limit per attempt (>= minimum runtime), e.g. 12h" + ("; none: no limit" if again else ""),
    )
    p.add_argument("--retries", type=_count, help=RETRIES_WORDS + default("0"))
    p.add_argument("--after", action="append", metavar="ID[:ok|any]", help="wait for these workloads to end" + replaces)
    p.add_argument(
        "--array", metavar="0-99[%N]", help="one workload per index (FAIRWAY_ARRAY_INDEX), at most N at once"
    )
    p.add_argument(
        "--hold", "-H", action="store_true", default=None, help="submit it held: it waits until `fairway release`"
    )
    p.add_argument(
        "--quote",
        action="store_true",
        help="submit nothing: show the estimated start, charge and ratio for the usual minimum runtimes"
        " (0, 30m, 2h, 8h, 1d, as its table writes them: the server's) and yours",
    )
    _wait_flags(p, after_submit=True)
    if again:  # after the id: a REMAINDER there took the flags too (fairway resubmit 12 -g 2)
        p.add_argument("command", nargs="*", help="-- program args... (replaces its command)")
    else:
        p.add_argument("command", nargs=argparse.REMAINDER, help="-- program args...")


def _bulk_flags(p: argparse.ArgumentParser, verb: str) -> None:
    """The filters of ``fairway ls`` on cancel, hold and release: act on what they match."""
    p.add_argument("--mine", action="store_true", help=f"{verb} my workloads that match (see fairway ls --mine)")
    p.add_argument("--owner", "-u", help="a user's workloads (yours, or those you may act on)")
    p.add_argument("--state", help="comma-separated states (default: the unfinished ones, as fairway ls)")
    p.add_argument("--budget", "-b", help="a budget (path or id) and its sub-budgets")
    p.add_argument("--cluster", "-c", help="a cluster")
    p.add_argument("--dry-run", action="store_true", help=f"list the workloads it would {verb}; change nothing")
    p.add_argument("--yes", "-y", action="store_true", help="do it without asking (needed without a terminal)")


def exit_codes_text() -> str:
    """The CLI's exit codes, its one table: ``fairway --help`` says it, and README (a test keeps
    them equal)."""
    return (
        f"Exit codes: {EXIT_OK} success; {EXIT_API} refused by the server (a 4xx other than 429: its words and code);"
        f" {EXIT_USAGE} bad usage; {EXIT_UNREACHABLE} the server cannot be reached, or failed (a 5xx other than"
        " 503: the server's words when in Fairway's error format, else that something in front of it answered);"
        f" {EXIT_AUTH} not logged in; {EXIT_TEMPFAIL} {UNAVAILABLE_TEXT} (overloaded, or its database or its link"
        f" to the agents down), or {THROTTLED_WORDS}: {try_again_words(None)}, or in the seconds it gives"
        " (nothing was wrong with the request; also a wait that gave up on such answers). fairway wait (and"
        " submit --wait, and logs -f once the workload ended):"
        f" {EXIT_NOT_SUCCEEDED} also when a workload did not succeed, {EXIT_TIMEOUT} --timeout ran out,"
        f" {EXIT_INTERRUPTED} interrupted. fairway exec: the command's own exit code once it ran ({EXIT_TIMEOUT}:"
        " killed at --timeout), which may be any of these."
    )


DASHED_VALUE = re.compile(r"-[0-9.]")
"""The start of a value that begins with a minus, not an option: ``-5m``, ``-1h30m``, ``-.5h``
(no option of fairway's starts with a digit or a dot)."""


class Parser(argparse.ArgumentParser):
    """argparse reading ``--in -5m`` as ``--in=-5m``, for every option and subcommand (subparsers are
    of their parent's class): a value that starts with a minus and a digit is a value, so the
    server's or the option's own check says what is wrong with it (pages46: ``fairway hosts drain
    gpu2 --in -5m`` said "argument --in: expected one argument", not the server's refusal).
    argparse reads only ``-5`` and ``-2.5`` so, as negative numbers."""

    def _parse_optional(self, arg_string: str) -> Any:
        if DASHED_VALUE.match(arg_string):
            return None  # a positional or an option's value, as argparse reads -5
        return super()._parse_optional(arg_string)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="fairway", description="Fairway: GPU time by budgets.", epilog=exit_codes_text())
    parser.add_argument("--version", action="version", version=f"fairway {__version__}")
    parser.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    parser.add_argument(
        "--server",
        metavar="URL",
        help=(  # in the order Config.load applies them
            f"server URL, before or after the command (default: $FAIRWAY_URL, else the one login saved,"
            f" else {DEFAULT_SERVER})"
        ),
    )
    sub = parser.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[..., int], help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
        # Also after the command (``fairway login --server URL``), as before it: one option.
        p.add_argument("--server", metavar="URL", default=argparse.SUPPRESS, help="server URL (as before the command)")
        p.set_defaults(handler=handler)
        return p

    p = add("login", cmd_login, "log in and save a token")
    p.add_argument("--username", "-u", help="your user name (asked for when not given)")
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    p.add_argument(
        "--token",
        nargs="?",
        const=TOKEN_FROM_STDIN,
        metavar="TOKEN",
        help="use a personal API token instead of a password; `--token -` (or `--token` alone) reads it from"
        " standard input, or asks for it without echo on a terminal: `--token TOKEN` shows the token to every"
        " user of this machine (the process list)",
    )
    add(
        "logout",
        cmd_logout,
        "forget the saved token here; a password login's is also deleted on the server, a personal token kept there",
    )
    add("whoami", cmd_whoami, "who am I, and my budgets")

    p = add("submit", cmd_submit, "submit a workload: flags, a YAML spec (-f), or both (flags win)")
    p.add_argument(
        "-f",
        "--file",
        help="YAML spec with the API's fields: gpu_count, min_runtime, ... (docs/jobs.md, "
        '"A spec file"; `fairway show ID --spec` writes one; - for stdin)',
    )
    _submission_flags(p)

    p = add(
        "resubmit",
        cmd_resubmit,
        "submit a workload again: its spec, the flags changing it (secret values: yours are reused, "
        "another's must be given with -s NAME)",
    )
    p.add_argument("id", help="the workload to submit again (any state)")
    _submission_flags(p, again=True)

    p = add("ls", cmd_ls, "list workloads (unfinished ones unless --all or --state)")
    p.add_argument(
        "--state",
        help=f"comma-separated states, any case: {UNFINISHED_STATES.replace(',', ', ')}, "
        f"{', '.join(FINAL_WORKLOAD_STATES)}",
    )
    p.add_argument("--budget", "-b", help="a budget (path or id) and its sub-budgets")
    p.add_argument("--owner", "-u", help="username")
    p.add_argument("--mine", action="store_true", help="only mine")
    p.add_argument("--cluster", "-c", help=CLUSTER_HELP)
    p.add_argument("--all", "-a", action="store_true", help="include finished workloads")
    p.add_argument("--group", type=_positive_int, help="the members of one array group (all states)")
    p.add_argument(
        "--resubmitted-from",
        type=_one_id,
        metavar="ID",
        help="the workloads resubmitted from workload ID (all states)",
    )
    p.add_argument(
        "--id", dest="id_list", type=_id_list, metavar="ID,ID", help="these workloads, comma-separated (all states)"
    )
    p.add_argument(
        "--idle", action="store_true", help="only running workloads whose GPUs are idle (docs/jobs.md 'Idle GPUs')"
    )
    p.add_argument("--limit", type=_positive_int, default=50, help="at most this many, newest first (default 50)")

    p = add("show", cmd_show, "one workload: why pending, estimated start, efficiency, attempts, events")
    p.add_argument("id", help="the workload's id")
    p.add_argument(
        "--spec",
        action="store_true",
        help="print its spec as YAML for `fairway submit -f` (secret values as placeholders to fill in)",
    )
    p.add_argument("--events", type=_count, default=10, help="how many recent events (10; 0: none)")

    p = add(
        "exec",
        cmd_exec,
        "run a command inside your running workload: once (fairway exec ID -- nvidia-smi) or on a terminal "
        "(fairway exec -it ID -- bash)",
    )
    p.add_argument("id", help="your running workload")
    p.add_argument(
        "-i",
        "--stdin",
        action="store_true",
        help="send stdin to the command: with -t on a terminal; alone through a pipe, no terminal "
        "(cat data | fairway exec -i ID -- python process.py)",
    )
    p.add_argument("-t", "--tty", action="store_true", help="run it on a terminal, interactively (with -i: -it)")
    p.add_argument(
        "--timeout",
        type=whole_number(1, EXEC_MAX_TIMEOUT_S),  # the server's bound: past it, a traceback (brk49)
        default=60,
        help=f"seconds before a one-shot command is killed (default 60, max {EXEC_MAX_TIMEOUT_S}; not with -it)",
    )
    p.add_argument("--attempt", type=_positive_int, help="its attempt number (default: the latest)")
    p.add_argument(
        "--rank", type=_count, default=0, help="a gang's member: run on the host of its node rank (default 0)"
    )
    p.add_argument("command", nargs="*", help="-- program args...")

    p = add(
        "port-forward",
        cmd_port_forward,
        "reach a TCP port inside your running workload from here (TensorBoard, Jupyter): "
        "fairway port-forward ID 6006, or LOCAL:REMOTE (8888:8889)",
    )
    p.add_argument("id", help="your running workload")
    p.add_argument("ports", metavar="[LOCAL:]REMOTE", help="the workload's port, and the local one if another")
    p.add_argument("--address", default="127.0.0.1", help="the local address to listen on (default 127.0.0.1)")
    p.add_argument("--attempt", type=_positive_int, help="its attempt number (default: the latest)")
    p.add_argument("--rank", type=_count, default=0, help="a gang's member: a port of its node rank's part (default 0)")

    p = add("seff", cmd_seff, "how well a workload used its GPUs, like Slurm's seff: utilization, idle, memory")
    p.add_argument("id", help="the workload's id")

    p = add(
        "cancel",
        cmd_cancel,
        "cancel workloads (ID...), every member of an array group (--group), or what filters match "
        "(--mine --state pending)",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="the workloads to cancel (or --group G, or filters)")
    p.add_argument("--group", type=_positive_int, help="an array group id")
    _bulk_flags(p, "cancel")

    p = add(
        "update",
        cmd_update,
        "change a pending workload (a running one: only -t), or every pending member of an array group (--group)",
    )
    p.add_argument("id", nargs="?", help="the workload to change (or --group G)")
    p.add_argument("--group", type=_positive_int, help="an array group id: each pending member (not --name)")
    p.add_argument("--name", help="a new name")
    p.add_argument("--budget", "-b", help="another leaf budget you may submit to (not once the workload has run)")
    p.add_argument("--gpus", "-g", type=_positive_int, help="GPU count")
    p.add_argument("--gpu-model", "-m", help="GPU model")
    p.add_argument("--min-runtime", "-M", help="seconds or 2h30m; 0 = unallocated")
    p.add_argument(
        "--max-runtime",
        "-t",
        help="wall-time limit per attempt, e.g. 12h; none: no limit (of a running workload: you may lower it, "
        "an admin raise it)",
    )
    p.add_argument("--retries", type=_count, help=RETRIES_WORDS)
    p.add_argument("--cpus", type=_cpus, help="CPUs per host; none: the host's per-GPU share")
    p.add_argument("--memory", "--mem", help="memory per host, e.g. 32G; none: the per-GPU share")
    p.add_argument("--shm", help="size of /dev/shm, e.g. 8G; none: the runtime's")

    p = add("hold", cmd_hold, "hold pending workloads (they never start until released), or an array group's")
    p.add_argument("ids", nargs="*", metavar="ID", help="the workloads to hold (or --group G)")
    p.add_argument("--group", type=_positive_int, help="an array group id: every pending member")
    _bulk_flags(p, "hold")

    p = add("release", cmd_release, "release held workloads (back in their place in the queue), or an array group's")
    p.add_argument("ids", nargs="*", metavar="ID", help="the workloads to release (or --group G)")
    p.add_argument("--group", type=_positive_int, help="an array group id: every held member")
    _bulk_flags(p, "release")

    p = add("notifications", cmd_notifications, "show or set what you are told, by email or webhook")
    p.add_argument("--email", metavar="KINDS", help=f"comma-separated: {', '.join(NOTIFY_KINDS)} ('' for none)")
    p.add_argument("--webhook-kinds", metavar="KINDS", help="comma-separated, as --email")
    p.add_argument("--webhook", metavar="URL", help="Slack-compatible webhook URL ('' to remove)")

    p = add("logs", cmd_logs, "the tail of a workload's log")
    p.add_argument("id", help="the workload's id")
    p.add_argument("--attempt", type=_positive_int, help="attempt number (default: the last)")
    p.add_argument(
        "--tail",
        type=whole_number(0, MAX_LOG_TAIL_BYTES),  # the server's bound: past it, refused there (try50b)
        default=DEFAULT_LOG_TAIL_BYTES,
        help=f"bytes from the end, 0 to {MAX_LOG_TAIL_BYTES} (default {DEFAULT_LOG_TAIL_BYTES})",
    )
    p.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing until the attempt ends (a pending workload: from its start)",
    )
    p.add_argument("--raw", action="store_true", help="print terminal escapes of the log as they are (colours)")
    p.add_argument("--interval", type=_poll_interval, default=2.0, help=argparse.SUPPRESS)  # as wait's (brk47)

    p = add(
        "wait",
        cmd_wait,
        f"wait until workloads end, a line per change; exit 0 if every one succeeded, {EXIT_NOT_SUCCEEDED} if any"
        f" failed or was canceled, {EXIT_UNREACHABLE} if it gave up on a failing server ({duration(int(GIVE_UP_S))}),"
        f" {EXIT_TIMEOUT} if --timeout ran out, {EXIT_INTERRUPTED} on Ctrl-C (sbatch --wait)",
    )
    p.add_argument("ids", nargs="*", metavar="ID", help="the workloads to wait for (or --group G)")
    p.add_argument("--group", type=_positive_int, help="an array group id: every member")
    _wait_flags(p)

    p = add("budgets", cmd_budgets, "the budget tree: shares, entitlement, usage, ratio, rank")
    p.add_argument("--cluster", "-c", help=CLUSTER_HELP + " (default: every cluster)")

    p = add("share", cmd_share, "the share tree like sshare: shares, usage, EffectvUsage (÷ parent's), ratio, rank")
    p.add_argument("--cluster", "-c", help=CLUSTER_HELP + " (default: every cluster)")

    p = add(
        "metrics",
        cmd_metrics,
        "the four-metric pyramid per cluster (availability, occupancy, utilization, impact) and each "
        "budget's delivered GPU-hours against what it was owed",
    )
    p.add_argument("--cluster", "-c", help=CLUSTER_HELP + " (default: every cluster)")
    back = p.add_mutually_exclusive_group()
    back.add_argument("--days", type=_days_back, help="how far back from now (default 7, as the metrics page)")
    back.add_argument(
        "--since",
        type=_instant_back,
        help="the range's start, as the metrics page and the API: a duration back (30d, 2w) or a date (2026-11-01)",
    )
    p.add_argument("--until", type=_instant_back, help="the range's end, as --since (default now)")

    p = add("statement", cmd_statement, "a budget's statement (CSV): GPU-hours by UTC day, project and user")
    p.add_argument("budget", help="a budget path, e.g. nlp or nlp/olmo (members of it or above, admins)")
    p.add_argument(
        "--since", type=_instant_back, help="first UTC day: YYYY-MM-DD, a date-time or 7d back (default: 30 days ago)"
    )
    p.add_argument("--until", type=_instant_back, help="last UTC day, as --since (default today)")

    p = add(
        "history",
        cmd_history,
        "finished attempts like sacct: when, how long, why they ended, GPU-hours, GPU utilization",
    )
    p.add_argument(
        "--since", default="7d", type=_instant_back, help="how far back: 36h, 7d, 2w, 1w3d or an ISO date (default 7d)"
    )
    p.add_argument("--budget", "-b", help="a budget and its sub-budgets")
    p.add_argument("--cluster", "-c", help=CLUSTER_HELP)
    p.add_argument("--limit", type=_positive_int, default=1000, help="at most this many, newest first (default 1000)")
    p.add_argument(
        "--csv",
        action="store_true",
        help="CSV with every field; a text cell that starts with = + - @, a tab or a CR gets a leading ' "
        "so a spreadsheet shows it as text (OWASP CSV injection)",
    )

    p = add(
        "hosts",
        cmd_hosts,
        "hosts and their GPUs; NAME: one host; admins: cordon|drain|drain-now|resume NAME, "
        "drain|drain-now NAME --at TIME|--in DURATION (scheduled), cancel-drain NAME, remove NAME --yes",
    )
    p.add_argument("action", nargs="?", metavar="NAME | ACTION", help=f"a host's name, or {'|'.join(HOST_ACTIONS)}")
    p.add_argument("name", nargs="?", metavar="NAME", help="the host an ACTION acts on")
    p.add_argument("--cluster", "-c", help=CLUSTER_HELP)
    p.add_argument("--state", help="only hosts in this state, any case: " + ", ".join(HOST_STATES))
    p.add_argument("--reason", help="why (kept in the host's audit log)")
    p.add_argument("--yes", action="store_true", help="remove: yes, take the host out of its cluster for good")
    p.add_argument(
        "--at",
        metavar="TIME",
        help="drain, drain-now: schedule it for this time, its zone named: 2026-12-10T08:00Z or"
        " 2026-12-10T09:00+01:00 (resume, cancel-drain cancel it)",
    )
    p.add_argument(
        "--in", dest="in_", metavar="DURATION", help="drain, drain-now: schedule it this long from now, e.g. 2h, 1d 6h"
    )
    return parser


def _before_command(argv: list[str]) -> list[str]:
    """``argv`` up to its ``--``: ``fairway resubmit ID [flags] -- COMMAND`` is parsed without the
    command, which follows (argparse matches ``ID`` and a ``*`` positional at once, so a command
    after the flags went unrecognized)."""
    return argv[: argv.index("--")] if "--" in argv else argv


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        head = _before_command(argv)
        split = ("resubmit" in head or "exec" in head) and head != argv
        args = parser.parse_args(head if split else argv)
        if split and args.command_name in ("resubmit", "exec"):
            args.command = argv[len(head) + 1 :]
        elif split:  # "resubmit" or "exec" was another command's value (--name resubmit)
            args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or bad usage (2)
        return int(exc.code or 0)
    _ANSWERED.set(None)
    config: Config | None = None
    try:
        if args.server is not None and not args.server.startswith(("http://", "https://")):
            raise CliError(
                EXIT_USAGE,
                f"--server {args.server!r}: give the server's URL, starting with http:// or https:// "
                "(e.g. https://fairway.example.org)",
            )
        config = Config.load()
        if config.notice:
            err.write(f"fairway: {config.notice}\n")
        if args.server and args.command_name != "login":
            config.point_at(server_root(args.server))
        elif args.command_name == "login" and args.server:
            config.point_at(args.server)
        args.server = args.server if args.command_name == "login" else None
        args.err = err
        code = int(args.handler(args, config, out))
        out.flush()  # a closed pipe shows here, not in the interpreter's flush at exit
        return code
    except CliError as exc:
        message = exc.message
        if exc.exit_code == EXIT_AUTH and args.command_name != "login" and config is not None and config.withheld():
            message = (
                f"not logged in to {config.server} (the saved token is {config.saved_server}'s and goes to no other "
                f"server): run `fairway login --server {config.server}`, or give a token with $FAIRWAY_TOKEN"
            )
        elif (
            exc.exit_code == EXIT_AUTH
            and args.command_name != "login"
            and config is not None
            and not config.token
            and not same_server(config.server, os.environ.get("FAIRWAY_URL") or config.saved_server)
        ):  # a plain `fairway login` goes to the saved server, not the one --server named (tryout47)
            message = f"not logged in to {config.server}: run `fairway login --server {config.server}`"
        err.write(f"fairway: {message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except _SHAPE_ERRORS as exc:
        server = _ANSWERED.get()
        if server is None:  # not from a server's answer: a bug, shown as one
            raise
        err.write(f"fairway: {not_fairways_text(server, exc)}\n")
        return EXIT_UNREACHABLE
    except BrokenPipeError:
        # `fairway ls | head`: the reader left. Exit quietly, like a Unix tool killed by SIGPIPE.
        if out is sys.stdout:
            _silence_stdout()
        return EXIT_SIGPIPE


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's flush at exit finds no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (tests pass a StringIO)
        pass
