"""fin43: the worker's tick and estimate lines name the cluster as every other line does
(``lab (1)``), not by its id alone (``tick cluster=1``)."""

from __future__ import annotations

import logging

from scheduler.estimates import store_estimates
from scheduler.models import cluster_label
from scheduler.tick import run_tick


def test_the_tick_and_estimate_lines_name_the_cluster(tw, caplog):
    tw.host("h1", gpus=2)
    tw.workload(gpus=1)
    caplog.set_level(logging.INFO)
    run_tick(tw.cluster.pk)
    store_estimates(tw.cluster.pk, tw.now)
    label = f"c1 ({tw.cluster.pk})"
    assert cluster_label(tw.cluster.pk) == label
    lines = [r.getMessage() for r in caplog.records if r.name in ("scheduler.tick", "scheduler.estimates")]
    assert any(line.startswith(f"tick cluster {label}:") for line in lines), lines
    assert any(line.startswith(f"estimates of cluster {label}:") for line in lines), lines


def test_the_label_of_a_missing_cluster_is_its_id(db):
    assert cluster_label(987654) == "#987654"
