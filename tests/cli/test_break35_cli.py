"""brk35: the CLI's saved token (shared login hosts: other users must not read it)."""

from __future__ import annotations

import json
import os

from fairway_cli.cli import Config


def test_a_token_saved_over_a_config_others_may_read_is_readable_only_by_its_owner(tmp_path, monkeypatch):
    """``os.open(..., O_CREAT, 0o600)`` sets the mode only of a file it creates: a config that
    already existed world-readable (copied from another machine, made by an editor or a
    configuration tool with the umask's 0644) kept its mode, and the token written into it was
    readable by every user of a shared login host."""
    path = tmp_path / "fairway" / "config.json"
    path.parent.mkdir()
    path.write_text('{"server": "http://fairway:8000"}')
    os.chmod(path, 0o644)
    monkeypatch.setenv("FAIRWAY_CONFIG", str(path))

    Config(server="http://fairway:8000", token="secret-token").save()

    assert json.loads(path.read_text())["token"] == "secret-token"
    assert path.stat().st_mode & 0o077 == 0


def test_a_config_that_cannot_be_written_is_a_usage_error(tmp_path, monkeypatch):
    """A ``FAIRWAY_CONFIG`` under a file (or an unwritable folder) was an OSError traceback after
    the server had made the token."""
    import pytest

    from fairway_cli.cli import EXIT_USAGE, CliError

    (tmp_path / "plain").write_text("")
    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "plain" / "config.json"))
    with pytest.raises(CliError) as caught:
        Config(token="t").save()
    assert caught.value.exit_code == EXIT_USAGE and "cannot save" in caught.value.message
