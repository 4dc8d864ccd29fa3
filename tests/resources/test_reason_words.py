"""The short words of a pending reason in lists (the web's workload list and dashboard, ``fairway
ls``) come from one function that reads the reason's ``resources``: a workload kept out by CPUs or
memory alone is not listed as "not enough GPUs" while its page says "Not enough CPUs for it"."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from fairway_cli.words import REASON_WORDS, reason_words
from scheduler.models import Workload
from tests.cli.inprocess import run_cli


def test_reason_words_name_what_is_short():
    assert reason_words("insufficient_gpus", None) == "not enough GPUs"
    assert reason_words("insufficient_gpus", ["cpus"]) == "not enough CPUs"
    assert reason_words("insufficient_gpus", ["memory"]) == "not enough memory"
    assert reason_words("insufficient_gpus", ["cpus", "memory"]) == "not enough CPUs and memory"
    assert reason_words("reserved_for_other", ["cpus"]) == "GPUs reserved for a larger job (CPUs short)"
    assert reason_words("fair_share", []) == REASON_WORDS["fair_share"]
    assert reason_words("", None) == reason_words(None, None) == "not considered yet"
    assert reason_words("some_new_reason", None) == "some_new_reason"


@pytest.mark.parametrize(("short", "words"), [(["cpus"], "not enough CPUs"), (["memory"], "not enough memory")])
def test_lists_say_what_is_short(researcher, researcher_client, submission, cluster, monkeypatch, short, words):
    wid = researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json").json()["id"]
    Workload.objects.filter(pk=wid).update(pending_reason="insufficient_gpus", pending_detail={"resources": short})

    row = researcher_client.get("/api/v1/workloads/").json()["results"][0]
    assert row["id"] == wid and row["pending_resources"] == short

    web = APIClient()
    web.force_login(researcher)
    for url in ("/workloads/", "/"):
        page = web.get(url).content.decode()
        assert words in page and "not enough GPUs" not in page, url

    out = run_cli(monkeypatch, researcher, "ls")
    assert words in out and "not enough GPUs" not in out


def test_the_list_reads_resources_without_a_query_per_row(researcher_client, submission, cluster):
    """The API list loads no ``pending_detail`` (JSON the row would decode for nothing), only its
    ``resources``, in the page's one query: as many queries for one row as for five."""

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert researcher_client.get("/api/v1/workloads/").status_code == 200
        return len(ctx.captured_queries)

    researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    Workload.objects.update(pending_reason="insufficient_gpus", pending_detail={"resources": ["cpus"]})
    count()
    one = count()
    for _ in range(4):
        researcher_client.post("/api/v1/workloads/", submission(gpu_count=1), format="json")
    Workload.objects.update(pending_reason="insufficient_gpus", pending_detail={"resources": ["cpus"]})
    assert count() == one
    with CaptureQueriesContext(connection) as ctx:
        researcher_client.get("/api/v1/workloads/")
    page = [
        q["sql"] for q in ctx.captured_queries if 'FROM "scheduler_workload"' in q["sql"] and "COUNT" not in q["sql"]
    ]
    before = [b for q in page for b in re.findall(r'(.)"scheduler_workload"\."pending_detail"', q)]
    assert page and before and set(before) == {"("}  # only inside the key's extraction, never the column
