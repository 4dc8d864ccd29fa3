"""The served install scripts (agent and CLI) without installing anything: ``--help`` when piped
into bash, and the agent's ``--uninstall --purge``."""

from __future__ import annotations

import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.test import Client

BASH = shutil.which("bash") or "bash"


def _served(path: str) -> bytes:
    response = Client().get(path)
    assert response.status_code == 200
    return response.content


def _bash_stdin(script: bytes, *args: str) -> subprocess.CompletedProcess[str]:
    """``curl … | bash -s -- ARGS``: bash reads the script from its standard input ($0 is bash)."""
    return subprocess.run(  # noqa: S603 -- bash runs the script this server serves
        [BASH, "-s", "--", *args], input=script.decode(), capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.parametrize(
    ("path", "first_line", "options"),
    [
        ("/agent/install.sh", "Fairway agent installer", ["--token", "--uninstall", "--purge", "--no-systemd"]),
        ("/cli/install.sh", "Fairway CLI installer", ["--prefix", "--bin-dir", "--uninstall"]),
    ],
)
def test_help_prints_the_usage_when_the_script_comes_from_a_pipe(path, first_line, options):
    done = _bash_stdin(_served(path), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(first_line)
    for option in options:
        assert option in done.stdout
    assert done.stderr == ""


def test_uninstall_purge_removes_everything_under_the_prefix(tmp_path: Path):
    prefix = tmp_path / "agent"
    for sub in ("venv/bin", "etc", "state/attempts", "run"):
        (prefix / sub).mkdir(parents=True)
    (prefix / "etc" / "agent.yaml").write_text("host_name: gpu-7\ntoken: fwh_x\n")
    (prefix / "state" / "attempts" / "a1.log").write_text("log\n")
    (prefix / "run" / "agent.pid").write_text("999999999\n")  # no such process
    (prefix / "agent.log").write_text("agent log\n")

    done = _bash_stdin(_served("/agent/install.sh"), "--uninstall", "--purge", "--no-systemd", "--prefix", str(prefix))

    assert done.returncode == 0, done.stdout + done.stderr
    assert not prefix.exists(), sorted(str(p) for p in prefix.rglob("*"))
    # the operator learns that the server still schedules on the host until it goes offline
    assert "gpu-7 is still registered on the server" in done.stdout
    assert "fairway hosts drain gpu-7" in done.stdout


def test_uninstall_of_a_removed_host_says_it_was_removed_not_still_registered(tmp_path: Path):
    """try56: after an admin removed the host (its agent exited 77), --uninstall still said "the
    host gpu-9 is still registered on the server" and told the operator to drain and remove it."""
    from agent.client import HOST_REMOVED_FILE

    prefix = tmp_path / "agent"
    for sub in ("venv/bin", "etc", "state", "run"):
        (prefix / sub).mkdir(parents=True)
    (prefix / "etc" / "agent.yaml").write_text("host_name: gpu-9\n")
    (prefix / "state" / HOST_REMOVED_FILE).write_text(
        "removed from Fairway by an admin; told at Dec 6 2026 23:10:00 UTC\n"
    )

    done = _bash_stdin(_served("/agent/install.sh"), "--uninstall", "--no-systemd", "--prefix", str(prefix))

    assert done.returncode == 0, done.stdout + done.stderr
    assert "still registered" not in done.stdout and "fairway hosts drain" not in done.stdout, done.stdout
    assert (
        "gpu-9 was removed from the server by an admin (its agent was told at Dec 6 2026 23:10:00 UTC)" in done.stdout
    )


def test_uninstall_of_a_host_the_server_does_not_know_says_so_not_still_registered(tmp_path: Path):
    """ops48: after a database restore older than the host's join (docs/deploy.md §7: uninstall,
    then join again), the server refused the agent's token as unknown, and --uninstall still said
    "the host gpu-5 is still registered on the server" and told the operator to drain and remove it."""
    from agent.client import HOST_UNKNOWN_FILE

    prefix = tmp_path / "agent"
    for sub in ("venv/bin", "etc", "state", "run"):
        (prefix / sub).mkdir(parents=True)
    (prefix / "etc" / "agent.yaml").write_text("host_name: gpu-5\n")
    (prefix / "state" / HOST_UNKNOWN_FILE).write_text(
        "the server does not know this host's token; told at Dec 7 2026 09:00:00 UTC\n"
    )

    done = _bash_stdin(_served("/agent/install.sh"), "--uninstall", "--no-systemd", "--prefix", str(prefix))

    assert done.returncode == 0, done.stdout + done.stderr
    assert "still registered" not in done.stdout and "fairway hosts drain" not in done.stdout, done.stdout
    assert "the server does not know the host gpu-5" in done.stdout, done.stdout
    assert "refused its token as unknown at Dec 7 2026 09:00:00 UTC" in done.stdout, done.stdout
    assert "nothing to remove there" in done.stdout, done.stdout


def test_uninstall_says_when_the_agent_was_told_as_every_message_reads_an_instant(tmp_path: Path):
    """small49: the notes the agent leaves (its own writers) held ``2026-12-07T18:17:52Z``, which
    --uninstall repeated, while every other message reads ``Dec 7 2026 18:17:52 UTC``
    (``instant_text``, the absolute form of text stored and read later)."""
    import re

    from agent.__main__ import _note_host_removed
    from agent.client import CLOSE_UNAUTHORIZED, note_link_closed
    from agent.protocol import UNKNOWN_TOKEN_REASON

    instant = r"[A-Z][a-z]{2} \d{1,2} \d{4} \d\d:\d\d:\d\d UTC"
    for name, write, said in (
        (
            "gpu-9",
            _note_host_removed,
            rf"gpu-9 was removed from the server by an admin \(its agent was told at {instant}\)",
        ),
        (
            "gpu-5",
            lambda state: note_link_closed(state, CLOSE_UNAUTHORIZED, UNKNOWN_TOKEN_REASON),
            rf"refused its token as unknown at {instant},",
        ),
    ):
        prefix = tmp_path / name
        for sub in ("venv/bin", "etc", "state", "run"):
            (prefix / sub).mkdir(parents=True)
        (prefix / "etc" / "agent.yaml").write_text(f"host_name: {name}\n")
        write(prefix / "state")

        done = _bash_stdin(_served("/agent/install.sh"), "--uninstall", "--no-systemd", "--prefix", str(prefix))

        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(said, done.stdout), done.stdout


def test_uninstall_without_purge_keeps_the_state_and_the_log(tmp_path: Path):
    prefix = tmp_path / "agent"
    for sub in ("venv/bin", "etc", "state", "run"):
        (prefix / sub).mkdir(parents=True)
    (prefix / "etc" / "agent.yaml").write_text("host_name: gpu-8\n")
    (prefix / "agent.log").write_text("agent log\n")

    done = _bash_stdin(_served("/agent/install.sh"), "--uninstall", "--no-systemd", "--prefix", str(prefix))

    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in prefix.iterdir()) == ["agent.log", "state"]


def test_a_first_install_without_a_join_token_stops_before_downloading_anything(tmp_path: Path):
    prefix = tmp_path / "agent"
    done = subprocess.run(  # noqa: S603 -- bash runs the script this server serves
        [BASH, "-s", "--", "--no-systemd", "--prefix", str(prefix)],
        input=_served("/agent/install.sh").decode(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": "/usr/bin:/bin", "FAIRWAY_JOIN_TOKEN": ""},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a join token is required" in done.stderr
    assert "downloading" not in done.stdout
    assert not (prefix / "venv").exists()


def _unit(tmp_path: Path, *args: str, config: str | None = None) -> dict[str, set[str]]:
    """The systemd unit the agent's script would write (``--print-unit``): After= and Wants= units."""
    prefix = tmp_path / "agent"
    if config is not None:
        (prefix / "etc").mkdir(parents=True, exist_ok=True)
        (prefix / "etc" / "agent.yaml").write_text(config)
    done = _bash_stdin(_served("/agent/install.sh"), "--print-unit", "--prefix", str(prefix), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("[Unit]\n") and "\nExecStart=" in done.stdout, done.stdout
    assert not (prefix / "venv").exists()  # printed, nothing installed
    lines = [line.split("=", 1) for line in done.stdout.splitlines() if line.startswith(("After=", "Wants="))]
    return {key: set(value.split()) for key, value in lines}


@pytest.mark.parametrize(
    ("args", "engine"),
    [
        (["--runtime", "docker", "--docker-url", "unix:///run/podman/podman.sock"], {"podman.socket"}),
        (["--runtime", "docker", "--docker-url", "unix:///var/run/podman/podman.sock"], {"podman.socket"}),
        (["--runtime", "docker"], {"docker.service"}),
        (["--runtime", "docker", "--docker-url", "unix:///var/run/docker.sock"], {"docker.service"}),
        (["--runtime", "docker", "--docker-url", "tcp://engine.example.org:2376"], set()),
        (["--runtime", "process"], set()),
        ([], set()),
    ],
)
def test_the_agent_unit_waits_for_the_engine_it_is_configured_with(tmp_path: Path, args, engine):
    """ops30b: the unit ordered the agent after docker.service whatever its runtime, never after
    podman.socket: with `--docker-url unix:///run/podman/podman.sock` a boot could start the agent
    before podman's socket existed (its docker runtime then unavailable)."""
    unit = _unit(tmp_path, *args)
    assert unit["After"] == {"network-online.target", *engine}
    assert unit["Wants"] == {"network-online.target", *engine}


def test_the_agent_unit_follows_the_kept_config_not_the_options(tmp_path: Path):
    """An upgrade keeps the joined config: its runtime, not the (absent) options, picks the engine."""
    config = "host_name: gpu-9\ntoken: fwh_x\nruntime: docker\ndocker_url: unix:///run/podman/podman.sock\n"
    assert _unit(tmp_path, config=config)["After"] == {"network-online.target", "podman.socket"}
    config = "host_name: gpu-9\ntoken: fwh_x\nruntime: process\n"
    assert _unit(tmp_path, "--runtime", "docker", config=config)["After"] == {"network-online.target"}


class _Files(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` (path → bytes), 404 otherwise, and records every path asked."""

    files: dict[str, bytes] = {}
    asked: list[str] = []

    def do_GET(self) -> None:
        self.asked.append(self.path)
        body = self.files.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def files_server():
    """``(url, files, asked)``: a throwaway HTTP server on a free local port."""
    handler = type("Handler", (_Files,), {"files": {}, "asked": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler.files, handler.asked
    server.shutdown()
    server.server_close()


def _fake_python(tmp_path: Path) -> Path:
    """A ``--python`` whose virtualenvs' pip finds nothing (a host with no package index)."""
    fake = tmp_path / "python3"
    fake.write_text(
        "#!/bin/bash\n"
        'if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi\n'
        'if [ "$1 $2" = "-m pip" ]; then echo "ERROR: No matching distribution found for websockets" >&2; exit 1; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    return fake


def test_the_cli_install_from_an_unreachable_server_says_so_in_one_line(tmp_path: Path):
    """tryout36: a wrong --server (or a server down) was a urllib traceback."""
    home = tmp_path / "home"
    done = subprocess.run(  # noqa: S603 -- bash runs the script this server serves
        [BASH, "-s", "--", "--server", "http://127.0.0.1:9", "--prefix", str(tmp_path / "cli")],
        input=_served("/cli/install.sh").decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "PYTHON": sys.executable},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("install.sh: cannot download http://127.0.0.1:9/cli/fairway_cli-")
    assert "--server URL" in done.stderr


def test_the_cli_install_takes_the_api_url_as_the_server(tmp_path: Path, files_server):
    """README calls /api/v1/ "the REST API": `--server https://host/api/v1/` asked /api/v1/cli/…
    (HTTP 404, a traceback); the script takes the site's root from it, as `fairway login` does."""
    url, _files, asked = files_server
    done = subprocess.run(  # noqa: S603 -- bash runs the script this server serves
        [BASH, "-s", "--", "--server", f"{url}/api/v1/", "--prefix", str(tmp_path / "cli")],
        input=_served("/cli/install.sh").decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "PYTHON": sys.executable},
    )
    assert done.returncode == 1  # this server has no wheel
    assert [path.split("fairway_cli-")[0] for path in asked] == ["/cli/"]


def test_an_agent_host_without_a_package_index_is_told_what_to_give_pip(tmp_path: Path, files_server):
    """tryout36: on a host with no index, pip's "No matching distribution found for websockets"
    ended the install with no word of what the agent needs or how to give it to pip."""
    from scheduler.agent_install import WHEEL, WHEEL_NAME

    url, files, _asked = files_server
    files[f"/agent/{WHEEL_NAME}"] = WHEEL.build()
    done = subprocess.run(  # noqa: S603 -- bash runs the script this server serves
        [BASH, "-s", "--", "--no-systemd", "--prefix", str(tmp_path / "agent"), "--server", url],
        input=_served("/agent/install.sh").decode(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "FAIRWAY_JOIN_TOKEN": "fwj_x", "PYTHON": str(_fake_python(tmp_path))},
    )
    assert done.returncode == 1, done.stdout + done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("install.sh: pip could not install the agent's dependencies (websockets==")
    assert "PyYAML==" in last and "PIP_FIND_LINKS=DIR PIP_NO_INDEX=1" in last
    assert "joining" not in done.stdout


def test_the_agent_unit_does_not_restart_an_agent_whose_host_was_removed(tmp_path: Path) -> None:
    """sec41: a removed host's agent exits with EXIT_HOST_REMOVED (tests/e2e/test_host_removed.py);
    ``Restart=always`` would start it again every 5 s, each start refused: the unit names that
    status in ``RestartPreventExitStatus=``, every other exit still restarts it."""
    from agent.client import EXIT_HOST_REMOVED

    done = _bash_stdin(_served("/agent/install.sh"), "--print-unit", "--prefix", str(tmp_path / "agent"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\nRestart=always\n" in done.stdout
    assert f"\nRestartPreventExitStatus={EXIT_HOST_REMOVED}\n" in done.stdout, done.stdout


def test_a_join_token_on_the_command_line_is_refused_without_being_shown(tmp_path: Path) -> None:
    """iso61: ``install.sh --token fwj_...`` put the join token in the script's command line, which
    every user of the host reads (``/proc/<pid>/cmdline``, ``ps``) for as long as the install runs
    (minutes of pip): whoever joined with it first got a host token of the cluster, and with it
    other people's workloads and their secrets. It is refused, before anything is done, pointing
    at the ways that keep it out of the process list."""
    for argv in (["--token", "fwj_seen_by_all"], ["--token=fwj_seen_by_all"]):
        done = _bash_stdin(_served("/agent/install.sh"), *argv, "--no-systemd", "--prefix", str(tmp_path / "x"))
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert "fwj_seen_by_all" not in done.stdout + done.stderr
        assert "process list" in done.stderr and "--token-file FILE" in done.stderr
        assert "FAIRWAY_JOIN_TOKEN" in done.stderr and done.stdout == ""
    assert not (tmp_path / "x").exists()


def test_the_join_token_is_read_from_a_file(tmp_path: Path) -> None:
    """``--token-file FILE`` (iso61): the token from a file (its first line), never in a command
    line. Here the server does not answer, so the install gets as far as the download: past the
    token's check, which a missing token fails."""
    prefix = tmp_path / "agent"
    common = ["--no-systemd", "--prefix", str(prefix), "--python", sys.executable, "--server", "http://127.0.0.1:8359"]
    script = _served("/agent/install.sh")

    without = _bash_stdin(script, *common)
    assert without.returncode == 1 and "a join token is required" in without.stderr, without.stderr
    assert "--token-file FILE or FAIRWAY_JOIN_TOKEN" in without.stderr

    token = tmp_path / "join-token"
    token.write_text("  fwj_from_a_file  \n")
    token.chmod(0o600)
    done = _bash_stdin(script, *common, "--token-file", str(token))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "a join token is required" not in done.stderr
    assert "cannot download http://127.0.0.1:8359/agent/" in done.stderr

    token.write_text("\n")
    empty = _bash_stdin(script, *common, "--token-file", str(token))
    assert (empty.returncode, empty.stderr) == (1, f"install.sh: {token} holds no join token\n")
    missing = _bash_stdin(script, *common, "--token-file", str(tmp_path / "none"))
    assert missing.returncode == 1 and f"cannot read the join token from {tmp_path / 'none'}" in missing.stderr
