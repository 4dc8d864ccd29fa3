"""upd44: ``fairway update`` changes a pending workload through ``PATCH /api/v1/workloads/{id}/``."""

from __future__ import annotations

from fairway_cli.cli import EXIT_API, EXIT_OK, EXIT_USAGE
from scheduler.models import ArrayGroup, Workload, WorkloadEvent
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures


def _submit(logged_in, *extra: str) -> Workload:  # noqa: F811
    code, _out, err = logged_in("submit", "-b", "nlp/olmo", "-m", "A100", "-g", "4", "-M", "2h", "-t", "4h",
                                *extra, "--", "python", "train.py")  # fmt: skip
    assert code == EXIT_OK, err
    return Workload.objects.order_by("-pk").first()


def test_update_changes_size_runtimes_and_memory(logged_in, cluster):  # noqa: F811
    w = _submit(logged_in)

    code, out, err = logged_in("update", str(w.pk), "-g", "8", "-M", "30m", "-t", "12h", "--retries", "2",
                               "--memory", "64G", "--name", "bigger")  # fmt: skip

    assert code == EXIT_OK, err
    assert out.strip() == (
        f"#{w.pk} bigger now asks 8 × A100, budget nlp/olmo, minimum runtime 30m, wall-time limit 12h — pending, "
        "its place in the queue kept"
    )
    w.refresh_from_db()
    assert (w.gpu_count, w.min_runtime_s, w.max_runtime_s, w.retries, w.memory_bytes) == (8, 1800, 43200, 2, 64 << 30)
    assert WorkloadEvent.objects.filter(workload=w, kind="updated").count() == 1

    code, out, err = logged_in("update", f"#{w.pk}", "-t", "none")
    assert code == EXIT_OK, err
    assert Workload.objects.get(pk=w.pk).max_runtime_s is None

    code, out, err = logged_in("show", str(w.pk))
    assert (
        "updated: changed name python → bigger, GPUs 4 → 8, minimum runtime 2h → 30m, wall-time limit 4h → 12h" in out
    )


def test_update_refusals(logged_in, cluster):  # noqa: F811
    w = _submit(logged_in)

    code, _out, err = logged_in("update", str(w.pk), "-g", "99")
    assert code == EXIT_API and "too_many_gpus" in err

    code, _out, err = logged_in("update", str(w.pk), "-t", "1h")
    assert code == EXIT_API and "max_runtime_below_min_runtime" in err

    code, _out, err = logged_in("update", str(w.pk))
    assert code == EXIT_USAGE and "give something to change" in err

    Workload.objects.filter(pk=w.pk).update(state=Workload.State.RUNNING)
    code, _out, err = logged_in("update", str(w.pk), "-g", "2")
    assert code == EXIT_API and "not_pending" in err
    assert Workload.objects.get(pk=w.pk).gpu_count == 4


def test_update_of_a_group(logged_in, cluster):  # noqa: F811
    _submit(logged_in, "--array", "0-2")
    group = ArrayGroup.objects.get()

    code, out, err = logged_in("update", "--group", str(group.pk), "-g", "2")

    assert code == EXIT_OK, err
    assert out.strip() == f"array group {group.pk}: 3 pending members changed"
    assert set(group.members.values_list("gpu_count", flat=True)) == {2}
