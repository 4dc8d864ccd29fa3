"""brk48: a spec's env value that YAML reads as an integer written otherwise than its decimal text
(``BUILD: 1_000``, ``OFFSET: +1``, ``{value: 1_0}``) ran as ``"1000"``, ``"1"``, ``"10"``: the
written form lost, silently (a decimal number, ``3.10``, is refused for that since brk30; the
command refuses every number). The web's "Submit spec" and ``fairway submit -f`` refuse it now,
naming the line and never quoting the input, in one wording
(``fairway_common.strict_yaml.ENV_NUMBER_TEXT``); a plain decimal (``SEED: 42``) stays taken.
Each test failed before its fix."""

from __future__ import annotations

import pytest
from django.test import Client

from fairway_common.strict_yaml import env_number_line
from scheduler.models import Workload
from tests.cli.inprocess import run_cli
from tests.conftest import PASSWORD

SPEC = (
    "name: x\nbudget: nlp/olmo\ncluster: default\ngpu_model: A100\ngpu_count: 1\nimage: img:1\n"
    "command: [python]\nmin_runtime: 1h\nenv:\n  SEED: 42\n  {line}\n"
)


@pytest.mark.parametrize("value", ["BUILD: 1_000", "OFFSET: +1", "ZERO: -0", "TAG: {value: 1_0, secret: false}"])
def test_the_reader_names_the_line(value: str) -> None:
    assert env_number_line(SPEC.format(line=value)) == 11
    assert env_number_line(SPEC.format(line="BUILD: '1_000'")) is None
    assert env_number_line(SPEC.format(line="N: -5")) is None


def test_the_spec_page_refuses_it_and_submits_nothing(researcher, cluster) -> None:
    browser = Client()
    assert browser.login(username="researcher", password=PASSWORD)
    response = browser.post("/submit/", {"spec": SPEC.format(line="BUILD: 1_000")})
    assert response.status_code == 400
    page = response.content.decode()
    errors = page[page.index('id="spec-errors"') :]
    assert "line 11" in errors and "written form" in errors, errors[:600]
    assert not Workload.objects.exists()
    taken = browser.post("/submit/", {"spec": SPEC.format(line="BUILD: '1_000'")})
    assert taken.status_code == 302, taken.content.decode()[:2000]
    assert Workload.objects.get().env["BUILD"]["value"] == "1_000"


def test_fairway_submit_f_refuses_it_and_sends_nothing(monkeypatch, tmp_path, researcher, cluster) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC.format(line="BUILD: 1_000"))
    said = run_cli(monkeypatch, researcher, "submit", "-f", str(path), expect=2)
    assert "line 11" in said and "written form" in said, said
    assert not Workload.objects.exists()
