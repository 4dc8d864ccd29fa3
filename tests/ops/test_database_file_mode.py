"""The default SQLite database is readable only by its owner (config/private_file.py)."""

from __future__ import annotations

import os
import runpy
import sqlite3
from pathlib import Path

import pytest

SETTINGS = Path(__file__).resolve().parents[2] / "config" / "settings.py"


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_the_default_database_is_created_readable_only_by_its_owner(tmp_path, monkeypatch, umask_022):
    """break27: var/fairway.sqlite3 was created 0644 (by SQLite, at migrate) in a 0755 directory
    while workloads may run on the same machine: any workload read every session key and every
    secret env value from it."""
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("FAIRWAY_VAR_DIR", str(tmp_path))
    name = runpy.run_path(str(SETTINGS))["DATABASES"]["default"]["NAME"]
    assert Path(name) == tmp_path / "fairway.sqlite3"
    sqlite3.connect(name).execute("create table t (x)").connection.close()  # what migrate does
    assert (tmp_path / "fairway.sqlite3").stat().st_mode & 0o777 == 0o600


def test_a_database_created_0644_before_is_made_0600(tmp_path, monkeypatch, umask_022):
    db = tmp_path / "fairway.sqlite3"
    sqlite3.connect(db).close()
    assert db.stat().st_mode & 0o777 == 0o644
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("FAIRWAY_VAR_DIR", str(tmp_path))
    runpy.run_path(str(SETTINGS))
    assert db.stat().st_mode & 0o777 == 0o600


def test_the_generated_secret_key_is_never_readable_by_others(tmp_path, monkeypatch, umask_022):
    """ops30: var/secret_key was written 0644 and only then chmod 0600: a workload on the machine
    could read it in between (or for good, had the process died there) and forge admin sessions."""
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("FAIRWAY_VAR_DIR", str(tmp_path))
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)  # the mode must come from the creation
    key = runpy.run_path(str(SETTINGS))["SECRET_KEY"]
    path = tmp_path / "secret_key"
    assert path.stat().st_mode & 0o777 == 0o600 and path.read_text().strip() == key and len(key) >= 50
    assert runpy.run_path(str(SETTINGS))["SECRET_KEY"] == key  # generated once
    assert sorted(p.name for p in tmp_path.iterdir() if "secret" in p.name) == ["secret_key"]


def test_a_secret_key_file_created_0644_before_is_made_0600(tmp_path, monkeypatch, umask_022):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    monkeypatch.setenv("FAIRWAY_VAR_DIR", str(tmp_path))
    (tmp_path / "secret_key").write_text("k" * 60 + "\n")
    assert runpy.run_path(str(SETTINGS))["SECRET_KEY"] == "k" * 60
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
