"""Agent settings from, in increasing precedence: defaults, a YAML file, environment variables
(``FAIRWAY_<KEY>``, e.g. ``FAIRWAY_SERVER``, ``FAIRWAY_TOKEN``) and command-line options.

YAML keys and option names are the field names of :class:`AgentConfig` (``host_name`` ↔
``--host-name`` ↔ ``FAIRWAY_HOST_NAME``). Bad values fail loudly with :class:`ConfigError`.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from agent.protocol import (
    HOST_NAME_RE,
    HOST_NAME_RULE,
    MAX_BYTES,
    MAX_CPUS,
    MAX_GPU_MEMORY_MB,
    MAX_HEARTBEAT_S,
    MAX_HOST_GPUS,
    MIN_HEARTBEAT_S,
    MIN_MEMORY_BYTES,
)
from agent.runtime.isolation import IsolationConfig
from fairway_common import strict_yaml
from fairway_common.gpu_text import gpu_text_problem
from fairway_common.numbers import ascii_float

ENV_PREFIX = "FAIRWAY_"
GPU_BACKENDS = ("fake", "nvml")
RUNTIMES = ("process", "docker")


class ConfigError(Exception):
    """A setting is missing or has a bad value."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    """Settings of one agent. Durations in seconds.

    ``gpus``, ``model`` and ``gpu_memory_mb`` describe simulated GPUs (``gpu_backend: fake``);
    ``log_max_bytes`` caps each attempt's log (older output is dropped); ``docker_url`` is the
    Docker Engine API address of the ``docker`` runtime ("" → ``DOCKER_HOST`` or the default socket);
    ``isolation`` whose identity attempts run under and their cgroups (docs/isolation.md; YAML
    mapping, or ``FAIRWAY_ISOLATION='{mode: agent, allow_root: true}'``); ``cpus`` and ``memory``
    (bytes) override what the hello reports the host offers to attempts (default: the machine's,
    or 8 CPUs and 64 GiB per simulated GPU; e.g. less, to keep some for the system).
    """

    server: str
    token: str
    host_name: str
    gpus: int = 8
    model: str = "H100"
    gpu_memory_mb: int | None = None
    state_dir: Path = Path("/var/lib/fairway-agent")
    heartbeat: float = 5.0
    backoff_max: float = 60.0
    gpu_backend: str = "fake"
    runtime: str = "process"
    log_level: str = "INFO"
    log_max_bytes: int = 64 * 1024 * 1024
    docker_url: str = ""
    isolation: IsolationConfig = IsolationConfig()
    cpus: int | None = None
    memory: int | None = None


_DIGITS = re.compile(r"[0-9]{1,30}")
"""A whole number as text (the environment, an option): ASCII digits, few enough for any bound here."""


def _whole(value: Any) -> int:
    """An integer from YAML or the environment; a boolean or a fraction (``8.9``) is refused, not
    truncated. Text is ASCII digits: ``int()`` read ``FAIRWAY_GPUS=1_0`` as 10 and Arabic-Indic or
    fullwidth digits as numbers (brk36; the CLI's and the server settings' rule since left36)."""
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("must be a whole number")
    if isinstance(value, str) and not _DIGITS.fullmatch(value.strip()):
        raise ValueError("must be a whole number (ASCII digits 0-9)")
    return int(value)


def _positive_int(value: Any) -> int:
    number = _whole(value)
    if number < 0:
        raise ValueError("must be >= 0")
    return number


def _at_least_one(value: Any) -> int:
    number = _whole(value)
    if number < 1:
        raise ValueError("must be >= 1")
    return number


def _memory_bytes(value: Any) -> int:
    """The host's memory, in bytes: at least what one attempt runs in (``memory: 64``, meant as
    gigabytes, was 64 bytes, and every start on the host failed; brk36)."""
    number = _whole(value)
    if number < MIN_MEMORY_BYTES:
        raise ValueError(f"is bytes and must be at least {MIN_MEMORY_BYTES} (6 MiB); 64 GiB is {64 << 30}")
    return number


MIN_LOG_MAX_BYTES = 1 << 20
"""The least ``log_max_bytes``: 1 MiB. There is no "no cap" value: 0 kept no log at all (every 5 s
:func:`agent.state.cap_log` dropped all of it), and a few bytes kept less than a line."""


def _log_max_bytes(value: Any) -> int:
    number = _whole(value)
    if number < MIN_LOG_MAX_BYTES:
        raise ValueError(f"must be at least {MIN_LOG_MAX_BYTES} (1 MiB); there is no unlimited")
    return number


DOCKER_URL_SCHEMES = ("unix", "npipe", "tcp", "http", "https")
"""What ``docker_url`` may name: the Docker Engine API's addresses (as ``DOCKER_HOST``)."""


def _docker_url(value: Any) -> str:
    """The Docker Engine API address, or "" (``DOCKER_HOST`` or the default socket): ``ftp://x``
    was taken and failed only when the docker runtime first connected."""
    url = "" if value is None else str(value).strip()
    scheme, sep, rest = url.partition("://")
    if url and (not sep or scheme not in DOCKER_URL_SCHEMES or not rest or any(c.isspace() for c in url)):
        raise ValueError("must be a unix://, npipe://, tcp://, http:// or https:// address, or empty")
    return url


def _at_most(most: int, parse: Callable[[Any], int]) -> Callable[[Any], int]:
    """``parse``, then at most ``most``: what the agent protocol carries (a larger value was taken,
    and every hello was then unencodable: the agent reconnected for good, brk34)."""

    def bounded(value: Any) -> int:
        number = parse(value)
        if number > most:
            raise ValueError(f"must be at most {most}")
        return number

    return bounded


def _positive_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("must be a finite number > 0")
    if isinstance(value, str):
        try:
            number = ascii_float(value)  # float() read "1_0" and "٥" too
        except ValueError:
            raise ValueError("must be a number such as 5 or 0.5 (ASCII digits 0-9)") from None
    else:
        number = float(value)
    if not 0 < number < math.inf:
        raise ValueError("must be a finite number > 0")
    return number


def _seconds(least: float, most: float) -> Callable[[Any], float]:
    """A finite number of seconds from ``least`` to ``most`` (any positive one was taken: a
    ``heartbeat`` of 1e9 never heartbeated, a ``backoff_max`` of 0.01 reconnected 100 times a
    second; ops35)."""

    def parse(value: Any) -> float:
        number = _positive_float(value)
        if number < least:
            raise ValueError(f"must be at least {least:g}")
        if number > most:
            raise ValueError(f"must be at most {most:g}")
        return number

    return parse


MIN_BACKOFF_MAX_S, MAX_BACKOFF_MAX_S = 1.0, 3600.0
"""``backoff_max``: not below the first reconnect delay (1 s, ``client.backoff_delays``), not
above an hour (a restarted server would wait that long for the agent)."""


def _choice(*allowed: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if str(value) not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return str(value)

    return parse


def _server_url(value: Any) -> str:
    url = str(value)
    parts = urlparse(url)
    try:
        parts.port  # noqa: B018 -- ws://h:99999 raised InvalidURI at every connect (brk32)
    except ValueError:
        raise ValueError("must be a ws:// or wss:// URL with a host and a port up to 65535") from None
    if parts.scheme not in ("ws", "wss") or not parts.hostname or any(c.isspace() for c in url):
        raise ValueError("must be a ws:// or wss:// URL with a host")
    return url


def _non_empty(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


def _state_dir(value: Any) -> Path:
    """An absolute directory the OS can take: no NUL, nothing the file system's encoding cannot
    write (a lone surrogate); YAML's ``"\\0"`` raised "embedded null byte" with a traceback at
    startup's ``mkdir`` (brk46b)."""
    text = _non_empty(value)
    if "\0" in text:
        raise ValueError("holds NUL; a directory's path cannot")
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise ValueError("holds characters no path can (a lone surrogate)") from None
    return Path(text).expanduser().absolute()


def _model(value: Any) -> str:
    """The simulated GPUs' model, which the hello reports: by the server's rule of a GPU's model
    (a join's): one it refuses failed every hello, the agent heartbeating a connection that never
    registered it (brk46b)."""
    text = _non_empty(value)
    if problem := gpu_text_problem(text):
        raise ValueError(f"a GPU model {problem}")
    return text


def _host_name(value: Any) -> str:
    """The host's name as the server registered it: its hello names it, and a name no host has
    (too long, a blank, a lone surrogate) failed every connection's hello, the agent reconnecting
    for ever (brk46b)."""
    text = _non_empty(value)
    if not HOST_NAME_RE.fullmatch(text):
        raise ValueError(f"{HOST_NAME_RULE}, as the server registered the host")
    return text


_TOKEN_TEXT = re.compile(r"[!-~]+")
"""A host token: printable ASCII without blanks (the server's are URL-safe base64), what an HTTP
header carries."""


def _token(value: Any) -> str:
    """The host token; a refusal never shows it (it would go to the agent's log)."""
    if not isinstance(value, str):  # token: 0123 in YAML is the number 83
        raise ValueError("must be a string (quote it in YAML)")
    text = value.strip()
    if not text:
        raise ValueError("must not be empty")
    if not _TOKEN_TEXT.fullmatch(text):  # '€' failed the handshake; a newline injected a header (brk32)
        raise ValueError("holds characters no host token has (blanks, control or non-ASCII characters)")
    return text


def _isolation(value: Any) -> IsolationConfig:
    if isinstance(value, str):
        try:
            value = strict_yaml.load(value)
        except yaml.YAMLError as exc:
            raise ValueError(f"not YAML: {exc}") from None
    return IsolationConfig.parse(value)


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "server": _server_url,
    "token": _token,
    "host_name": _host_name,
    "gpus": _at_most(MAX_HOST_GPUS, _at_least_one),  # 0 simulated GPUs: a host with nothing to schedule
    "model": _model,
    "gpu_memory_mb": lambda v: None if v in (None, "") else _at_most(MAX_GPU_MEMORY_MB, _positive_int)(v),
    # Path("") would be the working directory. Absolute: the attempts' HOME and
    # FAIRWAY_PREEMPT_FILE are paths under it, and an attempt runs in another directory (its
    # first mount's) or changes directory itself; docker binds need absolute host paths too.
    "state_dir": _state_dir,
    "heartbeat": _seconds(MIN_HEARTBEAT_S, MAX_HEARTBEAT_S),
    "backoff_max": _seconds(MIN_BACKOFF_MAX_S, MAX_BACKOFF_MAX_S),
    "gpu_backend": _choice(*GPU_BACKENDS),
    "runtime": _choice(*RUNTIMES),
    "log_level": _choice("DEBUG", "INFO", "WARNING", "ERROR"),
    "log_max_bytes": _at_most(MAX_BYTES, _log_max_bytes),
    "docker_url": _docker_url,
    "isolation": lambda v: _isolation(v),
    "cpus": lambda v: None if v in (None, "") else _at_most(MAX_CPUS, _at_least_one)(v),
    "memory": lambda v: None if v in (None, "") else _at_most(MAX_BYTES, _memory_bytes)(v),
}
KEYS = tuple(f.name for f in fields(AgentConfig))


def load_config(
    options: Mapping[str, Any],
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AgentConfig:
    """Merge the YAML ``config_file``, ``environ`` (default ``os.environ``) and ``options``
    (command-line values; ``None`` means not given) into an :class:`AgentConfig`.

    ``host_name`` defaults to this machine's host name.

    Raises:
        ConfigError: unreadable file, unknown YAML key, bad value, or missing server/token.
    """
    environ = os.environ if environ is None else environ
    raw: dict[str, Any] = {}
    if config_file is not None:
        try:
            # YAML 1.1's octal, base 60 and yes/no are refused, not read as 8, 90 and False (brk37)
            loaded = strict_yaml.load(config_file.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as exc:  # a traceback (brk32)
            raise ConfigError(f"cannot read config file {config_file}: not UTF-8 text ({exc.reason})") from None
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config file {config_file}: {exc}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {config_file} is not a mapping")
        unknown = sorted(map(str, set(loaded) - set(KEYS)))  # "1: a" and "b: 2" did not sort: a TypeError
        if unknown:
            raise ConfigError(f"unknown key(s) in {config_file}: {', '.join(map(str, unknown))}")
        raw.update(loaded)
    for key in KEYS:
        if (value := environ.get(ENV_PREFIX + key.upper())) is not None:
            raw[key] = value
    raw.update({k: v for k, v in options.items() if k in KEYS and v is not None})
    raw.setdefault("host_name", socket.gethostname())
    for required in ("server", "token"):
        if raw.get(required) in (None, ""):
            raise ConfigError(f"{required} is required (--{required}, {ENV_PREFIX}{required.upper()} or config file)")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        try:
            values[key] = _PARSERS[key](value)
        except (TypeError, ValueError) as exc:
            shown = "(not shown)" if key == "token" else repr(value)  # the agent's log is no place for it
            raise ConfigError(f"bad value for {key}: {shown} ({exc})") from None
    return AgentConfig(**values)
