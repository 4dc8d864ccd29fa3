"""brk51: settings given garbage stop every process at start with one line naming the variable.

Each was taken before its fix, and failed later:

- ``FAIRWAY_PUBLIC_URL=http://[::1`` (a bracket left open) or a port past 65535 passed the URL's
  pattern; ``POST /agent/join`` then registered the host and spent the join token before its
  answer's ``websocket_url`` raised ``ValueError`` (a 500: the host token lost, the name taken).
- ``FAIRWAY_STATIC_ROOT`` under a missing directory, or naming a file, was a ``FileNotFoundError`` /
  ``FileExistsError`` traceback from ``settings.py`` (``FAIRWAY_VAR_DIR`` is refused by name).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.private_file import owner_only
from tests.breaker.test_break26 import load_settings


@pytest.mark.parametrize(
    "url", ["http://[::1", "https://[zz]:443", "http://fairway.example.org:99999", "https://fairway:8x", "http://:80"]
)
def test_a_public_url_that_names_no_server_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_PUBLIC_URL=.* is not an http\(s\) URL"):
        load_settings(monkeypatch, FAIRWAY_PUBLIC_URL=url)


@pytest.mark.parametrize(
    "url", ["https://fairway.example.org", "http://[::1]:8000", "http://10.0.0.5:8000/fairway/", "https://h:65535"]
)
def test_a_public_url_with_a_server_is_taken(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    assert load_settings(monkeypatch, FAIRWAY_PUBLIC_URL=url)["FAIRWAY"]["PUBLIC_URL"] == url


def test_a_static_root_that_cannot_be_made_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "static"
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_STATIC_ROOT=.* cannot be created"):
        load_settings(monkeypatch, FAIRWAY_STATIC_ROOT=str(missing))
    assert not (tmp_path / "no").exists()  # nothing made
    a_file = tmp_path / "static"
    a_file.write_text("")
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_STATIC_ROOT=.* is not a directory"):
        load_settings(monkeypatch, FAIRWAY_STATIC_ROOT=str(a_file))
    made = tmp_path / "made"
    assert load_settings(monkeypatch, FAIRWAY_STATIC_ROOT=str(made))["STATIC_ROOT"] == made and made.is_dir()


@pytest.mark.parametrize("token", [" ", "s3cret ", " s3cret", "s3crét", "s3\tcret", "s3cret\u200b"])
def test_a_metrics_token_no_scrape_can_send_is_refused_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch, token: str
) -> None:
    """Taken before, it answered every scrape 401 for good: a blank at an end is cut from the
    header before the comparison, and a header's non-ASCII byte reads as Latin-1."""
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_METRICS_TOKEN holds ") as refused:
        load_settings(monkeypatch, FAIRWAY_METRICS_TOKEN=token)
    assert "s3c" not in str(refused.value)  # a secret: never in a log line


@pytest.mark.parametrize("token", ["s3cret", "a-b_c.d~e!", "two words"])
def test_a_metrics_token_of_printable_ascii_is_taken(monkeypatch: pytest.MonkeyPatch, token: str) -> None:
    assert load_settings(monkeypatch, FAIRWAY_METRICS_TOKEN=token)["FAIRWAY_METRICS_TOKEN"] == token


def test_a_metrics_token_with_a_blank_inside_authorizes_its_scrape(client: object, settings: object, db: None) -> None:
    settings.FAIRWAY_METRICS_TOKEN = "two words"  # type: ignore[attr-defined]
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer two words").status_code == 200  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "origins", ["fairway.example.org", "https://fairway.example.org,fairway.example.org", "https://"]
)
def test_a_trusted_origin_without_scheme_and_host_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, origins: str
) -> None:
    """Django's own check (4_0.E001) stops manage.py commands, but the web process runs no checks
    (uvicorn imports config.asgi; web_preflight asks none): it started and took no origin from it."""
    with pytest.raises(ImproperlyConfigured, match=r"^CSRF_TRUSTED_ORIGINS=.* is not an origin such as https://"):
        load_settings(monkeypatch, CSRF_TRUSTED_ORIGINS=origins)


def test_trusted_origins_with_schemes_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    origins = "https://fairway.example.org, http://10.0.0.5:8000,https://*.example.org"
    assert load_settings(monkeypatch, CSRF_TRUSTED_ORIGINS=origins)["CSRF_TRUSTED_ORIGINS"] == [
        "https://fairway.example.org",
        "http://10.0.0.5:8000",
        "https://*.example.org",
    ]


@pytest.fixture
def _umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.parametrize("kind", ["directory", "text file", "sticky directory"])
def test_a_sqlite_url_naming_no_database_is_refused_and_its_mode_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str, _umask_022: None
) -> None:
    """The settings made whatever the path named owner-only before SQLite opened it (a database
    made 0644 by an earlier version): as root, ``sqlite:////etc/passwd`` made /etc/passwd 0600
    (no login but root's could read the user names) and ``sqlite:////tmp`` made /tmp 0700."""
    target = tmp_path / "named"
    mode = 0o644
    if kind == "text file":
        target.write_text("root:x:0:0:root:/root:/bin/bash\n")
    else:
        target.mkdir()
        mode = 0o1777 if kind == "sticky directory" else 0o755
    target.chmod(mode)
    with pytest.raises(
        ImproperlyConfigured, match=r"^DATABASE_URL names .*named.*, which is (a directory|not an SQLite)"
    ):
        load_settings(monkeypatch, DATABASE_URL=f"sqlite:///{target}")
    assert target.stat().st_mode & 0o7777 == mode


def test_a_sqlite_url_in_a_missing_directory_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """It started, and every process's first query failed: ``OperationalError: unable to open
    database file`` (a traceback from ``manage.py migrate``)."""
    with pytest.raises(ImproperlyConfigured, match=r"^DATABASE_URL names .*, whose directory .* does not exist"):
        load_settings(monkeypatch, DATABASE_URL=f"sqlite:///{tmp_path}/no/such/fairway.sqlite3")
    assert not (tmp_path / "no").exists()


def test_a_sqlite_database_or_a_new_file_is_taken(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, _umask_022: None
) -> None:
    db = tmp_path / "old.sqlite3"
    sqlite3.connect(db).execute("create table t (x)").connection.close()
    assert db.stat().st_mode & 0o777 == 0o644
    load_settings(monkeypatch, DATABASE_URL=f"sqlite:///{db}")
    assert db.stat().st_mode & 0o777 == 0o600  # break27's repair kept
    new = tmp_path / "new.sqlite3"
    load_settings(monkeypatch, DATABASE_URL=f"sqlite:///{new}")
    assert new.stat().st_mode & 0o777 == 0o600 and new.stat().st_size == 0


def test_owner_only_changes_no_directory(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    owner_only(shared)
    assert shared.stat().st_mode & 0o7777 == 0o1777


@pytest.mark.parametrize("kind", ["unwritable", "a directory", "empty", "not UTF-8"])
def test_a_var_dir_without_a_usable_secret_key_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    """Without SECRET_KEY the key is read from (or first written to) $FAIRWAY_VAR_DIR/secret_key:
    a directory the process cannot write (/proc here, a read-only volume, another user's) was a
    FileNotFoundError / PermissionError traceback, a directory named secret_key an
    IsADirectoryError, and an empty file started with an empty key (Django's refusal at the first
    request that signs anything)."""
    monkeypatch.delenv("SECRET_KEY", raising=False)
    var = Path("/proc") if kind == "unwritable" else tmp_path
    if kind == "a directory":
        (tmp_path / "secret_key").mkdir()
    elif kind == "empty":
        (tmp_path / "secret_key").write_text("\n")
    elif kind == "not UTF-8":
        (tmp_path / "secret_key").write_bytes(b"\xff\xfe")
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_VAR_DIR=.*secret_key.*set SECRET_KEY"):
        load_settings(monkeypatch, FAIRWAY_VAR_DIR=str(var))


def _sso_env(**over: str) -> dict[str, str]:
    env = {
        "FAIRWAY_OIDC_CLIENT_ID": "fairway",
        "FAIRWAY_OIDC_CLIENT_SECRET": "s3cret",
        "FAIRWAY_OIDC_ISSUER": "https://idp.example.org",
        "FAIRWAY_OIDC_AUTHORIZATION_ENDPOINT": "https://idp.example.org/authorize",
        "FAIRWAY_OIDC_TOKEN_ENDPOINT": "https://idp.example.org/token",
        "FAIRWAY_OIDC_USERINFO_ENDPOINT": "https://idp.example.org/userinfo",
        "FAIRWAY_OIDC_JWKS_ENDPOINT": "https://idp.example.org/jwks",
    }
    return {**env, **over}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FAIRWAY_OIDC_TOKEN_ENDPOINT", "idp.example.org/token"),
        ("FAIRWAY_OIDC_AUTHORIZATION_ENDPOINT", "/authorize"),
        ("FAIRWAY_OIDC_JWKS_ENDPOINT", "https://[idp/jwks"),
        ("FAIRWAY_OIDC_USERINFO_ENDPOINT", "ftp://idp.example.org/userinfo"),
        ("FAIRWAY_OIDC_ISSUER", "idp.example.org"),
    ],
)
def test_an_sso_endpoint_that_is_no_url_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    """Taken before: the login redirected the browser to a path of Fairway's own (a 404), or the
    callback's request to the provider raised MissingSchema / InvalidURL (a 500), at every login."""
    with pytest.raises(ImproperlyConfigured, match=rf"^{name}=.* is not an http\(s\) URL"):
        load_settings(monkeypatch, **_sso_env(**{name: value}))


@pytest.mark.parametrize("algo", ["XYZ", "none", "rs256", "PS256", "RS256 "])
def test_an_sso_signing_algorithm_the_library_cannot_check_is_refused(
    monkeypatch: pytest.MonkeyPatch, algo: str
) -> None:
    """Taken before: every login failed at the callback ("The provider algorithm 'RS256' does not
    match the client's OIDC_RP_SIGN_ALGO"; with ``none`` PyJWT's InvalidKeyError, a 500)."""
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_OIDC_SIGN_ALGO=.* is not one of RS256"):
        load_settings(monkeypatch, **_sso_env(FAIRWAY_OIDC_SIGN_ALGO=algo))


def test_a_whole_sso_configuration_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    conf = load_settings(monkeypatch, **_sso_env(FAIRWAY_OIDC_SIGN_ALGO="ES256"))
    assert conf["OIDC_OP_TOKEN_ENDPOINT"] == "https://idp.example.org/token" and conf["OIDC_RP_SIGN_ALGO"] == "ES256"
    monkeypatch.delenv("FAIRWAY_OIDC_SIGN_ALGO")
    assert load_settings(monkeypatch, **_sso_env())["OIDC_RP_SIGN_ALGO"] == "RS256"


@pytest.mark.parametrize("sender", ["fairway", "not an address", "a@b@c", '"Fairway" <>', "fairway@"])
def test_a_notification_sender_that_is_no_address_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, sender: str
) -> None:
    """Taken before: every email notification went out with it, the mail server refused each (no
    sender address), and each ended failed after its tries with a warning in the worker's log."""
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_NOTIFY_FROM_EMAIL=.* is not an email address"):
        load_settings(monkeypatch, FAIRWAY_NOTIFY_FROM_EMAIL=sender)


@pytest.mark.parametrize("sender", ["fairway@localhost", "Fairway <fairway@lab.example.org>", "gpu-bot@cs.example.edu"])
def test_a_notification_sender_address_is_taken(monkeypatch: pytest.MonkeyPatch, sender: str) -> None:
    assert load_settings(monkeypatch, FAIRWAY_NOTIFY_FROM_EMAIL=sender)["FAIRWAY"]["NOTIFY_FROM_EMAIL"] == sender


@pytest.mark.parametrize(
    "hosts",
    [
        "https://fairway.example.org",
        "fairway.example.org/",
        "fairway.example.org,http://10.0.0.5:8000",
        " , ",
        "h:8000",
    ],
)
def test_allowed_hosts_that_no_host_header_matches_stop_the_start(monkeypatch: pytest.MonkeyPatch, hosts: str) -> None:
    """Taken before: an entry written as a URL (as CSRF_TRUSTED_ORIGINS is) or with a port (Django
    matches the Host header without its port) matches no Host header, and a list of blanks names
    none, so every request but those to another entry was a 400 (DisallowedHost) and Django's
    checks say nothing of it."""
    with pytest.raises(ImproperlyConfigured, match=r"^ALLOWED_HOSTS="):
        load_settings(monkeypatch, ALLOWED_HOSTS=hosts)


def test_allowed_hosts_of_names_addresses_and_patterns_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = "fairway.example.org, .example.org,10.0.0.5,[::1],*"
    assert load_settings(monkeypatch, ALLOWED_HOSTS=hosts)["ALLOWED_HOSTS"] == [
        "fairway.example.org",
        ".example.org",
        "10.0.0.5",
        "[::1]",
        "*",
    ]
