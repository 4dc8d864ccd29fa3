"""bench48: ``bench/targets.py`` prints DESIGN.md §9's targets as one table (target, measured, ratio,
met), and docs/benchmarks/README.md gives each of its targets' command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import targets

ROOT = Path(__file__).resolve().parents[2]


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_quick_only_tick_prints_one_row_under_the_five_columns() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    done = subprocess.run(
        [sys.executable, "bench/targets.py", "--quick", "--only", "tick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("DESIGN.md §9 targets:") and "--quick" in lines[0]
    assert _cells(lines[1]) == ["name", "target", "measured", "ratio", "met"]
    assert set(lines[2].replace(" ", "")) == {"-"}
    rows = [_cells(line) for line in lines[3:]]
    assert len(rows) == 1, done.stdout
    name, target, measured, ratio, met = rows[0]
    assert name == "tick"
    assert target.endswith("≤ 0.25 s")
    assert re.match(r"\d+\.\d{3} s CPU, median of 3 \(", measured), measured
    assert float(ratio) >= 0
    assert met == "-"  # --quick: reduced sizes, no verdicts
    assert "§9 targets" in done.stderr  # the progress bar


def test_an_unknown_name_is_refused_with_the_names() -> None:
    with pytest.raises(SystemExit) as exc:
        targets.main(["--only", "tick,nonesuch"])
    assert exc.value.code == 2


def test_the_table_renders_aligned_columns() -> None:
    text = targets.table([("a", "t ≤ 1 s", "0.5 s", "0.50", "yes"), ("long_name", "t", "2 s", "≥ 2.00", "no")])
    lines = text.splitlines()
    assert [_cells(line) for line in lines[2:]] == [
        ["a", "t ≤ 1 s", "0.5 s", "0.50", "yes"],
        ["long_name", "t", "2 s", "≥ 2.00", "no"],
    ]
    assert lines[0].index("target") == lines[2].index("t ≤ 1 s") == lines[3].index("t")


def test_the_readme_gives_every_target_its_command() -> None:
    readme = (ROOT / "docs" / "benchmarks" / "README.md").read_text()
    for name in targets.NAMES:
        assert f"bench/targets.py --only {name}`" in readme, name
