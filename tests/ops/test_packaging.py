"""Packaging: the extras mirror the requirements files, the wheel ships no server package, the lock
has hashes, and the server serves a CLI wheel and its one-line install."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from setuptools import find_packages

from fairway_cli import __version__ as CLI_VERSION
from scheduler import cli_install

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SERVER_PACKAGES = {"config", "web", "scheduler", "budgets", "accounts", "bench", "tests", "scripts"}


def pins(path: Path) -> dict[str, str]:
    """name (lower-case, extras dropped) → full requirement, from a requirements file (no -r lines)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            out[re.split(r"[\[=<>!~ ]", line, maxsplit=1)[0].lower()] = line
    return out


def extra(name: str) -> dict[str, str]:
    return {
        re.split(r"[\[=<>!~ ]", r, maxsplit=1)[0].lower(): r for r in PROJECT["project"]["optional-dependencies"][name]
    }


def test_extras_mirror_the_requirements_files():
    assert set(PROJECT["project"]["optional-dependencies"]) == {"server", "agent", "cli", "sim"}
    assert extra("server") == pins(ROOT / "requirements.txt")
    assert extra("agent") == pins(ROOT / "agent" / "requirements.txt")
    dev = pins(ROOT / "requirements-dev.txt")
    for name in ("cli", "sim"):
        for dist, requirement in extra(name).items():
            assert dev[dist] == requirement
    assert "matplotlib" not in pins(ROOT / "requirements.txt")  # plotting only in the sim extra
    assert set(extra("sim")) == {"matplotlib"}


def test_the_wheel_ships_only_the_cli_and_the_agent():
    find = PROJECT["tool"]["setuptools"]["packages"]["find"]
    top = {p.split(".")[0] for p in find_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ()))}
    assert top == {"fairway_cli", "agent", "fairway_common"}
    assert not top & SERVER_PACKAGES
    scripts = PROJECT["project"]["scripts"]
    assert {s.split(":")[0].split(".")[0] for s in scripts.values()} <= top


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-server.lock"])
def test_the_locks_pin_everything_with_hashes(lock):
    text = (ROOT / lock).read_text()
    entries = re.findall(
        r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^ \\\n]+)((?:\s*\\\n\s+--hash=sha256:[0-9a-f]{64})+)",
        text,
        re.M,
    )
    names = {e[0].lower().replace("_", "-") for e in entries}
    assert len(entries) == len(re.findall(r"^[A-Za-z0-9]", text, re.M)), "every requirement pinned with hashes"
    top = pins(ROOT / "requirements.txt")
    if lock == "requirements.lock":
        top |= pins(ROOT / "requirements-dev.txt") | pins(ROOT / "agent" / "requirements.txt")
    for name, requirement in top.items():
        assert name.replace("_", "-") in names, f"{name} missing from {lock}"
        version = requirement.split("==", 1)[1].split(";")[0].strip()
        assert any(e[0].lower().replace("_", "-") == name.replace("_", "-") and e[2] == version for e in entries), name
    if lock == "requirements-server.lock":
        assert "matplotlib" not in names and "pytest" not in names


def test_make_installs_from_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r requirements.lock" in makefile


def test_cli_wheel_is_served_with_only_the_cli(client):
    answer = client.get("/cli/fairway-cli.whl")
    assert answer.status_code == 200
    assert answer["Content-Disposition"] == f'attachment; filename="fairway_cli-{CLI_VERSION}-py3-none-any.whl"'
    assert client.get(f"/cli/{cli_install.WHEEL_NAME}").content == answer.content
    archive = zipfile.ZipFile(io.BytesIO(answer.content))
    tops = {name.split("/")[0] for name in archive.namelist()}
    assert tops == {"fairway_cli", "fairway_common", f"fairway_cli-{CLI_VERSION}.dist-info"}
    metadata = archive.read(f"fairway_cli-{CLI_VERSION}.dist-info/METADATA").decode()
    assert "Requires-Dist: requests==" in metadata
    assert f"Version: {CLI_VERSION}" in metadata
    assert cli_install.build_wheel() == answer.content  # reproducible


def test_cli_wheel_installs_and_reports_its_version(client, tmp_path):
    wheel = tmp_path / cli_install.WHEEL_NAME
    wheel.write_bytes(client.get("/cli/fairway-cli.whl").content)
    target = tmp_path / "site"
    done = subprocess.run(  # noqa: S603 -- pip of this interpreter, fixed arguments
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    installed = sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info"))
    assert installed == ["bin", "fairway_cli", "fairway_common"]
    version = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "fairway_cli", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
    )
    assert version.stdout.strip() == f"fairway {CLI_VERSION}", version.stderr


def test_cli_install_script(client):
    answer = client.get("/cli/install.sh")
    assert answer.status_code == 200
    script = answer.content.decode()
    assert "SERVER_URL='http://testserver'" in script
    assert f"WHEEL_NAME={cli_install.WHEEL_NAME}" in script
    assert "@@" not in script
    if shutil.which("bash"):
        assert subprocess.run(["bash", "-n"], input=script, text=True, timeout=30).returncode == 0  # noqa: S603,S607
