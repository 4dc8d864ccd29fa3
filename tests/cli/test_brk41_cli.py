"""brk41: ``fairway login`` with a personal token that does not stand in the process list."""

from __future__ import annotations

from tests.cli.test_cli import cli  # noqa: F401 -- the fixture (the CLI against the live server)


def test_login_reads_the_token_from_stdin_not_from_the_command_line(cli, researcher, cluster, api_client_for):  # noqa: F811
    """brk40 leftover: ``fairway login --token TOKEN`` was the only way to log in with a personal
    token, and the token stood in the process list (``ps``, /proc/PID/cmdline) for every user of
    the machine. ``--token -`` and ``--token`` alone read it from standard input (a prompt without
    echo on a terminal); an empty one is a usage error that saves nothing; ``--token TOKEN`` still
    works and its help says it is visible."""
    from fairway_cli.cli import EXIT_AUTH, EXIT_OK, EXIT_USAGE

    def new_token() -> str:
        return str(api_client_for(researcher).post("/api/v1/tokens/", {"name": "cli"}, format="json").json()["token"])

    token = new_token()
    code, out, err = cli("login", "--token", "-", stdin=f"{token}\n")
    assert code == EXIT_OK, err
    assert "as researcher" in out and token not in out + err
    assert cli("whoami")[1].startswith("researcher on ")
    assert cli("logout")[0] == EXIT_OK  # forgets it here, keeps it on the server (tryout48)
    token = new_token()
    code, out, err = cli("login", "--token", stdin=f"  {token}  \n")  # pasted with blanks
    assert code == EXIT_OK, err
    assert cli("logout")[0] == EXIT_OK
    token = new_token()
    code, _out, err = cli("login", "--token", "-", stdin="\n")
    assert code == EXIT_USAGE and "no token on standard input" in err
    assert cli("whoami")[0] == EXIT_AUTH
    assert cli("login", "--token", token)[0] == EXIT_OK  # still accepted
    login_help = _subcommand_help("login")
    assert "--token -" in login_help and "process list" in login_help


def test_login_prompts_for_the_token_without_echo_on_a_terminal(monkeypatch):
    import getpass
    import io
    import sys

    from fairway_cli.cli import read_token

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    asked: list[str] = []
    monkeypatch.setattr(sys, "stdin", Tty(""))
    monkeypatch.setattr(getpass, "getpass", lambda prompt: asked.append(prompt) or " tok ")
    assert read_token() == "tok" and asked == ["token: "]


def _subcommand_help(name: str) -> str:
    import argparse

    from fairway_cli.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return " ".join(sub.choices[name].format_help().split())
