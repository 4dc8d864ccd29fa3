"""The ``fairway`` CLI served by the server, like the agent (``scheduler/agent_install.py``).

- ``GET /cli/install.sh``: a one-line install for laptops and login nodes,
  ``curl -fsSL SERVER/cli/install.sh | bash``: a virtualenv under ``~/.local/share/fairway-cli``,
  ``fairway`` linked into ``~/.local/bin``, this server's URL saved as the CLI's default
  server (``fairway_cli.cli.adopt_server``: not over a server the CLI's config names already);
- ``GET /cli/<wheel>`` (also ``/cli/fairway-cli.whl``): the CLI as a pure-Python wheel built on the
  fly from this server's own ``fairway_cli/`` package, so the CLI always matches its server, with
  ``requests`` (the ``cli`` extra of pyproject.toml) as its one ``Requires-Dist``.

The wheel holds ``fairway_cli`` only (no ``config``, ``web`` or other server package), is
byte-for-byte reproducible for the same sources, and cached until a source file changes.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from fairway_cli import __version__ as CLI_VERSION
from scheduler.agent_install import _shell_quote, public_url
from scheduler.wheels import ServedWheel

ROOT = Path(__file__).resolve().parents[1]
CLI_DIR = ROOT / "fairway_cli"
INSTALL_SCRIPT = Path(__file__).resolve().parent / "cli_install.sh"
DIST_NAME = "fairway-cli"
WHEEL_NAME = f"fairway_cli-{CLI_VERSION}-py3-none-any.whl"


def requirements() -> list[str]:
    """The ``cli`` extra of pyproject.toml (pinned)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["cli"])


WHEEL = ServedWheel(
    package_dir=CLI_DIR,
    shared=[CLI_DIR.parent / "fairway_common"],
    dist_name=DIST_NAME,
    version=CLI_VERSION,
    summary="Fairway command line (fairway)",
    script="fairway = fairway_cli.cli:main",
    requirements=requirements,
    watched=[ROOT / "pyproject.toml"],
)


def build_wheel() -> bytes:
    """The CLI wheel (``WHEEL_NAME``): every ``fairway_cli/**/*.py``, metadata, a ``fairway`` script."""
    return WHEEL.build()


@require_GET
def install_script(request: HttpRequest) -> HttpResponse:
    """``GET /cli/install.sh``: the install script, this server's URL and the wheel's name filled in."""
    script = INSTALL_SCRIPT.read_text()
    script = script.replace("@@SERVER_URL@@", _shell_quote(public_url(request)))
    script = script.replace("@@WHEEL_NAME@@", WHEEL_NAME).replace("@@CLI_VERSION@@", CLI_VERSION)
    return HttpResponse(script, content_type="text/x-shellscript; charset=utf-8")


@require_GET
def cli_wheel(request: HttpRequest) -> HttpResponse:
    """``GET /cli/fairway_cli-<version>-py3-none-any.whl`` (also ``/cli/fairway-cli.whl``)."""
    return WHEEL.response()
