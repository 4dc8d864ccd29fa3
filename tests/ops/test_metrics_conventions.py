"""``/metrics`` follows the Prometheus conventions: a pure-Python check that always runs, and
``promtool check metrics`` on the same scrape when promtool is installed (``apt-get install prometheus``)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from scheduler import histograms
from tests.ops.conftest import scrape_text

NAME = re.compile(r"^fairway_[a-z][a-z0-9]*(_[a-z0-9]+)*$")
# Base units (and 0..1 ratios, epochs, info) a measured quantity must end with.
UNIT_SUFFIXES = ("_seconds", "_gpu_seconds", "_bytes", "_ratio", "_timestamp_seconds", "_info")
# A gauge that counts things names them (plural nouns are the "unit" of a count).
COUNT_NOUNS = ("_workloads", "_gpus", "_hosts", "_agents")
# Label names that mean one metric name carries several quantities.
MIXED_LABELS = {"metric", "quantity", "unit", "measure", "stat", "type", "kind"}
# A window in a name is a rate pretending to be a gauge: export a counter and let PromQL take rate().
WINDOWED = re.compile(r"_(last|per|past)_(minute|hour|day|week)")


def conventions_problems(text: str) -> list[str]:
    """Every departure of a scrape from the conventions Fairway follows (empty: none)."""
    problems = []
    for family in text_string_to_metric_families(text):
        name, kind = family.name, family.type
        exported = name + "_total" if kind == "counter" else name
        if not NAME.match(exported):
            problems.append(f"{exported}: not a fairway_ snake_case name")
        if not family.documentation.strip():
            problems.append(f"{exported}: no HELP text")
        if WINDOWED.search(exported):
            problems.append(f"{exported}: a time window in the name (use a _total counter)")
        if kind == "counter":
            if not any(s.name == exported for s in family.samples) and family.samples:
                problems.append(f"{exported}: counter samples do not end in _total")
        elif exported.endswith("_total"):
            problems.append(f"{exported}: _total on a {kind}")
        if kind in ("histogram", "summary") and not exported.endswith(UNIT_SUFFIXES):
            problems.append(f"{exported}: a {kind} without a base unit")
        base = exported.removesuffix("_total")
        if kind in ("gauge", "histogram") and not base.endswith(UNIT_SUFFIXES + COUNT_NOUNS):
            problems.append(f"{exported}: no unit in the name ({' '.join(UNIT_SUFFIXES + COUNT_NOUNS)})")
        if re.search(r"_(milli|micro|kilo|mega)?(ms|minutes|hours|days|mb|kb|gb)(_|$)", exported):
            problems.append(f"{exported}: not a base unit (seconds, bytes)")
        for sample in family.samples:
            mixed = MIXED_LABELS & set(sample.labels)
            if mixed:
                problems.append(f"{exported}: label {sorted(mixed)} mixes quantities under one name")
                break
    return problems


def test_the_checker_catches_the_known_mistakes():
    bad = (
        "# HELP fairway_preemptions_last_hour x\n# TYPE fairway_preemptions_last_hour gauge\n"
        'fairway_preemptions_last_hour{cluster="c"} 1\n'
        "# HELP fairway_pyramid_fraction x\n# TYPE fairway_pyramid_fraction gauge\n"
        'fairway_pyramid_fraction{metric="impact"} 0.5\n'
        "# HELP fairway_tick_ms x\n# TYPE fairway_tick_ms histogram\n"
        'fairway_tick_ms_bucket{le="+Inf"} 1\nfairway_tick_ms_count 1\nfairway_tick_ms_sum 1\n'
    )
    problems = "\n".join(conventions_problems(bad))
    assert "fairway_preemptions_last_hour: a time window" in problems
    assert "fairway_preemptions_last_hour: no unit" in problems
    assert "fairway_pyramid_fraction: label ['metric'] mixes quantities" in problems
    assert "fairway_tick_ms: a histogram without a base unit" in problems


def test_scrape_follows_the_conventions(live_world, client):
    text = scrape_text(client)
    assert conventions_problems(text) == []
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["fairway_preemptions"] == "counter"
    for hist in histograms.ALL:
        assert families[hist.name] == "histogram"
    assert "fairway_pyramid_fraction" not in families
    assert "fairway_preemptions_last_hour" not in families


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_promtool_check_metrics(live_world, client):
    text = scrape_text(client)
    done = subprocess.run(  # noqa: S603 -- promtool from PATH, fixed arguments
        [shutil.which("promtool"), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
