"""deploy48: two CLI leftovers. ``fairway logout --json`` printed its plain sentence where every
other ``--json`` command prints JSON; ``fairway hosts gpu3`` of a host removed today said the full
date ("Dec 7 2026 14:05:09 UTC") where every other live message says only the time for today
(``fairway_cli.numbers.instant_text``, the one wording of an instant)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from fairway_cli.cli import EXIT_OK
from fairway_cli.numbers import instant_text
from scheduler.models import Host
from tests.cli.inprocess import run_cli
from tests.cli.test_cli import cli  # noqa: F401 -- the live-server fixture
from tests.conftest import PASSWORD


def test_logout_json_prints_json(cli, researcher, cluster, api_client_for, live_server):  # noqa: F811
    assert cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK
    code, out, err = cli("--json", "logout")
    assert (code, err) == (EXIT_OK, "")
    assert json.loads(out) == {"server": live_server.url, "logged_out": True, "token_deleted": True}

    made = api_client_for(researcher).post("/api/v1/tokens/", {"name": "ci"}, format="json").json()
    assert cli("login", "--token", "-", stdin=made["token"] + "\n")[0] == EXIT_OK
    code, out, err = cli("--json", "logout")
    assert (code, err) == (EXIT_OK, "")
    assert json.loads(out) == {
        "server": live_server.url,
        "logged_out": True,
        "token_deleted": False,
        "kept_token": "ci",
    }


def test_a_host_removed_today_is_named_with_todays_time(monkeypatch, admin, admin_client_api, hosts):
    admin_client_api.post("/api/v1/hosts/a100-1/remove/", {"reason": "sold"}, format="json")
    removed_at = Host.objects.get(name="a100-1").removed_at
    assert removed_at is not None and removed_at.date() == datetime.now(UTC).date()

    err = run_cli(monkeypatch, admin, "hosts", "a100-1", expect=1)

    assert f"removed from cluster default at {instant_text(removed_at)};" in err, err
    assert str(removed_at.year) not in err, err
