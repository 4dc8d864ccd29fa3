"""The deployment files of deploy/ are what docs/deploy.md says: systemd units for web, worker,
estimates and clock with their hardening and the Procfile's commands, a compose file for one host
whose services run the server image's commands, and the image's entry point knowing every command;
every dramatiq queue is served by exactly one process type, the estimates at a lower priority."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "deploy" / "systemd"
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "PrivateDevices": "yes",
    "DynamicUser": "yes",
    "CapabilityBoundingSet": "",
    "RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
}
COMMANDS = {
    "web": "uvicorn config.asgi:application",
    "worker": "manage.py rundramatiq",
    "estimates": "manage.py rundramatiq",
    "clock": "manage.py clock",
}


def procfile() -> dict[str, str]:
    return dict(line.split(": ", 1) for line in (REPO / "Procfile").read_text().splitlines() if ": " in line)


def queues_of(command: str) -> set[str]:
    """The ``--queues`` of a ``rundramatiq`` command line (every option after it ends the list)."""
    words = command.replace('"', "").replace("\\\n", " ").split()  # a shell line continued
    if "--queues" not in words:
        return set()
    rest = words[words.index("--queues") + 1 :]
    return set(rest[: next((i for i, w in enumerate(rest) if w.startswith("-")), len(rest))])


def unit(name: str) -> dict[str, dict[str, str]]:
    """section → key → value, as systemd reads a unit: a repeated key adds to the value (joined
    with spaces here), comments and blank lines ignored."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current[key] = f"{current[key]} {value}".strip() if key in current else value
    return sections


@pytest.mark.parametrize("process", sorted(COMMANDS))
def test_each_process_has_a_hardened_unit_running_the_procfile_command(process: str):
    service = unit(f"fairway-{process}.service")["Service"]
    for key, value in HARDENING.items():
        assert service.get(key) == value, (process, key)
    assert service["EnvironmentFile"] == "/etc/fairway/fairway.env"
    assert service["StateDirectory"] == "fairway" and "FAIRWAY_VAR_DIR=/var/lib/fairway" in service["Environment"]
    assert COMMANDS[process] in service["ExecStart"]
    assert COMMANDS[process] in procfile()[process]
    assert queues_of(service["ExecStart"]) == queues_of(procfile()[process])
    assert unit(f"fairway-{process}.service")["Install"]["WantedBy"] == "fairway.target"
    assert f"fairway-{process}.service" in unit("fairway.target")["Unit"]["Wants"]


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_reads_the_units_without_syntax_errors(tmp_path: Path):
    run = subprocess.run(  # noqa: S603 -- fixed arguments
        [
            shutil.which("systemd-analyze") or "systemd-analyze",
            "verify",
            *[str(p) for p in sorted(UNITS.glob("*.service"))],
        ],
        capture_output=True,
        text=True,
    )
    # Missing binaries (no /opt/fairway here) are expected; unknown keys and syntax errors are not.
    bad = [line for line in run.stderr.splitlines() if re.search(r"Unknown (key|section)|[Ss]yntax|Invalid", line)]
    assert not bad, run.stderr


def test_every_queue_is_served_by_exactly_one_process_type_and_the_estimates_at_a_lower_priority():
    """The worker serves every queue but ``estimates``; the estimates process that one alone, at
    nice 10 (docs/deploy.md §4): a new actor's queue must be added to one of them."""
    import django_dramatiq.tasks  # noqa: F401 -- declares its actor's queue, as rundramatiq's discovery does
    import dramatiq

    import scheduler.tasks  # noqa: F401

    declared = {q for q in dramatiq.get_broker().get_declared_queues() if not q.endswith((".DQ", ".XQ"))}
    lines = procfile()
    worker, estimates = queues_of(lines["worker"]), queues_of(lines["estimates"])
    assert estimates == {"estimates"}
    assert worker | estimates == declared and not worker & estimates
    assert lines["estimates"].startswith("nice -n ")
    assert unit("fairway-estimates.service")["Service"]["Nice"] == "10"
    entry = (REPO / "deploy" / "image" / "entrypoint.sh").read_text()
    for process in ("worker", "estimates"):
        body = entry.split(f"\n{process})\n", 1)[1].split(";;", 1)[0]
        assert queues_of(body) == queues_of(lines[process]), process
    assert "nice -n" in entry.split("\nestimates)\n", 1)[1].split(";;", 1)[0]


def test_the_compose_file_runs_postgres_redis_and_the_four_processes_after_migrate():
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "redis", "migrate", "web", "worker", "estimates", "clock"}
    for name in ("migrate", "web", "worker", "estimates", "clock"):
        service = services[name]
        assert service["image"].endswith("localhost/fairway:latest}")
        assert service["command"] == [name]
        assert (
            "REDIS_URL" in service["environment"] and "@postgres:5432/fairway" in service["environment"]["DATABASE_URL"]
        )
        assert service["env_file"] == ["fairway.env"]
    for name in ("web", "worker", "estimates", "clock"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert services["migrate"]["depends_on"]["postgres"] == {"condition": "service_healthy"}
    assert "/readyz" in " ".join(services["web"]["healthcheck"]["test"])
    assert set(compose["volumes"]) == {"postgres-data", "fairway-state"}


def test_the_compose_file_publishes_the_web_port_on_loopback_only():
    """ops30: `8000:8000` published uvicorn on every interface, in plain HTTP, to clients that can
    then write `X-Forwarded-For` and `X-Forwarded-Proto` themselves, which production trusts from
    the one proxy it assumes (FAIRWAY_TRUSTED_PROXIES=1): a login throttle dodged by a new made-up
    address per try. Like the web unit (127.0.0.1:8000), only a proxy on the host reaches it."""
    services = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())["services"]
    assert services["web"]["ports"] == ["127.0.0.1:8000:8000"]
    published = [port for service in services.values() for port in service.get("ports", [])]
    assert all(port.startswith("127.0.0.1:") for port in published), published


@pytest.mark.skipif(not shutil.which("podman-compose"), reason="podman-compose is not installed")
def test_podman_compose_reads_the_file(tmp_path: Path):
    env = {"POSTGRES_PASSWORD": "x", "PATH": "/usr/bin:/bin"}
    run = subprocess.run(  # noqa: S603 -- fixed arguments
        [shutil.which("podman-compose") or "podman-compose", "-f", str(REPO / "deploy" / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert run.returncode == 0, run.stderr


def test_the_image_entry_point_knows_every_command_of_the_compose_file_and_the_containerfile():
    entry = (REPO / "deploy" / "image" / "entrypoint.sh").read_text()
    for command in ("web", "worker", "estimates", "clock", "migrate", "manage"):
        assert re.search(rf"^{command}\)$", entry, re.M), command
    for process, command in COMMANDS.items():
        assert command.split(" ", 1)[-1] in entry, process
    containerfile = (REPO / "Containerfile").read_text()
    assert containerfile.count("\nFROM ") == 2  # build stage, runtime stage
    assert re.search(r"^USER 10001", containerfile, re.M)
    assert "collectstatic" in containerfile and "--require-hashes" in containerfile
    assert 'CMD ["web"]' in containerfile


def test_the_procfile_web_line_listens_where_the_web_unit_does():
    """ops30: the Procfile's web line listened on 0.0.0.0 by default while production trusts the
    proxy's X-Forwarded-* (FAIRWAY_TRUSTED_PROXIES=1): a client reaching uvicorn directly chose
    the address its throttles counted. Loopback by default, as the unit; `HOST` opens it."""
    assert "--host ${HOST:-127.0.0.1}" in procfile()["web"]
    assert "HOST=127.0.0.1" in unit("fairway-web.service")["Service"]["Environment"]


def test_the_example_environment_file_gives_the_units_postgres_and_redis():
    """ops30: deploy/fairway.env.example, the units' EnvironmentFile, named neither DATABASE_URL nor
    REDIS_URL (compose sets both itself): units started from it ran on a SQLite file with no broker,
    each process alone: the clock's ticks went to a stub broker in its own memory and never ran,
    with no error in any log. The example now has both (compose's `environment:` still wins)."""
    lines = (REPO / "deploy" / "fairway.env.example").read_text().splitlines()
    env = dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))
    assert env["DATABASE_URL"].startswith("postgres://") and env["REDIS_URL"].startswith("redis://")
    compose = yaml.safe_load((REPO / "deploy" / "compose.yaml").read_text())["x-fairway"]
    assert {"DATABASE_URL", "REDIS_URL"} <= set(compose["environment"])
