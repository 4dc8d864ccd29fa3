"""Pure-Python wheels the server builds from its own source tree and serves (the agent at
``/agent/``, the CLI at ``/cli/``), so what a host or laptop installs always matches its server.

A wheel is byte-for-byte reproducible for the same sources (fixed zip dates and modes) and cached
until a watched file changes (size or mtime).
"""

from __future__ import annotations

import base64
import hashlib
import io
import threading
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.http import HttpResponse

_ZIP_DATE = (2020, 1, 1, 0, 0, 0)


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


@dataclass
class ServedWheel:
    """One package directory served as a wheel with one console script, and ``shared`` package
    directories it ships too (``fairway_common``: code the agent's and the CLI's wheels both need)."""

    package_dir: Path
    dist_name: str  # e.g. "fairway-agent"
    version: str
    summary: str
    script: str  # e.g. "fairway-agent = agent.__main__:main"
    requirements: Callable[[], list[str]]
    watched: Sequence[Path] = ()  # files besides the sources that change the wheel
    shared: Sequence[Path] = ()  # further package directories in the wheel
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cache: tuple[tuple[tuple[str, int, int], ...], bytes] | None = field(default=None, repr=False)

    @property
    def package(self) -> str:
        return self.package_dir.name

    @property
    def file_name(self) -> str:
        return f"{self.dist_name.replace('-', '_')}-{self.version}-py3-none-any.whl"

    @property
    def packages(self) -> list[Path]:
        return [self.package_dir, *self.shared]

    def sources(self) -> list[Path]:
        return sorted(p for root in self.packages for p in root.rglob("*.py") if "__pycache__" not in p.parts)

    def build(self) -> bytes:
        """The wheel: every ``<package>/**/*.py`` (shared packages too), metadata and the console script."""
        sources = self.sources()
        key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in [*sources, *self.watched])
        with self._lock:
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1]
        wheel = self._zip(sources)
        with self._lock:
            self._cache = (key, wheel)
        return wheel

    def response(self) -> HttpResponse:
        """The wheel as a download, with its file name and a content ETag."""
        wheel = self.build()
        response = HttpResponse(wheel, content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="{self.file_name}"'
        response["ETag"] = '"' + hashlib.sha256(wheel).hexdigest()[:32] + '"'
        return response

    def _zip(self, sources: list[Path]) -> bytes:
        dist_info = f"{self.dist_name.replace('-', '_')}-{self.version}.dist-info"
        root = self.package_dir.parent
        files = [(p.relative_to(root).as_posix(), p.read_bytes()) for p in sources]
        metadata = [
            "Metadata-Version: 2.1",
            f"Name: {self.dist_name}",
            f"Version: {self.version}",
            f"Summary: {self.summary}",
            "Requires-Python: >=3.11",
            *(f"Requires-Dist: {req}" for req in self.requirements()),
        ]
        files += [
            (f"{dist_info}/METADATA", ("\n".join(metadata) + "\n").encode()),
            (
                f"{dist_info}/WHEEL",
                b"Wheel-Version: 1.0\nGenerator: fairway-server\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
            ),
            (f"{dist_info}/entry_points.txt", f"[console_scripts]\n{self.script}\n".encode()),
            (f"{dist_info}/top_level.txt", "".join(f"{p.name}\n" for p in self.packages).encode()),
        ]
        record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files)
        files.append((f"{dist_info}/RECORD", (record + f"{dist_info}/RECORD,,\n").encode()))
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in files:
                info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
        return buffer.getvalue()
