"""``fairway resubmit ID`` and ``fairway show ID --spec`` (docs/jobs.md "Submit again"), the API
answered in-process."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from scheduler.models import Workload
from scheduler.services import SECRET_PLACEHOLDER, do_submit_workload
from tests.cli.inprocess import run_cli


@pytest.fixture
def old(researcher: Any, submit_kwargs: Any) -> Workload:
    env = {"WANDB_PROJECT": "olmo", "HF_TOKEN": {"value": "hf_owner", "secret": True}}
    return do_submit_workload(researcher, **submit_kwargs(env=env, max_runtime_s=3 * 3600, retries=1))


def test_the_owner_submits_again_with_overrides(monkeypatch, researcher, old):
    out = run_cli(
        monkeypatch, researcher, "resubmit", str(old.pk), "-g", "2", "-M", "30m", "-t", "1h", "--retries", "0"
    )
    new = Workload.objects.exclude(pk=old.pk).get()
    assert f"submitted #{new.pk} pretrain (resubmitted from #{old.pk}): 2 × A100 on default, budget nlp/olmo" in out
    assert (new.gpu_count, new.min_runtime_s, new.max_runtime_s, new.retries) == (2, 1800, 3600, 0)
    assert new.env["HF_TOKEN"]["value"] == "hf_owner" and new.resubmitted_from == old
    shown = run_cli(monkeypatch, researcher, "show", str(new.pk))
    assert f"from #{old.pk}" in shown and "hf_owner" not in shown


def test_another_member_must_give_the_secret(monkeypatch, teammate, old):
    refused = run_cli(monkeypatch, teammate, "resubmit", str(old.pk), expect=1)
    assert "HF_TOKEN" in refused and "secret" in refused
    assert Workload.objects.count() == 1
    monkeypatch.setenv("HF_TOKEN", "hf_teammate")
    run_cli(monkeypatch, teammate, "resubmit", str(old.pk), "-s", "HF_TOKEN")
    new = Workload.objects.exclude(pk=old.pk).get()
    assert new.owner == teammate and new.env["HF_TOKEN"]["value"] == "hf_teammate"


def test_the_spec_round_trips_through_submit_but_for_the_secret(monkeypatch, tmp_path, researcher, old):
    text = run_cli(monkeypatch, researcher, "show", str(old.pk), "--spec")
    assert "hf_owner" not in text and text.startswith(f"# The spec of workload #{old.pk}")
    spec = yaml.safe_load(text)
    assert spec["env"]["HF_TOKEN"] == {"value": SECRET_PLACEHOLDER, "secret": True}
    assert (spec["gpu_count"], spec["min_runtime"], spec["max_runtime"], spec["retries"]) == (4, "1h", "3h", 1)
    path = tmp_path / "job.yaml"
    path.write_text(text)
    refused = run_cli(monkeypatch, researcher, "submit", "-f", str(path), expect=1)
    assert "HF_TOKEN" in refused and "never shown back" in refused
    assert Workload.objects.count() == 1
    monkeypatch.setenv("HF_TOKEN", "hf_fresh")
    run_cli(monkeypatch, researcher, "submit", "-f", str(path), "-s", "HF_TOKEN")
    assert Workload.objects.exclude(pk=old.pk).get().env["HF_TOKEN"]["value"] == "hf_fresh"


def test_the_limit_and_a_quote(monkeypatch, researcher, old, settings):
    quoted = run_cli(monkeypatch, researcher, "resubmit", str(old.pk), "--quote", "-g", "1")
    assert "quote (nothing submitted): 1 × A100" in quoted and Workload.objects.count() == 1
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_SUBMITTED_PER_USER": 1}
    refused = run_cli(monkeypatch, researcher, "resubmit", str(old.pk), expect=1)
    assert "one user may have at most 1" in refused and Workload.objects.count() == 1


def test_someone_who_may_not_read_it_is_refused(monkeypatch, outsider, old):
    assert "may read its spec or submit it again" in run_cli(monkeypatch, outsider, "resubmit", str(old.pk), expect=1)
    assert "may read its spec" in run_cli(monkeypatch, outsider, "show", str(old.pk), "--spec", expect=1)


def test_a_new_command_after_the_flags(monkeypatch, researcher, old):
    run_cli(monkeypatch, researcher, "resubmit", str(old.pk), "-g", "1", "--", "python", "eval.py", "--steps", "9")
    new = Workload.objects.exclude(pk=old.pk).get()
    assert (new.gpu_count, new.command) == (1, ["python", "eval.py", "--steps", "9"])


def test_a_default_name_follows_the_command_given(monkeypatch, researcher, submit_kwargs):
    """words46: ``fairway resubmit 6 -- echo again`` submitted "#12 sh", the old command's name."""
    old = do_submit_workload(researcher, **submit_kwargs(name="sh", command=["sh", "-c", "sleep 60"], env={}))
    out = run_cli(monkeypatch, researcher, "resubmit", str(old.pk), "--", "echo", "again")
    new = Workload.objects.exclude(pk=old.pk).get()
    assert f"submitted #{new.pk} echo (resubmitted from #{old.pk})" in out and new.name == "echo"
