"""do_submit_workload: what it records, and every refusal (with nothing created)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import override_settings

from budgets.services import do_archive_budget, do_create_budget, load_tree
from scheduler.models import GPU, Workload, WorkloadEvent
from scheduler.services import SubmissionError, do_submit_workload


def test_submission_records_pending_workload_with_seq_event_and_tick(
    researcher, submit_kwargs, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        workload = do_submit_workload(researcher, **submit_kwargs(env={"A": "1", "B": {"value": "x", "secret": True}}))

    workload.refresh_from_db()
    assert workload.state == Workload.State.PENDING
    assert workload.seq == workload.pk
    assert workload.submitted_at is not None
    assert workload.env == {"A": {"value": "1", "secret": False}, "B": {"value": "x", "secret": True}}
    assert workload.allocated
    event = WorkloadEvent.objects.get(workload=workload)
    assert (event.kind, event.actor) == ("submitted", researcher)
    assert event.data["budget"] == "nlp/olmo"
    assert len(callbacks) == 1  # the tick request, sent only after commit


def test_submission_keeps_given_submission_time_and_duration_hint(researcher, submit_kwargs):
    when = datetime(2017, 10, 3, 12, 0, tzinfo=UTC)
    workload = do_submit_workload(researcher, **submit_kwargs(submitted_at=when, duration_hint_s=600))
    assert workload.submitted_at == when
    assert workload.duration_hint_s == 600


def test_seq_increases_with_each_submission(researcher, submit_kwargs):
    first = do_submit_workload(researcher, **submit_kwargs())
    second = do_submit_workload(researcher, **submit_kwargs())
    assert second.seq > first.seq


def test_seq_is_the_id_set_by_the_insert_itself_after_deletions_too(researcher, submit_kwargs):
    """``seq`` comes with the INSERT (``scheduler.services._id_and_seq``: PostgreSQL's ``nextval``,
    SQLite's ``sqlite_sequence``), not from an UPDATE: equal to the id the database gives, also
    when the newest rows were deleted (an id is never given twice) and for an array's members."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    first = do_submit_workload(researcher, **submit_kwargs())
    doomed = [do_submit_workload(researcher, **submit_kwargs()) for _ in range(2)]
    Workload.objects.filter(pk__in=[w.pk for w in doomed]).delete()
    with CaptureQueriesContext(connection) as ctx:
        after = do_submit_workload(researcher, **submit_kwargs())
    assert not [q for q in ctx.captured_queries if q["sql"].startswith("UPDATE") and "seq" in q["sql"]]
    array = do_submit_workload(researcher, **submit_kwargs(array="0-2"))
    rows = list(Workload.objects.order_by("pk"))
    assert [w.seq for w in rows] == [w.pk for w in rows] and len(rows) == 5
    assert (after.seq, array.seq) == (after.pk, array.pk)
    assert array.pk > after.pk > max(w.pk for w in doomed) > first.pk


def test_a_submission_is_timed_once_under_its_cluster(researcher, submit_kwargs):
    """``fairway_submission_duration_seconds`` counts each submission under its cluster's id (the
    histogram's decorator belongs on ``do_submit_workload``, not on a helper beside it)."""
    from scheduler import histograms

    histograms.reset()
    workload = do_submit_workload(researcher, **submit_kwargs())
    raw = histograms._raw(histograms.SUBMISSION_DURATION)  # noqa: SLF001 -- the stored series
    assert raw.get(f"{workload.cluster_id}{histograms.SEP}count") == 1.0


def test_budget_cluster_and_model_may_be_given_by_name(researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs(budget="nlp/olmo", cluster="default"))
    assert workload.budget.path == "nlp/olmo"
    assert workload.cluster.name == "default"


def test_member_of_an_ancestor_may_submit_to_a_leaf_below(manager, submit_kwargs, org_tree):
    workload = do_submit_workload(manager, **submit_kwargs(budget=org_tree["nlp/tulu"]))
    assert workload.budget == org_tree["nlp/tulu"]


def test_unallocated_submission_with_zero_minimum_runtime(researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs(min_runtime_s=0))
    assert not workload.allocated


def test_gang_of_whole_hosts_is_accepted(researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=16))
    assert workload.gpu_count == 16


def test_request_that_fits_on_a_drained_or_faulty_host_is_still_accepted(researcher, submit_kwargs, hosts):
    # Rejection is about hardware only (DESIGN.md §3.3): drains and faults pass.
    GPU.objects.filter(host=hosts["h100-1"]).update(health=GPU.Health.UNHEALTHY)
    workload = do_submit_workload(researcher, **submit_kwargs(gpu_model="H100", gpu_count=4))
    assert workload.gpu_model == "H100"


def _refused(user, kwargs) -> SubmissionError:
    before = Workload.objects.count()
    events = WorkloadEvent.objects.count()
    with pytest.raises(SubmissionError) as info:
        do_submit_workload(user, **kwargs)
    assert Workload.objects.count() == before
    assert WorkloadEvent.objects.count() == events
    return info.value


@pytest.mark.parametrize(
    ("overrides", "code", "field"),
    [
        ({"budget": "nlp/nope"}, "unknown_budget", "budget"),
        ({"budget": 999999}, "unknown_budget", "budget"),
        ({"cluster": "nowhere"}, "unknown_cluster", "cluster"),
        ({"gpu_model": "V100"}, "unknown_model", "gpu_model"),
        ({"gpu_count": 12}, "too_many_gpus", "gpu_count"),  # > 8 and not a multiple of 8
        ({"gpu_count": 24}, "too_many_gpus", "gpu_count"),  # 3 whole hosts, only 2 exist
        ({"gpu_model": "H100", "gpu_count": 8}, "too_many_gpus", "gpu_count"),  # one 4-GPU H100 host
        ({"gpu_count": 0}, "invalid_gpu_count", "gpu_count"),
        ({"gpu_count": "4"}, "invalid_gpu_count", "gpu_count"),
        ({"gpu_count": True}, "invalid_gpu_count", "gpu_count"),
        ({"min_runtime_s": -1}, "invalid_min_runtime", "min_runtime"),
        ({"min_runtime_s": 24 * 3600 + 1}, "min_runtime_too_long", "min_runtime"),
        ({"command": []}, "invalid_command", "command"),
        ({"command": "python train.py"}, "invalid_command", "command"),
        ({"command": ["python", 3]}, "invalid_command", "command"),
        ({"command": [""]}, "invalid_command", "command"),
        ({"env": {"1BAD": "x"}}, "invalid_env", "env"),
        ({"env": {"FAIRWAY_WORKLOAD_ID": "7"}}, "invalid_env", "env"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "invalid_env", "env"),
        ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "invalid_env", "env"),
        ({"env": {"A": {"value": "x", "secret": "yes"}}}, "invalid_env", "env"),
        ({"env": {"A": {"secret": True}}}, "invalid_env", "env"),
        ({"env": {"A": ["x"]}}, "invalid_env", "env"),
        ({"env": ["A=1"]}, "invalid_env", "env"),
        ({"name": "  "}, "invalid_name", "name"),
    ],
)
def test_invalid_submission_is_refused_and_creates_nothing(researcher, submit_kwargs, overrides, code, field):
    error = _refused(researcher, submit_kwargs(**overrides))
    assert (error.code, error.field) == (code, field)


def test_minimum_runtime_limit_follows_the_setting(researcher, submit_kwargs, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_MINIMUM_RUNTIME_S": 600}
    error = _refused(researcher, submit_kwargs(min_runtime_s=601))
    assert error.code == "min_runtime_too_long"
    assert do_submit_workload(researcher, **submit_kwargs(min_runtime_s=600)).min_runtime_s == 600


def test_submission_to_a_budget_with_children_is_refused(manager, submit_kwargs):
    error = _refused(manager, submit_kwargs(budget="nlp"))
    assert (error.code, error.field) == ("not_a_leaf", "budget")


def test_outsider_cannot_submit_to_foreign_budget(outsider, submit_kwargs):
    error = _refused(outsider, submit_kwargs())
    assert (error.code, error.field) == ("not_a_member", "budget")


def test_archived_budget_takes_no_submissions(researcher, submit_kwargs, org_tree):
    do_archive_budget(org_tree["nlp/olmo"])
    error = _refused(researcher, submit_kwargs(budget=org_tree["nlp/olmo"]))
    assert error.code == "budget_archived"


def test_a_budget_archived_since_the_tree_was_read_is_refused_by_the_lock(researcher, submit_kwargs, org_tree):
    """The tree a request read before an archive committed still shows the budget live: the
    submission's lock statement reads the archive (``_share_lock_budget``) and refuses; a
    submission into a live budget gets the tree's budget, path and all, without a query."""
    tree = load_tree()
    workload = do_submit_workload(researcher, **submit_kwargs(budget=org_tree["nlp/olmo"]), tree=tree)
    assert workload.budget.path == "nlp/olmo" and workload.budget is not tree[workload.budget_id]
    do_archive_budget(org_tree["nlp/olmo"])
    assert tree[org_tree["nlp/olmo"].pk].archived_at is None
    error = _refused(researcher, {**submit_kwargs(budget=org_tree["nlp/olmo"]), "tree": tree})
    assert (error.code, error.field) == ("budget_archived", "budget")


def test_budget_with_only_archived_children_is_a_leaf(manager, submit_kwargs, org_tree):
    child = do_create_budget(name="old", parent=org_tree["nlp/tulu"])
    assert _refused(manager, submit_kwargs(budget=org_tree["nlp/tulu"])).code == "not_a_leaf"
    do_archive_budget(child)
    assert do_submit_workload(manager, **submit_kwargs(budget=org_tree["nlp/tulu"])).pk


def test_removed_hosts_do_not_count_for_size_checks(researcher, submit_kwargs, hosts):
    hosts["h100-1"].removed_at = datetime(2026, 1, 1, tzinfo=UTC)
    hosts["h100-1"].save()
    assert _refused(researcher, submit_kwargs(gpu_model="H100", gpu_count=1)).code == "unknown_model"


def test_every_bad_field_is_reported_at_once(researcher, submit_kwargs):
    error = _refused(researcher, submit_kwargs(gpu_count=0, command=[], env={"bad-name": "x"}))
    assert {(p.code, p.field) for p in error.problems} == {
        ("invalid_gpu_count", "gpu_count"),
        ("invalid_command", "command"),
        ("invalid_env", "env"),
    }


@override_settings()
def test_cluster_and_model_default_when_unambiguous(researcher, submit_kwargs, cluster):
    # One cluster exists; its models are A100 and H100, so the model stays required.
    workload = do_submit_workload(researcher, **submit_kwargs(cluster=None))
    assert workload.cluster == cluster
    assert _refused(researcher, submit_kwargs(gpu_model="")).code == "unknown_model"


def test_a_leaf_name_without_its_path_is_refused_with_the_path_to_type(researcher, submit_kwargs):
    # A first-time user types the project's name as `fairway budgets` indents it ("olmo"); the
    # refusal said only "No budget 'olmo'." and left them guessing that a path is wanted.
    error = _refused(researcher, submit_kwargs(budget="olmo"))
    assert error.problems[0].code == "unknown_budget"
    assert "did you mean nlp/olmo?" in error.problems[0].message
    error = _refused(researcher, submit_kwargs(budget="nlp/nope"))
    assert error.problems[0].message == "No budget 'nlp/nope'."  # no name to suggest: nothing added


def test_the_feasibility_table_is_made_once_per_kept_hardware_list(cluster):
    """``services._host_table``: the policy's table of a hardware list (the memo hands out the same
    list while no hardware changed) is made once; another list (hardware changed) gets its own."""
    from scheduler import services

    one = [("A100", 8, None, None, {})]
    table = services._host_table(one)
    assert services._host_table(one) is table
    assert services._check_size(cluster, "A100", 16, hardware=one)[1].code == "too_many_gpus"
    two = [*one, ("A100", 8, None, None, {})]
    assert services._host_table(two) is not table
    assert services._check_size(cluster, "A100", 16, hardware=two) == ("A100", None)
