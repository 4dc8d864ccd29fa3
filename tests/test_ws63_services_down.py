"""ws63: the backing services failing (Redis, the channel layer; PostgreSQL's connection) give a
clear refusal, never a traceback, a bare 500 or a wordless close 1011.

* ``/ws/exec/`` and ``/ws/port-forward/`` with Redis down: the one-shot exec's 503
  ``exec_unavailable`` words (``scheduler.execs.layer_unavailable``) in the refusal frame, close
  4503 (4000 + the API's status).
* Their database lost while one opens (the token's, the attempt's lookup): db61's 503
  ``database_unavailable`` words (``config.middleware``) in the refusal frame, close 4503.
* A request whose database connection is lost in a middleware (before or after the view: a session
  read or saved): db61's 503 ``database_unavailable`` + ``Retry-After``, not a 500.
* An agent connecting, or whose message is handled, while the database is lost: close 1013 (it
  connects again) and one warning line, as with Redis down (db61).

Redis down is a port where nothing listens (as tests/test_db61_layer_down.py) or a layer whose
sends raise; the database lost is db61's wrapped ``AdminShutdown`` (tests/test_db_unavailable.py)
raised where a connection is made (``get_new_connection``: no thread gets one) or by a lookup.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer, channel_layers, get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.sessions.backends.db import SessionStore
from django.db import OperationalError, connections
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import include, path
from psycopg import errors

from accounts.services import create_api_token
from config import urls as config_urls
from config.asgi import application
from config.middleware import DATABASE_RETRY_AFTER_S, DATABASE_UNAVAILABLE
from scheduler import execs
from scheduler.models import Attempt, Cluster
from scheduler.services import do_register_host
from tests.api.test_exec_session import _run, _take

DEAD_REDIS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:9/0", "socket_timeout": 2}]},  # port 9: nothing
    }
}
STREAMS = ["/ws/exec/", "/ws/port-forward/"]


def _lost(what: str = "terminating connection due to administrator command") -> OperationalError:
    """What Django raises when PostgreSQL ended the connection (a restart): its wrapper, the
    driver's error as ``__cause__`` (tests/test_db_unavailable.py)."""
    try:
        raise errors.AdminShutdown(what)
    except errors.AdminShutdown as exc:
        try:
            raise OperationalError(str(exc)) from exc
        except OperationalError as wrapped:
            return wrapped


def _raise_lost(*_args: Any, **_kwargs: Any) -> Any:
    raise _lost()


@pytest.fixture
def layer() -> Iterator[Callable[[dict[str, Any]], Any]]:
    """``layer(CHANNEL_LAYERS)``: the channel layers replaced for the test."""
    overrides: list[Any] = []

    def use(layers: dict[str, Any]) -> None:
        channel_layers.backends.clear()
        overrides.append(override_settings(CHANNEL_LAYERS=layers))
        overrides[-1].enable()

    yield use
    for override in overrides:
        override.disable()
    channel_layers.backends.clear()


def _first_frame(path: str, workload_id: int) -> dict[str, Any]:
    if path == "/ws/exec/":
        return {"workload": workload_id, "command": ["bash"], "tty": True}
    return {"workload": workload_id, "port": 6006}


async def _refusal(path: str, token: str, first: dict[str, Any] | None) -> tuple[dict[str, Any], int]:
    """The refusal frame and the close code of a stream opened with ``first`` (None: nothing sent)."""
    frame, closed = await _closed(path, token, first)
    return frame, closed.get("code", 0)


async def _closed(path: str, token: str, first: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The refusal frame and the close message of a stream opened with ``first`` (None: nothing sent)."""
    comm = WebsocketCommunicator(application, path, headers=[(b"authorization", f"Token {token}".encode())])
    connected, _ = await comm.connect(timeout=10)
    assert connected
    if first is not None:
        await comm.send_to(text_data=json.dumps(first))
    frame = json.loads(await comm.receive_from(timeout=10))
    closed = await comm.receive_output(timeout=10)
    await comm.disconnect()
    return frame, closed


def _no_traceback(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings and errors logged; none with a traceback."""
    warned = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.exc_info is None for r in warned), [(r.name, r.getMessage()) for r in warned if r.exc_info]
    return [r.getMessage() for r in warned]


@pytest.fixture
def running(started_workload: tuple[Any, Attempt]) -> tuple[Any, Attempt]:
    return started_workload


# --- /ws/exec/, /ws/port-forward/: Redis down ----------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", STREAMS)
def test_a_stream_opened_while_redis_is_down_is_refused_with_words(path, researcher, layer, caplog):
    token = create_api_token(researcher)[1]
    caplog.set_level(logging.INFO)
    layer(DEAD_REDIS)
    frame, code = _run(_refusal(path, token, None))
    assert (frame["type"], frame["code"], code) == ("error", "exec_unavailable", 4503), (frame, code)
    assert frame["message"].startswith("The server cannot reach the agents now (the channel layer failed:"), frame
    assert ("command did not run" in frame["message"]) == (path == "/ws/exec/"), frame
    assert any("channel layer" in line for line in _no_traceback(caplog))


class OpenLostLayer:
    """A channel layer whose Redis went away before a stream's open was sent: reads wait (nothing
    comes), sends raise (what channels-redis raises when Redis cannot be reached)."""

    def __init__(self, **_config: object) -> None:
        pass

    async def new_channel(self, prefix: str = "specific.") -> str:
        return prefix + "ws63!1"

    async def receive(self, channel: str) -> dict:
        await asyncio.Event().wait()
        raise AssertionError  # pragma: no cover

    async def send(self, channel: str, message: dict) -> None:
        import redis.exceptions

        raise redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:9. Connection refused.")

    group_send = send

    async def group_add(self, group: str, channel: str) -> None:
        await self.send(group, {})

    group_discard = group_add


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", STREAMS)
def test_a_stream_whose_open_redis_could_not_send_is_refused_with_words(path, running, researcher, layer, caplog):
    w, _attempt = running
    token = create_api_token(researcher)[1]
    caplog.set_level(logging.INFO)
    layer({"default": {"BACKEND": f"{__name__}.OpenLostLayer"}})
    frame, code = _run(_refusal(path, token, _first_frame(path, w.pk)))
    assert (frame["type"], frame["code"], code) == ("error", "exec_unavailable", 4503), (frame, code)
    words = execs.layer_unavailable("the channel layer failed: ConnectionError", path == "/ws/port-forward/")
    assert frame["message"] == words.message, frame
    assert any("channel layer" in line for line in _no_traceback(caplog))


class InputLostLayer(InMemoryChannelLayer):
    """The in-memory layer whose sends of a session's input raise once ``lost`` (Redis gone after
    the session started)."""

    lost = False

    async def send(self, channel: str, message: dict) -> None:
        if InputLostLayer.lost and message.get("type") in ("exec.tty.input", "exec.data"):  # text or bytes (pf63)
            import redis.exceptions

            raise redis.exceptions.ConnectionError("Connection closed by server.")
        await super().send(channel, message)


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_started_session_whose_input_redis_could_not_send_is_ended_with_words(running, researcher, layer, caplog):
    w, attempt = running
    token = create_api_token(researcher)[1]
    caplog.set_level(logging.INFO)
    layer({"default": {"BACKEND": f"{__name__}.InputLostLayer"}})

    async def run() -> tuple[dict[str, Any], int]:
        agents = get_channel_layer()
        agent = await agents.new_channel()
        await agents.group_add(f"host.{attempt.host_id}", agent)
        comm = WebsocketCommunicator(application, "/ws/exec/", headers=[(b"authorization", f"Token {token}".encode())])
        assert (await comm.connect(timeout=10))[0]
        await comm.send_to(text_data=json.dumps(_first_frame("/ws/exec/", w.pk)))
        opened = await asyncio.wait_for(agents.receive(agent), 10)
        await _take(agents, opened["reply_to"], opened, agent, 7)
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "started"
        InputLostLayer.lost = True
        try:
            await comm.send_to(bytes_data=b"ls\n")
            frame = json.loads(await comm.receive_from(timeout=10))
            closed = await comm.receive_output(timeout=10)
        finally:
            InputLostLayer.lost = False
        await comm.disconnect()
        return frame, closed.get("code", 0)

    frame, code = _run(run())
    assert (frame["type"], frame["code"], code) == ("error", "exec_unavailable", 4503), (frame, code)
    assert frame["message"] == (
        "The server lost its link to the agents (the channel layer failed: ConnectionError); the session was ended."
        " Try again shortly."
    )
    assert any("channel layer" in line for line in _no_traceback(caplog))


# --- /ws/exec/, /ws/port-forward/: the database lost while one opens ------------------------------


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", STREAMS)
def test_a_stream_whose_token_lookup_lost_the_database_is_refused_with_words(path, researcher, caplog, monkeypatch):
    token = create_api_token(researcher)[1]
    caplog.set_level(logging.INFO)
    with monkeypatch.context() as patched:
        patched.setattr(type(connections["default"]), "get_new_connection", _raise_lost)
        frame, code = _run(_refusal(path, token, None))
    assert frame == {"type": "error", "code": "database_unavailable", "message": DATABASE_UNAVAILABLE}
    assert code == 4503
    assert any("database" in line and "administrator command" in line for line in _no_traceback(caplog))


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", STREAMS)
def test_a_stream_whose_attempt_lookup_lost_the_database_is_refused_with_words(
    path, running, researcher, caplog, monkeypatch
):
    w, _attempt = running
    token = create_api_token(researcher)[1]
    caplog.set_level(logging.INFO)
    monkeypatch.setattr(execs, "tty_target", _raise_lost)
    monkeypatch.setattr(execs, "port_target", _raise_lost)
    frame, code = _run(_refusal(path, token, _first_frame(path, w.pk)))
    assert frame == {"type": "error", "code": "database_unavailable", "message": DATABASE_UNAVAILABLE}
    assert code == 4503
    assert any("database" in line for line in _no_traceback(caplog))


# --- /ws/agent/: the database lost --------------------------------------------------------------


def _agent_headers(caplog: Any) -> list[tuple[bytes, bytes]]:
    """A host ``h1`` registered (its agent's token in the headers), and the log read from INFO."""
    cluster = Cluster.objects.create(name="gw")
    _host, token = do_register_host(cluster, "h1", [(0, "GPU-h1", "H100", 80000)])
    caplog.set_level(logging.INFO)
    return [(b"authorization", f"Bearer {token}".encode())]


def _hello(host: str) -> str:
    gpus = [{"index": 0, "uuid": f"GPU-{host}", "model": "H100", "memory_mb": 80000, "health": "healthy"}]
    return json.dumps(
        {"v": 1, "type": "hello", "id": 1, "host": host, "agent_version": "test", "gpus": gpus, "attempts": []}
    )


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_an_agent_connecting_while_the_database_is_lost_is_told_to_come_back(caplog, monkeypatch):
    headers = _agent_headers(caplog)

    async def close_of() -> dict:
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        out = await comm.receive_output(timeout=10)
        await comm.disconnect()
        return out

    with monkeypatch.context() as patched:
        patched.setattr(type(connections["default"]), "get_new_connection", _raise_lost)
        out = _run(close_of())
    assert out["type"] == "websocket.close" and out["code"] == 1013, out  # try again later
    assert "database" in out.get("reason", ""), out
    assert any("database" in line and "administrator command" in line for line in _no_traceback(caplog))


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_an_agent_whose_hello_lost_the_database_is_told_to_come_back(caplog, monkeypatch):
    headers = _agent_headers(caplog)

    async def close_of() -> dict:
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        monkeypatch.setattr(type(connections["default"]), "get_new_connection", _raise_lost)
        try:
            await comm.send_to(text_data=_hello("h1"))
            out = await comm.receive_output(timeout=10)
        finally:
            monkeypatch.undo()
        await comm.disconnect()
        return out

    out = _run(close_of())
    assert out["type"] == "websocket.close" and out["code"] == 1013, out
    assert "database" in out.get("reason", ""), out
    lines = _no_traceback(caplog)
    assert sum("database" in line and "h1" in line for line in lines) == 1, lines


def _heartbeat(seq: int) -> str:
    gpu = {"index": 0, "utilization_pct": 40.0, "memory_used_mb": 100, "temperature_c": 40.0, "power_w": 100.0}
    gpu |= {"ecc_uncorrected": 0, "health": "healthy", "xids": []}
    return json.dumps({"v": 1, "type": "heartbeat", "id": seq, "gpus": [gpu], "running": []})


@pytest.mark.timeout(60)
@pytest.mark.django_db(transaction=True)
def test_a_connected_agent_while_the_database_is_lost_is_told_to_come_back_and_flushes_say_it_once(
    settings, caplog, monkeypatch
):
    """Its heartbeats' flushes (every 0.5 s; here 0.02 s) failed with a traceback each; its attempt
    event too, and the connection stayed with the event unrecorded until the agent's next hello."""
    settings.FAIRWAY = {**settings.FAIRWAY, "HEARTBEAT_FLUSH_S": 0.02}
    headers = _agent_headers(caplog)

    async def run() -> dict:
        comm = WebsocketCommunicator(application, "/ws/agent/", headers=headers)
        assert (await comm.connect(timeout=10))[0]
        await comm.send_to(text_data=_hello("h1"))
        assert json.loads(await comm.receive_from(timeout=10))["type"] == "welcome"
        await asyncio.sleep(0.5)  # the hello's work after its welcome (its desired state) done
        monkeypatch.setattr(type(connections["default"]), "get_new_connection", _raise_lost)
        try:
            for seq in range(2, 12):
                await comm.send_to(text_data=_heartbeat(seq))
                await asyncio.sleep(0.03)  # a flush between each
            event = {"v": 1, "type": "attempt", "id": 12, "attempt_id": 99, "state": "exited", "exit_code": 0}
            event |= {"age_s": None, "message": ""}
            await comm.send_to(text_data=json.dumps(event))
            while (out := await comm.receive_output(timeout=10))["type"] != "websocket.close":
                pass  # acks of the heartbeats
        finally:
            monkeypatch.undo()
        await comm.disconnect()
        return out

    out = _run(run())
    assert out["code"] == 1013 and "database" in out.get("reason", ""), out
    lines = _no_traceback(caplog)
    assert sum("heartbeat flush" in line for line in lines) == 1, lines
    assert sum("agent of host h1" in line and "database" in line for line in lines) == 1, lines


# --- HTTP: the database lost in a middleware -----------------------------------------------------


class ReadsTheUser:
    """A middleware that reads the request's user before the view (as mozilla-django-oidc's
    ``SessionRefresh`` does): its session is read from the database there."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.user.is_authenticated  # noqa: B018 -- the read is the point
        return self.get_response(request)


def writes_the_session(request: HttpRequest) -> HttpResponse:
    request.session["ws63"] = 1  # saved by SessionMiddleware after the view
    return HttpResponse("written")


handler500 = config_urls.handler500  # this module is the test's urlconf: the project's handler

urlpatterns = [
    path("api/v1/ws63-session/", writes_the_session),
    path("ws63-session/", writes_the_session),
    path("", include("config.urls")),
]


def _with_middleware(after: str, extra: str) -> list[str]:
    chain = list(settings.MIDDLEWARE)
    chain.insert(chain.index(after) + 1, extra)
    return chain


@pytest.mark.django_db
@pytest.mark.parametrize("where", ["/api/v1/workloads/", "/workloads/"])
def test_a_lost_connection_in_a_middleware_before_the_view_is_answered_503(where, researcher, caplog, monkeypatch):
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    chain = _with_middleware("django.contrib.auth.middleware.AuthenticationMiddleware", f"{__name__}.ReadsTheUser")
    monkeypatch.setattr(SessionStore, "load", _raise_lost)
    with override_settings(MIDDLEWARE=chain), caplog.at_level(logging.INFO, logger="django.request"):
        answer = client.get(where)
    assert answer.status_code == 503, answer.content
    assert answer["Retry-After"] == str(DATABASE_RETRY_AFTER_S)
    if where.startswith("/api/"):
        assert answer.json() == {"detail": DATABASE_UNAVAILABLE, "code": "database_unavailable"}
    else:
        assert answer.content.decode() == DATABASE_UNAVAILABLE
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 1 and logged[0].exc_info is None, [r.getMessage() for r in logged]
    assert where in logged[0].getMessage() and "administrator command" in logged[0].getMessage()


@pytest.mark.django_db
@pytest.mark.urls(__name__)
@pytest.mark.parametrize("where", ["/api/v1/ws63-session/", "/ws63-session/"])
def test_a_lost_connection_saving_the_session_after_the_view_is_answered_503(where, caplog, monkeypatch):
    client = Client(raise_request_exception=False)
    monkeypatch.setattr(SessionStore, "save", _raise_lost)
    monkeypatch.setattr(SessionStore, "create", _raise_lost)
    with caplog.at_level(logging.INFO, logger="django.request"):
        answer = client.get(where)
    assert (answer.status_code, answer["Retry-After"]) == (503, str(DATABASE_RETRY_AFTER_S)), answer.content
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 1 and logged[0].exc_info is None, [r.getMessage() for r in logged]


@pytest.mark.django_db
def test_no_connection_to_be_had_in_a_middleware_is_answered_503_busy(researcher, caplog, monkeypatch):
    from psycopg_pool import PoolTimeout

    def shortage(*_args: Any, **_kwargs: Any) -> Any:
        try:
            raise PoolTimeout("couldn't get a connection after 10.00 sec")
        except PoolTimeout as exc:
            raise OperationalError(str(exc)) from exc

    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    chain = _with_middleware("django.contrib.auth.middleware.AuthenticationMiddleware", f"{__name__}.ReadsTheUser")
    monkeypatch.setattr(SessionStore, "load", shortage)
    with override_settings(MIDDLEWARE=chain), caplog.at_level(logging.INFO, logger="django.request"):
        answer = client.get("/api/v1/workloads/")
    assert (answer.status_code, answer["Retry-After"]) == (503, str(DATABASE_RETRY_AFTER_S)), answer.content
    assert answer.json()["code"] == "database_busy"
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 1 and logged[0].exc_info is None, [r.getMessage() for r in logged]


@pytest.mark.django_db
def test_any_other_error_in_a_middleware_is_still_a_500_with_its_traceback(researcher, caplog, monkeypatch):
    client = Client(raise_request_exception=False)
    client.force_login(researcher)
    chain = _with_middleware("django.contrib.auth.middleware.AuthenticationMiddleware", f"{__name__}.ReadsTheUser")

    def bug(*_args: Any, **_kwargs: Any) -> Any:
        raise ValueError("a bug")

    monkeypatch.setattr(SessionStore, "load", bug)
    with override_settings(MIDDLEWARE=chain), caplog.at_level(logging.INFO, logger="django.request"):
        answer = client.get("/workloads/")
    assert answer.status_code == 500
    logged = [r for r in caplog.records if r.name == "django.request"]
    assert len(logged) == 1 and logged[0].exc_info is not None
