"""Production settings: ``manage.py check --deploy`` is clean with the production environment."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def production_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SECURE_", "DJANGO_", "FAIRWAY_"))}
    env.update(
        FAIRWAY_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="fairway.example.org",
        CSRF_TRUSTED_ORIGINS="https://fairway.example.org",
        DATABASE_URL=f"sqlite:///{tmp_path / 'deploy.sqlite3'}",
        FAIRWAY_VAR_DIR=str(tmp_path),
        DEBUG="false",
        FAIRWAY_METRICS_TOKEN=secrets.token_urlsafe(32),
    )
    env.update(extra)
    env.pop("REDIS_URL", None)
    return env


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 -- our own manage.py, fixed arguments
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_the_production_environment(tmp_path):
    done = manage(production_env(tmp_path), "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    assert "WARNINGS" not in done.stdout + done.stderr


def test_production_settings_values(tmp_path):
    code = (
        "from django.conf import settings as s;"
        "print(s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE,"
        " s.SECURE_PROXY_SSL_HEADER, s.DEBUG, s.STORAGES['staticfiles']['BACKEND'])"
    )
    done = manage(production_env(tmp_path), "shell", "-v", "0", "-c", code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].split() == [
        "True",
        "31536000",
        "True",
        "True",
        "('HTTP_X_FORWARDED_PROTO',",
        "'https')",
        "False",
        "whitenoise.storage.CompressedManifestStaticFilesStorage",
    ]


def test_the_development_default_warns_and_production_needs_a_secret_key(tmp_path):
    env = production_env(tmp_path, FAIRWAY_ENV="development")
    done = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode != 0 and "security.W004" in done.stderr + done.stdout  # no HSTS outside production
    env = production_env(tmp_path)
    env.pop("SECRET_KEY")
    done = manage(env, "check")
    assert done.returncode != 0 and "SECRET_KEY" in done.stderr


def example_env() -> dict[str, str]:
    """deploy/fairway.env.example's variables, as systemd's EnvironmentFile and compose read them."""
    lines = (ROOT / "deploy" / "fairway.env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_the_example_environment_file_does_not_start_until_a_secret_key_is_set(tmp_path):
    """ops30: the example's placeholder SECRET_KEY (`change-me-…`) started production as it stood,
    with a key anyone who read the repository knew (only `check --deploy` warned)."""
    example = {k: v for k, v in example_env().items() if k not in {"DATABASE_URL", "REDIS_URL"}}  # no server here
    env = production_env(tmp_path, **example)
    assert env["FAIRWAY_ENV"] == "production"
    done = manage(env, "check")
    assert done.returncode != 0 and "SECRET_KEY" in done.stderr, done.stdout + done.stderr
    done = manage(production_env(tmp_path, SECRET_KEY="change-me-" + secrets.token_urlsafe(50)), "check")
    assert done.returncode != 0 and "SECRET_KEY" in done.stderr, done.stdout + done.stderr
    env["SECRET_KEY"] = secrets.token_urlsafe(60)
    done = manage(env, "check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_deploy_warns_when_metrics_is_open_in_production(tmp_path):
    """ops30b: without FAIRWAY_METRICS_TOKEN /metrics answers anyone (cluster names, queue sizes,
    budget figures); production gave no sign of it. `check --deploy` now warns; `check` does not."""
    env = production_env(tmp_path)
    env.pop("FAIRWAY_METRICS_TOKEN")
    done = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "scheduler.W001" in done.stderr and "FAIRWAY_METRICS_TOKEN" in done.stderr, done.stderr
    done = manage(env, "check", "--fail-level", "WARNING")
    assert done.returncode == 0 and "scheduler.W001" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_metrics_token_check_alone(settings):
    from scheduler.checks import metrics_token_set

    settings.PRODUCTION, settings.FAIRWAY_METRICS_TOKEN = True, ""
    assert [w.id for w in metrics_token_set(None)] == ["scheduler.W001"]
    settings.FAIRWAY_METRICS_TOKEN = "s3cret-scrape"
    assert metrics_token_set(None) == []
    settings.PRODUCTION, settings.FAIRWAY_METRICS_TOKEN = False, ""
    assert metrics_token_set(None) == []  # development: /metrics open on purpose (the demo's Prometheus)
