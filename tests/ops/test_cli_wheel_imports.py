"""The CLI's served wheel ships ``fairway_cli`` and ``fairway_common`` only (scheduler/cli_install.py):
no module of the CLI may import ``agent``, at load or when a command runs (``fairway exec`` and
``fairway port-forward`` imported ``agent.protocol`` and failed with ModuleNotFoundError in a served
install; the install test only ran ``fairway --version``)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import fairway_cli

ROOT = Path(__file__).resolve().parents[2]


def test_every_cli_module_and_its_lazy_imports_load_without_the_agent_package() -> None:
    modules = sorted(f"fairway_cli.{m.name}" for m in pkgutil.iter_modules(fairway_cli.__path__))
    script = (
        "import sys\n"
        "sys.modules['agent'] = None  # as in the served wheel: no agent package\n"
        "import importlib\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "from fairway_cli import session, portforward\n"
        # the imports inside functions: every `from X import` line of the package, run
        "import ast, pathlib\n"
        "for path in pathlib.Path('fairway_cli').glob('*.py'):\n"
        "    for node in ast.walk(ast.parse(path.read_text())):\n"
        "        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:\n"
        "            importlib.import_module(node.module)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)  # noqa: S603
    assert done.returncode == 0, done.stderr
