"""Install flow (DESIGN.md §5): join tokens, ``POST /agent/join``, and the served install script run
for real against the live stack in a temporary prefix (``--no-systemd``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from datetime import timedelta
from io import BytesIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from agent import AGENT_VERSION
from agent.gpu.fake import fake_gpu_uuid
from scheduler.agent_install import WHEEL_NAME
from scheduler.models import Attempt, Cluster, Host, HostEvent, JoinToken, Workload
from scheduler.services import JoinError, do_create_join_token, do_join_host
from tests.e2e.wheelhouse import build_wheelhouse

GPUS = [{"index": i, "uuid": f"GPU-join-{i}", "model": "H100", "memory_mb": 81920} for i in range(2)]


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))


def _post_join(client: Client, body: object) -> tuple[int, dict]:
    response = client.post("/agent/join", data=json.dumps(body), content_type="application/json")
    return response.status_code, response.json()


@pytest.mark.django_db
def test_a_join_token_is_single_use_and_hashed(client: Client) -> None:
    cluster = Cluster.objects.create(name="c1", allow_root_workloads=True)
    row, token = do_create_join_token(None, cluster, timedelta(hours=1), note="for h9")
    assert token.startswith("fwj_") and token not in row.token_hash and len(row.token_hash) == 64

    status, body = _post_join(client, {"token": token, "host": "h9", "gpus": GPUS, "labels": {"rack": "r2"}})
    assert status == 201, body
    assert body["host"] == "h9" and body["cluster"] == "c1"
    assert body["websocket_url"] == "ws://testserver/ws/agent/"
    host = Host.objects.get(name="h9")
    assert host.labels == {"rack": "r2"} and host.gpus.count() == 2
    assert HostEvent.objects.filter(host=host, kind="joined").exists()
    row.refresh_from_db()
    assert row.used_at is not None and row.host == host

    # the same token again (another host name): refused, nothing registered
    status, body = _post_join(client, {"token": token, "host": "h10", "gpus": [{**GPUS[0], "uuid": "GPU-x"}]})
    assert (status, body["code"]) == (403, "invalid_join_token")
    assert not Host.objects.filter(name="h10").exists()


@pytest.mark.django_db
def test_expired_unknown_and_refused_joins(client: Client) -> None:
    cluster = Cluster.objects.create(name="c1", allow_root_workloads=True)
    expired, old = do_create_join_token(None, cluster, timedelta(seconds=1))
    JoinToken.objects.filter(pk=expired.pk).update(expires_at=expired.created_at - timedelta(seconds=1))
    assert _post_join(client, {"token": old, "host": "h1", "gpus": GPUS})[0] == 403
    assert _post_join(client, {"token": "fwj_nope", "host": "h1", "gpus": GPUS})[0] == 403
    assert _post_join(client, {"host": "h1", "gpus": GPUS})[0] == 400
    assert _post_join(client, [1, 2])[0] == 400
    assert client.post("/agent/join", data=b"\xff", content_type="application/json").status_code == 400

    _, token = do_create_join_token(None, cluster)
    assert _post_join(client, {"token": token, "host": "bad name!", "gpus": GPUS})[0] == 400
    # a refused registration does not spend the token
    assert do_join_host(token, "h1", [(0, "GPU-a", "H100", 1)])[0].name == "h1"
    _, token2 = do_create_join_token(None, cluster)
    status, body = _post_join(client, {"token": token2, "host": "h1", "gpus": GPUS})
    assert (status, body["code"]) == (409, "host_exists")
    assert (
        JoinToken.objects.get(token_hash__isnull=False, pk=JoinToken.objects.order_by("-id").first().pk).used_at is None
    )
    with pytest.raises(JoinError):
        do_create_join_token(None, cluster, timedelta(days=31))


@pytest.mark.django_db
def test_create_join_token_command_prints_the_token_once(capsys: pytest.CaptureFixture[str]) -> None:
    Cluster.objects.create(name="c1", allow_root_workloads=True)
    call_command("create_join_token", "--cluster", "c1", "--ttl", "15m", "--note", "rack 3")
    out, err = capsys.readouterr()
    token = out.strip()
    row = JoinToken.objects.get()
    assert token.startswith("fwj_") and (row.expires_at - row.created_at) == timedelta(minutes=15)
    assert "install.sh" in err and row.note == "rack 3"


@pytest.mark.django_db
def test_create_join_token_takes_durations_as_every_command_does(capsys: pytest.CaptureFixture[str]) -> None:
    """break27: `--ttl 1h30m` was refused (a parser of its own) though other commands accept it."""
    Cluster.objects.create(name="c1", allow_root_workloads=True)
    call_command("create_join_token", "--cluster", "c1", "--ttl", "1h30m")
    row = JoinToken.objects.get()
    assert row.expires_at - row.created_at == timedelta(hours=1, minutes=30)
    for ttl, words in (("31d", "at most 30 days"), ("9" * 30 + "w", "at most 30 days"), ("soon", "not a duration")):
        with pytest.raises(CommandError, match=words):
            call_command("create_join_token", "--cluster", "c1", "--ttl", ttl)


@pytest.mark.django_db
def test_join_token_for_an_unknown_cluster_says_where_clusters_come_from() -> None:
    """``manage.py create_join_token --cluster h100`` on a fresh install said only "no such cluster:
    h100"; the README's agent section never said a cluster is made in the admin first."""
    with pytest.raises(CommandError, match=r"no such cluster: h100 \(there is no cluster yet\); .*Clusters → Add"):
        call_command("create_join_token", "--cluster", "h100")
    Cluster.objects.create(name="a100")
    with pytest.raises(CommandError, match=r"no such cluster: h100 \(the clusters are: a100\)"):
        call_command("create_join_token", "--cluster", "h100")


def test_the_served_wheel_and_script(client: Client) -> None:
    script = client.get("/agent/install.sh")
    assert script.status_code == 200
    text = script.content.decode()
    assert "SERVER_URL='http://testserver'" in text and f"WHEEL_NAME={WHEEL_NAME}" in text and "@@" not in text
    wheel = client.get(f"/agent/{WHEEL_NAME}")
    assert wheel.status_code == 200
    with zipfile.ZipFile(BytesIO(wheel.content)) as archive:
        names = set(archive.namelist())
        meta = archive.read(f"fairway_agent-{AGENT_VERSION}.dist-info/METADATA").decode()
        entry_points = archive.read(f"fairway_agent-{AGENT_VERSION}.dist-info/entry_points.txt").decode()
    assert {"agent/__main__.py", "agent/protocol.py", "agent/runtime/process.py"} <= names
    assert "Requires-Dist: websockets==" in meta
    assert "fairway-agent = agent.__main__:main" in entry_points
    assert client.get(f"/agent/{WHEEL_NAME}").content == wheel.content  # reproducible


def _run_script(script: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = ["/bin/bash", str(script), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=180, check=False)  # noqa: S603


@pytest.mark.timeout(240)
def test_install_script_joins_a_new_host_that_runs_a_workload(stack, tmp_path: Path, wheelhouse: Path) -> None:
    # Given a join token and the install script as served by the live server
    _, token = do_create_join_token(None, stack.cluster, timedelta(minutes=10))
    script = tmp_path / "install.sh"
    with urllib.request.urlopen(f"{stack.base_url}/agent/install.sh", timeout=10) as response:  # noqa: S310 -- local
        script.write_bytes(response.read())
    # Not under /tmp or /var/tmp: a root agent gives each attempt private ones (docs/isolation.md),
    # so a virtualenv there is invisible to the workload it runs, as on a real host.
    scratch = "/var/lib" if os.geteuid() == 0 else "/var/tmp"  # noqa: S108 -- no private ones without root
    prefix = Path(tempfile.mkdtemp(prefix="fairway-install-test-", dir=scratch))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))},
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheelhouse),
        "FAIRWAY_JOIN_TOKEN": "",  # the token from a file (iso61: never in a command line)
        "FAIRWAY_ISOLATION": "{mode: agent, allow_root: true}",  # this Python is under /root (0700)
    }
    common = ["--no-systemd", "--prefix", str(prefix), "--python", sys.executable]
    install = ["--host-name", "h2", "--gpu-backend", "fake", "--gpus", "4", "--model", "H100", "--label", "rack=r9"]
    pid_file = prefix / "run" / "agent.pid"
    try:
        # When it runs in a temporary prefix without systemd
        token_file = tmp_path / "join-token"
        token_file.write_text(token + "\n")
        done = _run_script(script, *common, *install, "--token-file", str(token_file), env=env)
        assert done.returncode == 0, done.stdout + done.stderr

        # Then the agent is in its own virtualenv, the config is owner-only, and the host registered and connected
        config = prefix / "etc" / "agent.yaml"
        assert stat.S_IMODE(config.stat().st_mode) == 0o600
        assert (prefix / "venv" / "bin" / "fairway-agent").exists()
        host = stack.wait_until(
            lambda: Host.objects.filter(name="h2", agent_version=AGENT_VERSION).first(), 30, "h2's hello"
        )
        assert host.cluster_id == stack.cluster.pk and host.labels == {"rack": "r9", "runtime": "process"}
        assert sorted(host.gpus.values_list("uuid", flat=True)) == sorted(fake_gpu_uuid("h2", i) for i in range(4))

        # and it runs a 4-GPU workload (only h2 has 4 GPUs) with the installed package's Python
        venv_python = str(prefix / "venv" / "bin" / "python")
        wid = stack.submit(
            "org/alpha",
            gpus=4,
            min_runtime=60,
            duration=1,
            env={},
            command=[venv_python, "-m", "agent.standin", "--duration", "1"],
        )
        stack.wait_until(
            lambda: Workload.objects.get(pk=wid).state == Workload.State.SUCCEEDED, 40, "the workload on h2"
        )
        (attempt,) = Attempt.objects.filter(workload_id=wid)
        assert attempt.host.name == "h2" and attempt.exit_code == 0
        assert "standin: done" in (prefix / "state" / "attempts" / f"{attempt.wire_id}.log").read_text()

        # When the script runs again (upgrade): the token is not needed, the config is kept, the agent restarts
        first_pid = int(pid_file.read_text())
        again = _run_script(script, *common, *install, env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "already joined" in again.stdout
        assert int(pid_file.read_text()) != first_pid
        stack.wait_until(
            lambda: HostEvent.objects.filter(host__name="h2", kind="hello").count() >= 2, 30, "h2 reconnecting"
        )
        assert Host.objects.filter(name__startswith="h2").count() == 1

        # When it uninstalls: the agent stops, venv and config are gone, the state stays
        second_pid = int(pid_file.read_text())
        removed = _run_script(script, "--uninstall", *common[:3], env=env)
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert not (prefix / "venv").exists() and not config.exists() and (prefix / "state").exists()
        assert (
            not Path(f"/proc/{second_pid}").exists()
            or b"fairway-agent" not in Path(f"/proc/{second_pid}/cmdline").read_bytes()
        )
    finally:
        if pid_file.exists():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        shutil.rmtree(prefix, ignore_errors=True)


def test_join_without_a_server_fails_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(  # noqa: S603 -- our own agent
        [
            sys.executable,
            "-m",
            "agent",
            "join",
            "--server",
            "http://127.0.0.1:9",
            "--config",
            str(tmp_path / "a.yaml"),
            "--gpu-backend",
            "fake",
            "--gpus",
            "1",
        ],
        env={**os.environ, "FAIRWAY_JOIN_TOKEN": "fwj_x"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 1 and done.stderr.startswith("join: cannot reach") and done.stderr.count("\n") == 1
    assert not (tmp_path / "a.yaml").exists()


@pytest.mark.django_db
def test_create_join_token_says_how_to_name_the_server_when_it_cannot(capsys, settings) -> None:
    """tryout35: without FAIRWAY_PUBLIC_URL the command printed "curl -fsSL http://SERVER/agent/…"
    and nothing more: pasted as printed on the new host, curl could not resolve SERVER. It now
    says that SERVER is to be replaced, and how to have it printed (the admin's action knows it)."""
    settings.FAIRWAY = {**settings.FAIRWAY, "PUBLIC_URL": ""}
    Cluster.objects.create(name="c1")
    call_command("create_join_token", "--cluster", "c1")
    _out, err = capsys.readouterr()
    assert "http://SERVER/agent/install.sh" in err
    assert "replace SERVER" in err and "FAIRWAY_PUBLIC_URL" in err, err

    settings.FAIRWAY = {**settings.FAIRWAY, "PUBLIC_URL": "https://fw.example.org"}
    call_command("create_join_token", "--cluster", "c1")
    _out, err = capsys.readouterr()
    assert "https://fw.example.org/agent/install.sh" in err and "replace SERVER" not in err
