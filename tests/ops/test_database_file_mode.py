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
