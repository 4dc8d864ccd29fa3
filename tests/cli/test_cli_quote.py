"""``fairway submit --quote`` against a live server: a quote table, nothing submitted."""

from __future__ import annotations

import json

from fairway_cli.cli import EXIT_API, EXIT_OK
from scheduler.models import Workload
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- fixtures


def test_submit_quote_prints_every_minimum_runtime_and_submits_nothing(logged_in):  # noqa: F811
    argv = ("submit", "--quote", "-b", "nlp/olmo", "-c", "default", "-g", "2", "-m", "A100", "-M", "1h", "--", "python")
    code, out, err = logged_in(*argv)

    assert code == EXIT_OK, err
    lines = out.splitlines()
    assert lines[0] == "quote (nothing submitted): 2 × A100 on default, budget nlp/olmo"
    assert lines[1].split()[:2] == ["MIN-RUNTIME", "STARTS"]
    body = lines[2:8]
    assert [row.split()[0] for row in body] == ["0", "30m", "1h", "2h", "8h", "1d"]
    assert "1h *" in body[2] and "2.00 GPU-h" in body[2] and "16.00 GPU-h" in body[4]
    assert all(" now " in row for row in body)  # free GPUs: "now", not the current second (tryout26)
    assert Workload.objects.count() == 0

    code, out, _ = logged_in("--json", *argv)
    assert code == EXIT_OK
    assert [q["min_runtime_s"] for q in json.loads(out)["quotes"]] == [0, 1800, 3600, 7200, 28800, 86400]


def test_submit_quote_reports_the_submissions_errors(logged_in):  # noqa: F811
    code, _out, err = logged_in("submit", "--quote", "-b", "nope", "-c", "default", "-m", "A100", "-M", "1h", "--", "x")
    assert code == EXIT_API
    assert "unknown_budget" in err
    assert Workload.objects.count() == 0
