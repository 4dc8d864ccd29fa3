"""What the demo prints for its first user (scripts/demo.py ``Demo.print_access``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo():
    spec = importlib.util.spec_from_file_location("fairway_demo_script_access", ROOT / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_the_demo_tells_where_the_web_ui_is_and_how_to_point_the_cli_at_it(demo, capsys):
    """tryout26: it printed only the admin URL and the logins, and only once the replay was over;
    `make demo PORT=8781` left the CLI on its default :8000 ("cannot reach ... ConnectionError")."""
    demo.Demo.print_access(SimpleNamespace(port=8781, logs=Path("var/demo/logs")))
    out = capsys.readouterr().out
    assert "Web UI: http://127.0.0.1:8781/" in out
    assert "Admin: http://127.0.0.1:8781/admin/" in out
    assert "fairway login --server http://127.0.0.1:8781 -u researcher" in out
    assert "login researcher / fairway-demo" in out


def test_the_demo_database_is_readable_only_by_its_owner(demo, tmp_path, monkeypatch):
    """break27: var/demo/fairway.sqlite3 was created 0644 by migrate, and the demo's agents run
    their attempts (as fw-researcher) on the same machine: a workload could read every session
    key (an admin's web login) and every workload's secret env values from it."""
    var = tmp_path / "demo"
    seen: dict[str, int | None] = {}

    def manage(*argv: str) -> str:
        if argv[0] == "migrate":
            db = var / "fairway.sqlite3"
            seen["mode"] = db.stat().st_mode & 0o777 if db.exists() else None
        return ""

    monkeypatch.setattr(demo, "demo_isolation", lambda: SimpleNamespace(allow_root=False, agent_env={}))
    args = SimpleNamespace(hosts=1, gpus=1, history_days=0)
    demo.Demo.prepare(SimpleNamespace(var=var, logs=var / "logs", manage=manage, args=args))
    assert seen["mode"] == 0o600


def test_the_demo_with_exit_does_not_print_urls_it_is_about_to_stop_serving(demo, capsys):
    """try42: `make demo EXIT=1` printed "Web UI: http://127.0.0.1:8745/ ... login admin / ..."
    after the replay, as if it kept serving, then stopped the server in the same second. With
    EXIT=1 it now says that it stops and how to browse the replay's database afterwards."""
    calls: list[str] = []
    fake = SimpleNamespace(
        port=8745,
        var=Path("/work/x/var/demo"),
        logs=Path("/work/x/var/demo/logs"),
        print_access=lambda: calls.append("print_access"),
        serve_forever=lambda: calls.append("serve_forever"),
    )
    fake.print_kept = lambda: demo.Demo.print_kept(fake)
    demo.after_replay(fake, exit_now=True)
    out = capsys.readouterr().out
    assert calls == []
    assert "Web UI:" not in out
    assert "stopping" in out
    assert "FAIRWAY_VAR_DIR=/work/x/var/demo .venv/bin/python manage.py serve --port 8745" in out

    demo.after_replay(fake, exit_now=False)  # without EXIT=1: the URLs, then it serves
    assert calls == ["print_access", "serve_forever"]
