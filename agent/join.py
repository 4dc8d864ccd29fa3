"""``fairway-agent join``: exchange a join token for a host token and write the agent's config.

The install script (served by the server at ``/agent/install.sh``) runs this once per host::

    FAIRWAY_JOIN_TOKEN=fwj_... fairway-agent join --server https://fairway.example.org \\
        --config /etc/fairway-agent/agent.yaml --state-dir /var/lib/fairway-agent [--gpu-backend nvml]

It reads the GPU inventory through the chosen backend, posts it with the host name to
``<server>/agent/join``, and writes the YAML config (server websocket URL, host token, backend,
runtime, state directory) readable by its owner only. A config that already holds a token means
the host has joined: nothing is sent and the command succeeds (the install is idempotent).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from agent.config import ConfigError, load_config
from agent.gpu.base import GpuBackend
from fairway_common import strict_yaml

JOIN_TOKEN_ENV = "FAIRWAY_JOIN_TOKEN"  # noqa: S105 -- the name of an env var, not a secret


class JoinFailed(Exception):
    """The join could not be done; the message says why in one line."""


def already_joined(config_path: Path) -> str | None:
    """The host name of an existing config holding a host token, else None (no file, not UTF-8,
    not YAML: the join writes a new one).

    The config is read as the agent reads it (``fairway_common.strict_yaml``, brk37): plain
    ``safe_load`` read ``host_name: no`` as False (reported as this machine's name) and a token
    given twice as its last value.

    Raises:
        JoinFailed: the strict loader refuses the config (a key twice, YAML 1.1's octal or base
            60): the agent would refuse it too, and overwriting it would lose what it holds.
    """
    try:
        data = strict_yaml.load(config_path.read_text(encoding="utf-8"))
    except strict_yaml.Refused as exc:
        raise JoinFailed(f"{config_path}: {exc}; fix it, or remove it to join again") from None
    except (OSError, ValueError, RecursionError, yaml.YAMLError):  # not UTF-8 was a traceback (brk32)
        return None
    if isinstance(data, dict) and data.get("token"):
        return str(data.get("host_name") or socket.gethostname())
    return None


def post_join(
    server: str, join_token: str, host: str, gpus: list[dict[str, Any]], labels: Mapping[str, str]
) -> dict[str, Any]:
    """POST the join request; returns the server's answer (``host_token``, ``websocket_url``, ...).

    Raises:
        JoinFailed: unreachable server or a refusal (the server's message is kept).
    """
    body = json.dumps({"token": join_token, "host": host, "gpus": gpus, "labels": dict(labels)}).encode()
    url = server.rstrip("/") + "/agent/join"
    if not url.startswith(("http://", "https://")):
        raise JoinFailed(f"server must be an http:// or https:// URL, not {server!r}")
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")  # noqa: S310 -- scheme checked above
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 -- scheme checked above
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            refusal = json.loads(exc.read())
            # 400: {"<field>": ["message"], "code"}; other statuses: {"detail", "code"}
            detail = refusal.get("detail") or "; ".join(
                f"{field}: {' '.join(map(str, msgs))}"
                for field, msgs in refusal.items()
                if field != "code" and isinstance(msgs, list)
            )
        except (ValueError, AttributeError):
            detail = ""
        raise JoinFailed(f"the server refused the join (HTTP {exc.code}): {detail or exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise JoinFailed(f"cannot reach {url}: {exc}") from None
    if not isinstance(answer, dict) or not answer.get("host_token") or not answer.get("websocket_url"):
        raise JoinFailed("the server's answer lacks host_token or websocket_url")
    return answer


def write_config(path: Path, values: Mapping[str, Any]) -> None:
    """Write ``values`` as YAML to ``path`` atomically, mode 0600 (it holds the host token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # A new file of this process's (O_EXCL, 0600), not a predictable name: a link or file another
    # user planted in the directory at ``.<name>.<pid>`` was written through (brk41).
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "w") as f:
            f.write("# Fairway agent config, written by `fairway-agent join`. Holds the host token: keep it 0600.\n")
            yaml.safe_dump(dict(values), f, sort_keys=False)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def join(
    *,
    server: str,
    join_token: str,
    config_path: Path,
    host_name: str,
    gpu: GpuBackend,
    settings: Mapping[str, Any],
    labels: Mapping[str, str] | None = None,
) -> str:
    """Join the server as ``host_name`` and write ``config_path``; returns a one-line report.

    ``settings`` are the other config values to write (``state_dir``, ``gpu_backend``, ...).

    Raises:
        JoinFailed: an existing config the agent's loader refuses, no join token, no GPUs, or
            the server refused.
    """
    existing = already_joined(config_path)
    if existing is not None:
        return f"already joined as host {existing} ({config_path} holds its token); nothing to do"
    if not join_token:
        raise JoinFailed(f"a join token is required ({JOIN_TOKEN_ENV}); create one with manage.py create_join_token")
    written = {k: (str(v) if isinstance(v, Path) else v) for k, v in settings.items() if v is not None}
    try:  # what the agent will load, by its loader: a refusal there came after the token was spent (brk47)
        load_config(
            {**written, "server": "wss://fairway.invalid/ws/agent/", "token": "-", "host_name": host_name}, None, {}
        )
    except ConfigError as exc:
        raise JoinFailed(f"{exc}: the agent would refuse its config; nothing sent, {config_path} not written") from None
    inventory = gpu.inventory()
    if not inventory:
        raise JoinFailed("no GPU found on this host")
    gpus = [{"index": g.index, "uuid": g.uuid, "model": g.model, "memory_mb": g.memory_mb} for g in inventory]
    answer = post_join(server, join_token, host_name, gpus, labels or {})
    values = {
        "server": answer["websocket_url"],
        "token": answer["host_token"],
        "host_name": answer.get("host", host_name),
        **written,
    }
    write_config(config_path, values)
    if settings.get("state_dir") is not None:  # the old host's notes are not this new host's (try56, ops48)
        from agent.client import HOST_REMOVED_FILE, HOST_UNKNOWN_FILE

        for note in (HOST_REMOVED_FILE, HOST_UNKNOWN_FILE):
            Path(settings["state_dir"], note).unlink(missing_ok=True)
    return (
        f"joined cluster {answer.get('cluster', '?')} as host {values['host_name']} with {len(gpus)} x "
        f"{inventory[0].model}; config written to {config_path}"
    )
