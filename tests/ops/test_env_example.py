"""Every ``FAIRWAY_*`` variable the server reads is documented: in README.md's configuration table
and, commented with its default, in .env.example (which the README points to)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# env_str("FAIRWAY_X", …), env_int(…), os.environ.get("FAIRWAY_X"), os.environ["FAIRWAY_X"], os.getenv(…)
READ = re.compile(r"""(?:\benv_\w+\(|environ\.get\(|environ\[|getenv\()\s*["'](FAIRWAY_[A-Z0-9_]+)["']""")
SOURCES = [REPO / "config" / "settings.py", *sorted((REPO / "scheduler").rglob("*.py"))]


def _read_variables() -> list[str]:
    names = {name for path in SOURCES for name in READ.findall(path.read_text())}
    return sorted(names)


VARIABLES = _read_variables()


def test_the_settings_read_the_variables_this_test_expects():
    for name in (
        "FAIRWAY_LOOKBACK_WINDOW_S",
        "FAIRWAY_DB_POOL_MIN_SIZE",
        "FAIRWAY_VAR_DIR",
        "FAIRWAY_READYZ_TICK_INTERVALS",
    ):
        assert name in VARIABLES
    assert "FAIRWAY_GPU_METRICS_RETENTION_DAYS" in VARIABLES  # read in scheduler/metrics.py


@pytest.mark.parametrize("name", VARIABLES)
def test_the_readme_documents_every_variable(name):
    assert re.search(rf"`{name}`", (REPO / "README.md").read_text()), f"{name} is missing from README.md"


@pytest.mark.parametrize("name", VARIABLES)
def test_env_example_lists_every_variable_with_its_default(name):
    lines = (REPO / ".env.example").read_text().splitlines()
    assert any(line.startswith(f"# {name}=") for line in lines), f"{name} is missing from .env.example"
