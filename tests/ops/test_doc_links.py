"""Every relative link in README.md and docs/*.md names a file that exists and, with a ``#anchor``,
a heading of that file (GitHub's slugs: lower case, punctuation dropped, spaces to hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "docs/benchmarks").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _text_outside_code(path: Path) -> str:
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line.lstrip()):
            inside = not inside
            continue
        if not inside:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(lines)


def slug(heading: str) -> str:
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _text_outside_code(path).splitlines():
        match = re.match(r"#{1,6}\s+(.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def _links() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for target in LINK.findall(_text_outside_code(page)):
            if not re.match(r"[a-z]+:", target):
                out.append((str(page.relative_to(REPO)), target))
    return out


def test_the_pages_have_relative_links():
    assert len(_links()) > 20


@pytest.mark.parametrize(("page", "target"), _links())
def test_a_relative_link_resolves(page, target):
    path, _, anchor = target.partition("#")
    file = (REPO / page).parent / path if path else REPO / page
    assert file.exists(), f"{page}: {target} names no file"
    if anchor and file.suffix == ".md":
        assert anchor in anchors(file), f"{page}: {target} names no heading of {path or page}"
