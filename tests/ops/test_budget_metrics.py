"""The per-budget series are the budgets API's own numbers (``budget_standings``), in base units."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.ops.conftest import scrape_text


def test_budget_series_match_the_budgets_api(live_world, client, researcher_client):
    # The scrape and the API read at two instants: usage grows by the running GPUs each second
    # between them (16 here), and committed usage shrinks as fast, plus the API's 3-decimal
    # rounding of hours (3.6 GPU-seconds). tests/api/test_one_standing.py compares at one instant.
    started = time.monotonic()
    samples = {}
    for family in text_string_to_metric_families(scrape_text(client)):
        for s in family.samples:
            if s.name.startswith("fairway_budget_") and "budget" in s.labels:
                samples[(s.name, s.labels["cluster"], s.labels["budget"])] = s.value
    tree = researcher_client.get("/api/v1/budgets/tree/").json()
    drift = 16 * (time.monotonic() - started + 1) + 3.6
    compared = 0
    for standing in tree:
        for b in standing["budgets"]:
            key = standing["cluster"], b["path"]
            assert samples[("fairway_budget_usage_gpu_seconds", *key)] == pytest.approx(
                b["usage_gpu_hours"] * 3600, abs=drift
            )
            assert samples[("fairway_budget_entitlement_gpu_seconds", *key)] == pytest.approx(
                b["entitlement_gpu_hours"] * 3600
            )
            assert samples[("fairway_budget_committed_gpu_seconds", *key)] == pytest.approx(
                b["committed_gpu_hours"] * 3600, abs=drift + 3.6
            )
            if b["ratio"] is None:
                assert ("fairway_budget_usage_entitlement_ratio", *key) not in samples
            else:
                assert samples[("fairway_budget_usage_entitlement_ratio", *key)] == pytest.approx(b["ratio"], abs=1e-3)
            assert samples[("fairway_budget_pending_workloads", *key)] == b["pending_workloads"]
            assert samples[("fairway_budget_running_gpus", *key)] == b["running_gpus"]
            compared += 1
    assert compared == 6
    assert samples[("fairway_budget_running_gpus", "default", "nlp/olmo")] == 16
    assert samples[("fairway_budget_pending_workloads", "default", "nlp/olmo")] == 1
