"""try43: a malformed setting stops ``manage.py`` with the variable's name (README,
"Configuration") — at the end of a 50-line traceback through Django's internals, where an operator
reading a unit's log first met ``connection.py``, ``functional.py`` and ``db/utils.py``. It now
stops with one line naming the variable and status 2, as the CLI's bad usage does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.test_check_deploy import ROOT, production_env


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 -- our own manage.py, fixed arguments
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"FAIRWAY_TICK_INTERVAL_S": "abc"}, "FAIRWAY_TICK_INTERVAL_S='abc' is not a number"),
        ({"SECRET_KEY": ""}, "FAIRWAY_ENV=production needs SECRET_KEY"),
        ({"SECRET_KEY": "collectstatic-only"}, "SECRET_KEY has 18 characters"),
    ],
)
def test_a_malformed_setting_stops_manage_py_with_one_line(tmp_path: Path, extra: dict[str, str], words: str) -> None:
    env = production_env(tmp_path, **extra)
    if not extra.get("SECRET_KEY", "x"):
        env.pop("SECRET_KEY")
    done = _manage(env, "check")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "", done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("manage.py: configuration: "), line
    assert words in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"FAIRWAY_TICK_INTERVAL_S": "abc"}, "FAIRWAY_TICK_INTERVAL_S='abc' is not a number"),
        ({"SECRET_KEY": ""}, "FAIRWAY_ENV=production needs SECRET_KEY"),
    ],
)
def test_a_malformed_setting_stops_the_web_process_with_one_line(
    tmp_path: Path, extra: dict[str, str], words: str
) -> None:
    """ops48: the Procfile's web process (uvicorn importing config.asgi) printed Django's traceback."""
    env = production_env(tmp_path, **extra)
    if not extra.get("SECRET_KEY", "x"):
        env.pop("SECRET_KEY")
    done = subprocess.run(  # noqa: S603 -- uvicorn on our own ASGI module, fixed arguments
        [sys.executable, "-m", "uvicorn", "config.asgi:application", "--port", "19411", "--lifespan", "off"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "", done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("config.asgi: configuration: "), line
    assert words in line, line


def test_a_good_configuration_still_runs_the_command(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRWAY_", "DJANGO_"))}
    env.update(FAIRWAY_VAR_DIR=str(tmp_path), DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    env.pop("REDIS_URL", None)
    done = _manage(env, "check")
    assert done.returncode == 0 and "no issues" in done.stdout, done.stderr
