"""ops30b: the clock and the workers (mend31: and the web processes) refuse to start in production
without Redis, or on SQLite.

Without ``REDIS_URL`` the broker is dramatiq's stub broker, in each process's own memory:
``manage.py clock`` and ``manage.py rundramatiq`` started, said nothing and never ran a tick (the
clock's tick requests went to a queue no worker reads). In production they now exit at once with
a message naming the variable. The embedded mode (no ``FAIRWAY_ENV``: the demo, the tests, one
box) is unchanged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import get_commands
from django.core.management.base import CommandError
from django.test import override_settings

from scheduler.management.production import refuse_without_shared_services
from tests.deploy.test_check_deploy import ROOT, production_env

PROCFILE_WEB = next(
    line.removeprefix("web: ") for line in (ROOT / "Procfile").read_text().splitlines() if line.startswith("web: ")
)
POSTGRES = "postgres://postgres@127.0.0.1:5432/unused"  # never reached: the command stops first
COMMANDS = {
    "clock": ["clock"],
    "worker": ["rundramatiq", "--queues", "scheduler", "--processes", "1", "--threads", "1"],
    "estimates": ["rundramatiq", "--queues", "estimates", "--processes", "1", "--threads", "1"],
    # mend31: the web process too (its tick requests and notifications went to its own stub broker)
    "serve": ["serve", "--port", "8531"],
    "web": ["-m", "uvicorn", "config.asgi:application", "--port", "8532", "--lifespan", "off"],
    # ops48: as launched, with --workers 2, uvicorn's supervisor started each refused worker again,
    # for ever: the launchers ask `manage.py web_preflight` first
    "procfile-web": ["bash", "-c", PROCFILE_WEB],
    "image-web": ["sh", "deploy/image/entrypoint.sh", "web", "--port", "8533"],
}


def start(env: dict[str, str], args: list[str], timeout: float = 60) -> tuple[int | None, str]:
    """``manage.py <args>`` (``python -m …`` when args start with ``-m``): its exit status and
    output, or None when it was still running (killed)."""
    if args[0] in ("bash", "sh"):  # a launcher: its `python` and `uvicorn` are this venv's
        env = {**env, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}", "PORT": "8534"}
    proc = subprocess.Popen(  # noqa: S603 -- our own manage.py, fixed arguments
        args if args[0] in ("bash", "sh") else [sys.executable, *(args if args[0] == "-m" else ["manage.py", *args])],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # dramatiq forks: the whole group goes on a timeout
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_production_without_redis_refuses_to_start(tmp_path, name):
    env = production_env(tmp_path, DATABASE_URL=POSTGRES)
    status, out = start(env, COMMANDS[name], timeout=30)
    assert status not in (None, 0), f"{name} started without REDIS_URL:\n{out}"
    assert "REDIS_URL" in out and "DATABASE_URL" not in out, out
    one_line(out)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_production_on_sqlite_refuses_to_start(tmp_path, name):
    env = production_env(tmp_path, REDIS_URL="redis://127.0.0.1:6379/12")
    env["REDIS_URL"] = "redis://127.0.0.1:6379/12"  # production_env drops it
    status, out = start(env, COMMANDS[name], timeout=30)
    assert status not in (None, 0), f"{name} started on SQLite:\n{out}"
    assert "DATABASE_URL" in out and "REDIS_URL" not in out, out
    one_line(out)


def one_line(out: str) -> str:
    """ops48: the web process (uvicorn) said it after a 40-line traceback: an operator sees the one
    line naming the setting, nothing else."""
    assert "Traceback" not in out, out
    (line,) = [line for line in out.splitlines() if line.strip()]
    assert "refuses to start" in line, line
    return line


def test_the_guard_names_both_and_passes_outside_production():
    with override_settings(PRODUCTION=True, REDIS_URL=""), pytest.raises(CommandError) as refused:
        refuse_without_shared_services("clock")
    assert "REDIS_URL" in str(refused.value)
    with override_settings(PRODUCTION=False, REDIS_URL=""):
        refuse_without_shared_services("clock")  # the embedded mode: demo, tests, one box


def test_rundramatiq_is_scheduler_s_wrapper():
    """``scheduler`` is before ``django_dramatiq`` in INSTALLED_APPS, so its ``rundramatiq`` wins."""
    assert get_commands()["rundramatiq"] == "scheduler"


def test_the_web_unit_runs_the_preflight_before_uvicorn():
    """ops48: the systemd unit starts the web process as the Procfile does (uvicorn, --workers):
    `manage.py web_preflight` first, so a refusal is one line and no start."""
    lines = (ROOT / "deploy" / "systemd" / "fairway-web.service").read_text().splitlines()
    pre = [line for line in lines if line.startswith("ExecStartPre=")]
    assert pre and pre[0].endswith("manage.py web_preflight"), pre
