"""What the break-it pass of session 29 left: one strict YAML reader for every hand-written document
(the CLI read aliases), offline before lost in the settings, the clusters page's plural."""

from __future__ import annotations

import pytest
import yaml

from fairway_common import strict_yaml

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
    for i in range(20)
)
"""Nested aliases: 9 × 4**20 strings once expanded (a few lines, terabytes)."""


@pytest.mark.parametrize(
    ("text", "kind", "line", "words"),
    [
        (BOMB, "alias", 2, "aliases (*name) are not allowed"),
        ("name: x\ngpu_count: 1\ngpu_count: 8\n", "key_twice", 3, "'gpu_count' is given twice (also on line 2)"),
        ("gpu_count: " + "9" * 41 + "\n", "number", 1, "a number is larger than 100"),
        ("gpu_count: 101\n", "number", 1, "a number is larger than 100"),
    ],
)
def test_the_strict_reader_refuses_with_the_line(text, kind, line, words):
    with pytest.raises(strict_yaml.Refused) as refused:
        strict_yaml.load(text, max_int=100)
    assert (refused.value.kind, refused.value.line) == (kind, line)
    assert words in refused.value.problem
    assert isinstance(refused.value, yaml.YAMLError)  # callers that catch YAMLError still catch it


def test_the_strict_reader_reads_what_a_person_writes():
    text = "name: x\ncommand: [python, train.py]\nenv: {A: '1'}\ngpu_count: 8\nmin_runtime: 2h\n"
    assert strict_yaml.load(text, max_int=100) == yaml.safe_load(text)
    assert strict_yaml.load("n: " + "9" * 30) == {"n": int("9" * 30)}  # no bound unless asked


def test_a_spec_file_with_nested_aliases_is_a_usage_error_not_an_out_of_memory(researcher, monkeypatch, tmp_path):
    """``fairway submit -f`` read aliases with the plain safe loader: a bomb spec ran the user's own
    CLI out of memory (the server's form and the scenario files already refused them)."""
    from scheduler.models import Workload
    from tests.cli.inprocess import run_cli

    spec = tmp_path / "job.yaml"
    spec.write_text(BOMB)
    err = run_cli(monkeypatch, researcher, "submit", "-f", str(spec), expect=2)
    assert "line 2: aliases (*name) are not allowed" in err
    assert not Workload.objects.exists()


def test_offline_after_lost_is_refused_naming_both(monkeypatch):
    """FAIRWAY_HOST_OFFLINE_AFTER_S ≥ FAIRWAY_HOST_LOST_AFTER_S was accepted: a silent host's attempts
    would be lost while it still showed online."""
    from django.core.exceptions import ImproperlyConfigured

    from tests.breaker.test_break26 import load_settings

    with pytest.raises(ImproperlyConfigured) as error:
        load_settings(monkeypatch, FAIRWAY_HOST_OFFLINE_AFTER_S="600", FAIRWAY_HOST_LOST_AFTER_S="300")
    assert str(error.value) == "FAIRWAY_HOST_OFFLINE_AFTER_S=600 must be less than FAIRWAY_HOST_LOST_AFTER_S=300"
    fairway = load_settings(monkeypatch, FAIRWAY_HOST_OFFLINE_AFTER_S="60", FAIRWAY_HOST_LOST_AFTER_S="300")["FAIRWAY"]
    assert (fairway["HOST_OFFLINE_AFTER_S"], fairway["HOST_LOST_AFTER_S"]) == (60, 300)


def test_the_clusters_page_counts_one_host_in_the_singular(researcher, db, client):
    from scheduler.services import do_create_cluster, do_register_host
    from tests.conftest import gpu_specs

    cluster = do_create_cluster("default")
    do_register_host(cluster, "solo", gpu_specs("solo", "A100", 8), {})
    client.force_login(researcher)
    page = client.get("/clusters/").content.decode()
    assert "1 host</span>" in page and "1 hosts" not in page
