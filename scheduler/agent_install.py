"""Agent installation served by the server (DESIGN.md §5, Install).

- ``GET /agent/install.sh``: the install script with this server's URL filled in;
- ``GET /agent/<wheel>``: the agent package as a pure-Python wheel, built on the fly from this
  server's own ``agent/`` package (so agents always match their server), with the agent's pinned
  dependencies (``agent/requirements.txt``) as ``Requires-Dist``;
- ``POST /agent/join``: exchange a single-use join token and the host's facts for a host token.

The wheel is built in memory, byte-for-byte reproducible for the same sources (fixed timestamps),
and cached until a source file changes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from agent import AGENT_VERSION
from config.errors import ServiceError
from scheduler.wheels import ServedWheel

logger = logging.getLogger(__name__)

AGENT_DIR = Path(__file__).resolve().parents[1] / "agent"
INSTALL_SCRIPT = Path(__file__).resolve().parent / "agent_install.sh"
DIST_NAME = "fairway-agent"
WHEEL_NAME = f"fairway_agent-{AGENT_VERSION}-py3-none-any.whl"
MAX_JOIN_BODY_BYTES = 256 * 1024


def _requirements() -> list[str]:
    lines = (AGENT_DIR / "requirements.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


WHEEL = ServedWheel(
    package_dir=AGENT_DIR,
    shared=[AGENT_DIR.parent / "fairway_common"],
    dist_name=DIST_NAME,
    version=AGENT_VERSION,
    summary="Fairway GPU-host agent",
    script="fairway-agent = agent.__main__:main",
    requirements=_requirements,
    watched=[AGENT_DIR / "requirements.txt"],
)


def build_wheel() -> bytes:
    """The agent wheel (``WHEEL_NAME``): every ``agent/**/*.py``, metadata and a ``fairway-agent``
    script (:class:`scheduler.wheels.ServedWheel`)."""
    return WHEEL.build()


def public_url(request: HttpRequest) -> str:
    """This server's base URL as agents reach it: ``FAIRWAY["PUBLIC_URL"]`` when set, else the request's."""
    configured = str(settings.FAIRWAY.get("PUBLIC_URL") or "").strip()
    return (configured or request.build_absolute_uri("/")).rstrip("/")


def websocket_url(base_url: str) -> str:
    """``http(s)://host[:port][/prefix]`` → ``ws(s)://host[:port][/prefix]/ws/agent/``."""
    parts = urlsplit(base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + "/ws/agent/", "", ""))


def _shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@require_GET
def install_script(request: HttpRequest) -> HttpResponse:
    """``GET /agent/install.sh``: the install script, this server's URL and the wheel's name filled in."""
    script = INSTALL_SCRIPT.read_text()
    script = script.replace("@@SERVER_URL@@", _shell_quote(public_url(request)))
    script = script.replace("@@WHEEL_NAME@@", WHEEL_NAME).replace("@@AGENT_VERSION@@", AGENT_VERSION)
    return HttpResponse(script, content_type="text/x-shellscript; charset=utf-8")


@require_GET
def agent_wheel(request: HttpRequest) -> HttpResponse:
    """``GET /agent/fairway_agent-<version>-py3-none-any.whl`` (also ``/agent/fairway-agent.whl``)."""
    return WHEEL.response()


def _error(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    """The API's one error format (config/api.py): 400 ``{"<field>": ["message"], "code"}``
    (``non_field_errors`` when no one field is at fault), other statuses ``{"detail", "code"}``."""
    if status == 400:
        return JsonResponse({field or "non_field_errors": [message], "code": code}, status=status)
    return JsonResponse({"detail": message, "code": code}, status=status)


def _parse_join(body: Any) -> tuple[str, str, list[tuple[Any, Any, Any, Any]], dict[str, Any]] | tuple[str, str]:
    """(token, host, gpus, labels) from a join body, or (field, what is wrong with it)."""
    if not isinstance(body, dict):
        return "non_field_errors", "the body is a JSON object"
    token, host, gpus, labels = body.get("token"), body.get("host"), body.get("gpus"), body.get("labels") or {}
    if not isinstance(token, str) or not token:
        return "token", "a join token is required"
    if not isinstance(host, str):
        return "host", "a host name is required"
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        return "gpus", "a list of {index, uuid, model, memory_mb}"
    specs = []
    for g in gpus:
        try:
            specs.append((g["index"], g["uuid"], g["model"], g["memory_mb"]))
        except KeyError as exc:
            return "gpus", f"missing {exc.args[0]}"
    if not isinstance(labels, dict):
        return "labels", "an object of strings"
    return token, host, specs, labels


@csrf_exempt
@require_POST
def join(request: HttpRequest) -> JsonResponse:
    """``POST /agent/join`` ``{"token", "host", "gpus": [{index, uuid, model, memory_mb}], "labels"}``.

    201 ``{"host", "cluster", "host_token", "websocket_url"}``; 400 bad body or facts; 403 bad,
    used or expired join token; 409 host name or GPU already registered; 413 too large. Errors
    in the API's format (config/api.py); a refused join changes nothing (the token is not spent).
    """
    from scheduler.services import do_join_host

    if len(request.body) > MAX_JOIN_BODY_BYTES:
        return _error(413, "too_large", "The join request is too large.")
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return _error(400, "bad_json", "The body is not JSON.")
    parsed = _parse_join(body)
    if len(parsed) == 2:
        return _error(400, "invalid", parsed[1], parsed[0])
    token, host_name, gpus, labels = parsed
    try:
        host, host_token = do_join_host(token, host_name, gpus, labels)
    except ServiceError as exc:
        status = 409 if exc.code in ("host_exists", "duplicate_gpu") else exc.status
        logger.warning("join of host %s refused: %s", ascii(host_name[:128]), ascii(exc.message))
        # the service's ``name`` is the request's ``host``
        return _error(status, exc.code, exc.message, "host" if exc.field == "name" else exc.field)
    logger.info("host %s joined cluster %s", host.name, host.cluster.name)
    return JsonResponse(
        {
            "host": host.name,
            "cluster": host.cluster.name,
            "host_token": host_token,
            "websocket_url": websocket_url(public_url(request)),
        },
        status=201,
    )
