"""The ``fairway`` CLI served by the server, like the agent (``scheduler/agent_install.py``).

- ``GET /cli/install.sh``: a one-line install for laptops and login nodes,
  ``curl -fsSL SERVER/cli/install.sh | bash``: a virtualenv under ``~/.local/share/fairway-cli``,
  ``fairway`` linked into ``~/.local/bin``, this server's URL as the default (``FAIRWAY_URL`` in the
  printed hint; the CLI saves it at ``fairway --server URL login``);
- ``GET /cli/<wheel>`` (also ``/cli/fairway-cli.whl``): the CLI as a pure-Python wheel built on the
  fly from this server's own ``fairway_cli/`` package, so the CLI always matches its server, with
  ``requests`` (the ``cli`` extra of pyproject.toml) as its one ``Requires-Dist``.

The wheel holds ``fairway_cli`` only (no ``config``, ``web`` or other server package), is
byte-for-byte reproducible for the same sources, and cached until a source file changes.
"""

from __future__ import annotations

import hashlib
import io
import threading
import tomllib
import zipfile
from pathlib import Path

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from fairway_cli import __version__ as CLI_VERSION
from scheduler.agent_install import _ZIP_DATE, _record_hash, _shell_quote, public_url

ROOT = Path(__file__).resolve().parents[1]
CLI_DIR = ROOT / "fairway_cli"
INSTALL_SCRIPT = Path(__file__).resolve().parent / "cli_install.sh"
DIST_NAME = "fairway-cli"
WHEEL_NAME = f"fairway_cli-{CLI_VERSION}-py3-none-any.whl"

_cache_lock = threading.Lock()
_cache: tuple[tuple[tuple[str, int, int], ...], bytes] | None = None


def requirements() -> list[str]:
    """The ``cli`` extra of pyproject.toml (pinned)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["cli"])


def _sources() -> list[Path]:
    return sorted(p for p in CLI_DIR.rglob("*.py") if "__pycache__" not in p.parts)


def build_wheel() -> bytes:
    """The CLI wheel (``WHEEL_NAME``): every ``fairway_cli/**/*.py``, metadata, a ``fairway`` script."""
    global _cache
    sources = _sources()
    watched = [*sources, ROOT / "pyproject.toml"]
    key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in watched)
    with _cache_lock:
        if _cache is not None and _cache[0] == key:
            return _cache[1]
    dist_info = f"fairway_cli-{CLI_VERSION}.dist-info"
    files: list[tuple[str, bytes]] = [
        (f"fairway_cli/{p.relative_to(CLI_DIR).as_posix()}", p.read_bytes()) for p in sources
    ]
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {DIST_NAME}",
        f"Version: {CLI_VERSION}",
        "Summary: Fairway command line (fairway)",
        "Requires-Python: >=3.11",
        *(f"Requires-Dist: {req}" for req in requirements()),
    ]
    files += [
        (f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: fairway-server\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{dist_info}/entry_points.txt", b"[console_scripts]\nfairway = fairway_cli.cli:main\n"),
        (f"{dist_info}/top_level.txt", b"fairway_cli\n"),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files)
    record += f"{dist_info}/RECORD,,\n"
    files.append((f"{dist_info}/RECORD", record.encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    wheel = buffer.getvalue()
    with _cache_lock:
        _cache = (key, wheel)
    return wheel


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
    wheel = build_wheel()
    response = HttpResponse(wheel, content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="{WHEEL_NAME}"'
    response["ETag"] = '"' + hashlib.sha256(wheel).hexdigest()[:32] + '"'
    return response
