"""left36: workload and token names holding bidirectional overrides or other invisible characters
showed on the web page as another name ("job\u202egnp.exe" reads "jobexe.png"); they are refused
at input by one rule (``scheduler.gpu_text.invisible_problem``), the rule of GPU models and labels."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accounts.models import ApiTokenInfo
from scheduler.gpu_text import invisible_problem
from scheduler.models import Workload
from scheduler.scenarios.spec import ScenarioError, load_scenario

INVISIBLE = [
    "job\u202egnp.exe",  # right-to-left override
    "\u202ajob",  # left-to-right embedding
    "job\u2066x\u2069",  # left-to-right isolate, pop directional isolate
    "job\u2067",
    "jo\u200bb",  # zero-width space
    "job\u00ad",  # soft hyphen
    "job\ufeff",  # zero-width no-break space (BOM)
    "job\x1b[2J",  # an escape sequence
]


@pytest.mark.parametrize("name", INVISIBLE)
def test_a_workload_name_with_an_invisible_character_is_refused(researcher_client, submission, cluster, name):
    response = researcher_client.post("/api/v1/workloads/", submission(name=name), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_name"
    assert f"The name {invisible_problem(name)}." == response.json()["name"][0]
    assert "invisible or control character (U+" in response.json()["name"][0]
    assert not Workload.objects.exists()


def test_a_printable_name_in_any_script_is_taken(researcher_client, submission, cluster):
    response = researcher_client.post("/api/v1/workloads/", submission(name="تدريب 训练 é ✓"), format="json")
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("name", INVISIBLE)
def test_a_token_name_with_an_invisible_character_is_refused(researcher_client, researcher, name):
    before = ApiTokenInfo.objects.count()
    response = researcher_client.post("/api/v1/tokens/", {"name": name}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_name"
    assert "invisible or control character (U+" in response.json()["name"][0]
    assert ApiTokenInfo.objects.count() == before


@pytest.mark.parametrize("where", ["pending", "running"])
def test_a_scenario_workload_id_with_an_invisible_character_is_refused(tmp_path: Path, where: str) -> None:
    name = "P\u202e1"
    extra = ", host: h1, elapsed: 1h" if where == "running" else ""
    path = tmp_path / "names.yaml"
    path.write_text(
        f"name: x\nhosts: [{{name: h1, gpus: 2}}]\nbudgets: [{{path: A}}]\n"
        f"{where}: [{{id: {json.dumps(name)}, budget: A, gpus: 1, min_runtime: 1h{extra}}}]\nsteps: [{{tick: {{}}}}]\n",
        encoding="utf-8",
    )
    with pytest.raises(ScenarioError) as refused:
        load_scenario(path)
    assert refused.value.key.endswith(".id")
    assert "U+202E" in str(refused.value)
