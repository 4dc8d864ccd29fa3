"""tryout48: ``fairway login --token - < token.txt`` then ``fairway logout`` deleted the personal
token on the server ("logged out (the token was deleted on the server)"): the token made on the
tokens page for scripts, which CI and other machines still used, stopped working everywhere. A
logout forgets a personal token here and keeps it on the server (revoking it is the tokens page's
act); a password login's token, made for this machine alone, is deleted on the server as before."""

from __future__ import annotations

import json

from rest_framework.test import APIClient

from fairway_cli.cli import EXIT_AUTH, EXIT_OK
from tests.cli.test_cli import cli  # noqa: F401 -- the live-server fixture
from tests.conftest import PASSWORD


def _works(token: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client.get("/api/v1/me/").status_code == 200


def test_logout_of_a_personal_token_keeps_it_on_the_server(cli, researcher, cluster, api_client_for, live_server):  # noqa: F811
    made = api_client_for(researcher).post("/api/v1/tokens/", {"name": "ci"}, format="json").json()
    assert cli("login", "--token", "-", stdin=made["token"] + "\n")[0] == EXIT_OK

    code, out, err = cli("logout")

    assert (code, err) == (EXIT_OK, "")
    assert _works(made["token"])  # CI's copy still works
    assert out == (
        f"logged out here; the personal token ci still works on {live_server.url} for whoever holds it "
        f"(revoke it on {live_server.url}/tokens/)\n"
    )
    assert cli("whoami")[0] == EXIT_AUTH  # forgotten here


def test_logout_of_a_password_login_deletes_its_token(cli, researcher, cluster, tmp_path):  # noqa: F811
    assert cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK
    token = json.loads((tmp_path / "config.json").read_text())["token"]

    code, out, _err = cli("logout")

    assert (code, out) == (EXIT_OK, "logged out (the token was deleted on the server)\n")
    assert not _works(token)


def test_logout_with_a_token_the_server_no_longer_takes_forgets_it_here(cli, researcher, cluster, tmp_path):  # noqa: F811
    """A token revoked or expired on the server (401): the logout still forgets it here and says so,
    exit 0; it stopped with "not logged in" and kept the dead token (break48b)."""
    assert cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK
    token = json.loads((tmp_path / "config.json").read_text())["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.post("/api/v1/auth/logout/", {}, format="json").status_code == 204  # gone on the server

    code, out, err = cli("logout")

    assert (code, err) == (EXIT_OK, "")
    assert out == "logged out here (the server no longer takes this token)\n"
    assert json.loads((tmp_path / "config.json").read_text()).get("token", "") == ""


def test_a_second_logout_says_there_was_no_token(cli, researcher, cluster, live_server):  # noqa: F811
    """try50b: ``fairway logout`` twice said "logged out here (the server no longer takes this
    token)" the second time, of a token it had already forgotten: none was saved."""
    assert cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK
    assert cli("logout")[0] == EXIT_OK

    code, out, err = cli("logout")

    assert (code, err) == (EXIT_OK, "")
    assert out == f"not logged in to {live_server.url}: nothing to log out\n"
