"""README's endpoint table names every endpoint that ``GET /api/v1/`` lists (tryout49: the table
had no row for ``workloads/bulk/``, which the root lists and the CLI's bulk cancel/hold/release
calls), and says what the log tail's ``tail`` counts (bytes, not lines)."""

from __future__ import annotations

import re
from pathlib import Path

from config.api_root import api_endpoints

README = Path(__file__).resolve().parents[2] / "README.md"


def _endpoint_table() -> str:
    """The rows of README's ``| endpoint | who |`` table, as one text."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "| endpoint | who |")
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip().startswith("|"):
            break
        rows.append(line)
    return "\n".join(rows)


def test_every_listed_endpoint_has_a_row() -> None:
    table = _endpoint_table()
    missing = [
        path for path in api_endpoints() if not re.search(r"(?<![\w/])" + re.escape(path + "/") + r"(?![\w-])", table)
    ]
    assert missing == [], f"README's endpoint table has no row for: {missing}"


def test_log_tail_says_its_unit() -> None:
    [row] = [line for line in _endpoint_table().splitlines() if "logs/?" in line]
    assert "bytes" in row, row
