"""The served one-line CLI install, run for real: ``curl SERVER/cli/install.sh | bash`` into a temporary
prefix against a live server, offline (the CLI's dependencies from a local wheelhouse)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest

from fairway_cli import __version__ as CLI_VERSION
from tests.e2e.wheelhouse import repackage

BASH = shutil.which("bash") or "bash"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def cli_wheelhouse(dest: Path) -> Path:
    """Wheels of the CLI's dependencies and what they require, repackaged from this environment."""
    dest.mkdir(parents=True, exist_ok=True)
    todo, seen = ["requests", "PyYAML"], set()
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        repackage(dist, dest)
        todo += [
            re.split(r"[=<>!~;\[ (]", r.strip(), maxsplit=1)[0] for r in dist.requires or [] if "extra ==" not in r
        ]
    return dest


def test_the_served_install_script_installs_a_working_fairway(live_server, tmp_path):
    script = urllib.request.urlopen(f"{live_server.url}/cli/install.sh", timeout=30).read()  # noqa: S310
    prefix, bin_dir = tmp_path / "share", tmp_path / "bin"
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON", "FAIRWAY_", "XDG_CONFIG_HOME"))
        },
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(cli_wheelhouse(tmp_path / "wheels")),
        "PIP_CONFIG_FILE": os.devnull,
        "HOME": str(tmp_path),
    }
    done = subprocess.run(  # noqa: S603 -- bash runs the script this server just served
        [BASH, "-s", "--", "--prefix", str(prefix), "--bin-dir", str(bin_dir), "--python", sys.executable],
        input=script,
        capture_output=True,
        env=env,
        timeout=240,
    )
    out = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, out
    assert f"installed: fairway {CLI_VERSION}" in out
    # tryout45: the server it came from is the CLI's default, so `fairway login -u X` goes there
    config = tmp_path / ".config" / "fairway" / "config.json"
    assert json.loads(config.read_text()) == {"server": live_server.url, "token": ""}
    assert f"saved {live_server.url} as the default server in {config}" in out
    assert "next: fairway login\n" in out
    fairway = bin_dir / "fairway"
    assert fairway.is_symlink()
    version = subprocess.run([str(fairway), "--version"], capture_output=True, text=True, timeout=60)  # noqa: S603
    assert version.stdout.strip() == f"fairway {CLI_VERSION}"
    # tryout36: the wheel did not require PyYAML, so `fairway submit -f job.yaml` was a traceback
    spec = tmp_path / "job.yaml"
    spec.write_text("name: a\nname: b\n")
    submit = subprocess.run(  # noqa: S603
        [str(fairway), "--server", live_server.url, "submit", "-f", str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "FAIRWAY_TOKEN": "x", "FAIRWAY_CONFIG": str(tmp_path / "config.json")},
    )
    assert "Traceback" not in submit.stderr and "given twice" in submit.stderr, submit.stderr
    site = next((prefix / "venv" / "lib").glob("python3*/site-packages"))
    assert not {"config", "web", "scheduler", "agent"} & {p.name for p in site.iterdir()}

    # installed again from another address: the server the config names stays
    config.write_text(json.dumps({"server": "https://mine.example.org", "token": ""}))
    upgrade = subprocess.run(  # noqa: S603 -- bash runs the script this server just served
        [BASH, "-s", "--", "--prefix", str(prefix), "--bin-dir", str(bin_dir), "--python", sys.executable],
        input=script,
        capture_output=True,
        env=env,
        timeout=240,
    )
    assert upgrade.returncode == 0, upgrade.stderr
    assert json.loads(config.read_text())["server"] == "https://mine.example.org"
    assert f"next: fairway --server {live_server.url} login" in upgrade.stdout.decode()

    again = subprocess.run(  # noqa: S603 -- the uninstall path
        [BASH, "-s", "--", "--uninstall", "--prefix", str(prefix), "--bin-dir", str(bin_dir)],
        input=script,
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr
    assert not fairway.exists() and not (prefix / "venv").exists()
