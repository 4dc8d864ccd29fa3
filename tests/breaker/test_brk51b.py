"""brk51b: the web side given hostile values.

- A short or simple ``SECRET_KEY`` (``manage.py check --deploy``'s W009: under 50 characters or
  under 5 distinct ones) started production as it stood: sessions, CSRF tokens and password-reset
  links are signed with it. It is refused at start by name when DEBUG is off; the Containerfile's
  collectstatic step uses a long throwaway key.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.breaker.test_break26 import load_settings

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION = {"FAIRWAY_ENV": "production", "ALLOWED_HOSTS": "fairway.example.org", "DEBUG": "false"}


@pytest.mark.parametrize("key", ["collectstatic-only", "s3cr3t", "x" * 60, "abcd" * 20, "k" * 45 + "abcd"])
def test_production_refuses_a_short_or_simple_secret_key_by_name(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"^SECRET_KEY .*50\+ .*5\+ distinct"):
        load_settings(monkeypatch, **PRODUCTION, SECRET_KEY=key)


def test_production_takes_a_long_random_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = secrets.token_urlsafe(60)
    assert load_settings(monkeypatch, **PRODUCTION, SECRET_KEY=key)["SECRET_KEY"] == key


def test_development_keeps_a_short_secret_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings(monkeypatch, FAIRWAY_ENV="development", SECRET_KEY="dev")["SECRET_KEY"] == "dev"


def test_the_containerfile_collects_static_files_with_a_key_production_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    containerfile = (ROOT / "Containerfile").read_text()
    (key,) = re.findall(r"SECRET_KEY=(\S+)", containerfile)
    assert load_settings(monkeypatch, **PRODUCTION, SECRET_KEY=key)["SECRET_KEY"] == key
