"""Malformed scenario files: a clear error naming file and key, no traceback, nothing run."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from scheduler.scenarios.spec import ScenarioError, load_scenario

HEAD = "name: x\nhosts: [{name: h1, gpus: 8}]\nbudgets: [{path: A, shares: 1}]\n"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        # a non-number was a ValueError traceback at the step; .nan passed whatever the usage
        (HEAD + "steps: [{tick: {}, expect: {usage: {A: abc}}}]\n", "steps[0].expect.usage.A"),
        (HEAD + "steps: [{tick: {}, expect: {usage: {A: .nan}}}]\n", "steps[0].expect.usage.A"),
        (HEAD + "steps: [{tick: {}, expect: {usage: [A]}}]\n", "steps[0].expect.usage"),
        (HEAD + "steps: [{tick: {}, expect: {pending: 5}}]\n", "steps[0].expect.pending"),
        (HEAD + "steps: [{tick: {}, expect: {reasons: [a]}}]\n", "steps[0].expect.reasons"),
        (HEAD + "steps: [{tick: {}, expect: {preemptions: {A1: x}}}]\n", "steps[0].expect.preemptions.A1"),
        (HEAD + "steps: [{expect: {total_preemptions: one}}]\n", "steps[0].expect.total_preemptions"),
        # 10^20 GPUs on one host: the runner tried to build them and never returned
        ("name: x\nhosts: [{name: h1, gpus: 99999999999999999999}]\nsteps: [{tick: {}}]\n", "hosts[0].gpus"),
        ("name: x\nhosts: [{name: h, count: 99999999999999999999}]\nsteps: [{tick: {}}]\n", "hosts[0].count"),
    ],
)
def test_malformed_expectations_fail_at_load_with_their_key(tmp_path: Path, text: str, key: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert key in str(info.value) and str(path) in str(info.value)


def test_a_file_that_is_not_utf8_is_a_clear_error(tmp_path: Path):
    """It was a UnicodeDecodeError traceback out of ``manage.py scenario``."""
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe name: x\n")
    with pytest.raises(ScenarioError, match="not UTF-8"):
        load_scenario(path)
    with pytest.raises(CommandError):
        call_command("scenario", str(path))


def test_valid_expectations_still_load(tmp_path: Path):
    path = tmp_path / "ok.yaml"
    path.write_text(
        HEAD
        + "pending: [{id: A1, budget: A, gpus: 1, min_runtime: 1h}]\n"
        + "steps:\n  - tick: {}\n    expect: {started: [A1], preempted: null, usage: {A: 0}, "
        + "preemptions: {A1: 0}, total_preemptions: 0, reasons: {}, rejected: null, running: [A1]}\n"
    )
    assert load_scenario(path).steps[0].expect["started"] == ["A1"]
