"""ext50: ``fairway update ID -t 3h`` changes the wall-time limit of a running workload (Slurm's
``scontrol update TimeLimit=``); raising it is an admin's, other options stay pending-only."""

from __future__ import annotations

from django.utils import timezone

from fairway_cli.cli import EXIT_API, EXIT_OK
from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.tick import run_tick
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures


def test_update_lowers_a_running_workloads_limit_and_may_not_raise_it(logged_in, cluster):  # noqa: F811
    code, _out, err = logged_in("submit", "-b", "nlp/olmo", "-m", "A100", "-g", "1", "-M", "1h", "-t", "4h",
                                "--name", "train", "--", "python", "train.py")  # fmt: skip
    assert code == EXIT_OK, err
    w = Workload.objects.order_by("-pk").first()
    run_tick(w.cluster_id)
    attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=timezone.now())

    code, out, err = logged_in("update", str(w.pk), "-t", "3h")

    assert code == EXIT_OK, err
    assert out.strip() == f"#{w.pk} train — running: wall-time limit now 3h, counted from its start"
    assert Workload.objects.get(pk=w.pk).max_runtime_s == 3 * 3600

    for argv in (("-t", "5h"), ("-t", "none")):
        code, _out, err = logged_in("update", str(w.pk), *argv)
        assert code == EXIT_API and "raise_needs_admin" in err, err
    code, _out, err = logged_in("update", str(w.pk), "-t", "30m")
    assert code == EXIT_API and "max_runtime_below_min_runtime" in err, err
    code, _out, err = logged_in("update", str(w.pk), "-g", "2")
    assert code == EXIT_API and "not_pending" in err, err
    row = Workload.objects.get(pk=w.pk)
    assert (row.max_runtime_s, row.gpu_count) == (3 * 3600, 1)
