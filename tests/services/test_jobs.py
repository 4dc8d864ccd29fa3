"""Job options end to end on the database (docs/jobs.md): mounts, wall-time limits, retries,
arrays and dependencies — their refusals at submission, and what the tick and the lifecycle do
with them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from accounts.services import do_add_membership
from scheduler import lifecycle
from scheduler.models import ArrayGroup, Attempt, Mount, Workload, WorkloadEvent
from scheduler.services import SubmissionError, do_cancel_group, do_submit_workload
from scheduler.tick import run_tick


def _codes(exc: pytest.ExceptionInfo[SubmissionError]) -> list[str]:
    return [p.code for p in exc.value.problems]


@pytest.fixture
def catalog(cluster, org_tree):
    Mount.objects.create(cluster=cluster, name="datasets", host_path="/data/sets", container_path="/datasets")
    team = Mount.objects.create(
        cluster=cluster,
        name="nlp-scratch",
        host_path="/scratch/nlp",
        container_path="/scratch",
        read_only=False,
        access=Mount.Access.BUDGETS,
    )
    team.budgets.add(org_tree["nlp"])
    Mount.objects.create(
        cluster=cluster, name="home", host_path="/home/{user}", container_path="/home/me", access=Mount.Access.HOME
    )
    return cluster


# --- mounts -------------------------------------------------------------------------------------


def test_mounts_are_resolved_at_submission_with_the_owners_home(researcher, submit_kwargs, catalog):
    w = do_submit_workload(researcher, **submit_kwargs(mounts=["datasets", "nlp-scratch", "home"]))
    assert w.mounts == [
        {"name": "datasets", "host_path": "/data/sets", "container_path": "/datasets", "read_only": True},
        {"name": "nlp-scratch", "host_path": "/scratch/nlp", "container_path": "/scratch", "read_only": False},
        {"name": "home", "host_path": "/home/researcher", "container_path": "/home/me", "read_only": True},
    ]
    assert WorkloadEvent.objects.get(workload=w).data["mounts"] == ["datasets", "nlp-scratch", "home"]


@pytest.mark.parametrize(
    "names, needle",
    [
        (["nope"], "No mount 'nope'"),
        (["../etc"], "is not a mount name"),
        (["datasets", "datasets"], "named twice"),
        ("datasets", "a list of mount names"),
        ([None], "mounts: each entry is a mount name, not null"),  # tryout: "'None' is not a mount name"
        ([{"name": "datasets"}], "mounts: each entry is a mount name, not a mapping"),
    ],
)
def test_unknown_or_malformed_mounts_are_refused(researcher, submit_kwargs, catalog, names, needle):
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(mounts=names))
    assert _codes(exc) == ["invalid_mount"]
    assert needle in exc.value.problems[0].message
    assert not Workload.objects.exists()


def test_a_budgets_mount_is_refused_to_other_budgets_work(outsider, submit_kwargs, org_tree, catalog):
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"], mounts=["nlp-scratch"]))
    assert _codes(exc) == ["invalid_mount"]
    assert "other budgets" in exc.value.problems[0].message


def test_a_home_mount_is_refused_for_a_user_name_that_could_escape(submit_kwargs, org_tree, catalog):
    from accounts.models import User

    sneaky = User.objects.create_user("..", password="x")  # noqa: S106 -- a test user
    do_add_membership(sneaky, org_tree["nlp/olmo"])
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(sneaky, **submit_kwargs(mounts=["home"]))
    assert _codes(exc) == ["invalid_mount"]


@pytest.mark.parametrize(
    "host_path, container_path, access, field",
    [
        ("data/sets", "/d", "all", "host_path"),
        ("/data/../etc", "/d", "all", "host_path"),
        ("/data", "/d/../x", "all", "container_path"),
        ("/home/{user}", "/h", "all", "host_path"),  # {user} only for access home
        ("/home", "/h", "home", "host_path"),  # home needs {user}
        ("/data", "/{user}", "all", "container_path"),
    ],
)
def test_the_catalog_refuses_unsafe_paths(cluster, host_path, container_path, access, field):
    m = Mount(cluster=cluster, name="m", host_path=host_path, container_path=container_path, access=access)
    with pytest.raises(ValidationError) as exc:
        m.full_clean()
    assert field in exc.value.message_dict


# --- wall-time limit and retries ----------------------------------------------------------------


@pytest.mark.parametrize(
    "max_runtime, code",
    [
        (7201, "max_runtime_too_long"),
        (1800, "max_runtime_below_min_runtime"),
        (0, "invalid_max_runtime"),
        ("1h", "invalid_max_runtime"),
    ],
)
def test_bad_wall_time_limits_are_refused(researcher, submit_kwargs, settings, max_runtime, code):
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_RUNTIME_LIMIT_S": 7200}
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(max_runtime_s=max_runtime))
    assert _codes(exc) == [code]


def test_runtime_limits_are_said_as_durations(researcher, submit_kwargs, settings):
    """The limits read as every duration does ("2h"), not "7200 s (2 h)" (try40's leftover)."""
    settings.FAIRWAY = {**settings.FAIRWAY, "MAX_RUNTIME_LIMIT_S": 7200, "MAX_MINIMUM_RUNTIME_S": 5400}
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(max_runtime_s=7201))
    assert exc.value.problems[0].message == "The wall-time limit is at most 2h."
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(min_runtime_s=5401))
    assert exc.value.problems[0].message.startswith("The minimum runtime is at most 1h30m: ")


@pytest.mark.parametrize("retries", [-1, 11, "2", True])
def test_bad_retries_are_refused(researcher, submit_kwargs, retries):
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(retries=retries))
    assert _codes(exc) == ["invalid_retries"]


def _start(w: Workload, now) -> Attempt:
    """Tick at ``now`` and confirm the attempt of ``w`` started then."""
    run_tick(w.cluster_id, now=now)
    attempt = Attempt.objects.select_related("host").get(workload=w, ended_at__isnull=True)
    assert lifecycle.attempt_started(attempt.host, attempt.pk, now=now)
    return attempt


def test_a_workload_past_its_wall_time_is_stopped_as_timeout_and_ends_failed(researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=600, max_runtime_s=900))
    t0 = timezone.now()
    attempt = _start(w, t0)

    run_tick(w.cluster_id, now=t0 + timedelta(seconds=899))
    attempt.refresh_from_db()
    assert attempt.stop_requested_at is None

    run_tick(w.cluster_id, now=t0 + timedelta(seconds=900))
    attempt.refresh_from_db()
    assert (attempt.stop_reason, attempt.stop_requested_at) == ("timeout", t0 + timedelta(seconds=900))
    event = WorkloadEvent.objects.get(workload=w, kind="timeout")
    # lim42: the duration in the project's words (fairway_cli.numbers.duration_text), not "900 s"
    assert event.message == "attempt 1 stopping: wall-time limit of 15m reached"
    assert event.data["max_runtime_s"] == 900

    lifecycle.attempt_exited(attempt.host, attempt.pk, -15, now=t0 + timedelta(seconds=930))
    attempt.refresh_from_db()
    w.refresh_from_db()
    assert attempt.end_reason == "timeout"
    assert attempt.charged_gpu_seconds == 930  # charged to the release
    assert w.state == Workload.State.FAILED  # not requeued


def test_a_non_zero_exit_is_retried_with_the_same_submission_time_then_fails(researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, retries=1))
    submitted = w.submitted_at
    t0 = timezone.now()
    first = _start(w, t0)
    lifecycle.attempt_exited(first.host, first.pk, 3, now=t0 + timedelta(seconds=10))
    w.refresh_from_db()
    assert (w.state, w.retries_used, w.submitted_at) == (Workload.State.PENDING, 1, submitted)
    retried = WorkloadEvent.objects.get(workload=w, kind="retried")
    assert "retry 1 of 1" in retried.message

    second = _start(w, t0 + timedelta(seconds=20))
    assert second.number == 2
    lifecycle.attempt_exited(second.host, second.pk, 3, now=t0 + timedelta(seconds=30))
    w.refresh_from_db()
    assert w.state == Workload.State.FAILED


# --- arrays and dependencies --------------------------------------------------------------------


def test_an_array_makes_one_workload_per_index_in_one_group(researcher, submit_kwargs):
    first = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, array="0-3%2", env={"A": "1"}))
    group = ArrayGroup.objects.get()
    assert first.group == group and (group.spec, group.limit) == ("0-3%2", 2)
    members = list(group.members.order_by("array_index"))
    assert [m.array_index for m in members] == [0, 1, 2, 3]
    assert [m.name for m in members] == ["pretrain[0]", "pretrain[1]", "pretrain[2]", "pretrain[3]"]
    assert [m.env["FAIRWAY_ARRAY_INDEX"]["value"] for m in members] == ["0", "1", "2", "3"]
    assert len({m.submitted_at for m in members}) == 1
    assert len({m.seq for m in members}) == 4

    # %2: the tick starts two members, the others wait with reason dependency (§3.8).
    run_tick(first.cluster_id, now=timezone.now())
    states = dict(group.members.values_list("array_index", "state"))
    assert list(states.values()).count(Workload.State.STARTING) == 2
    waiting = group.members.filter(state=Workload.State.PENDING)
    assert {m.pending_reason for m in waiting} == {"dependency"}
    assert waiting.first().pending_detail == {"group": str(group.pk), "limit": 2}

    assert len(do_cancel_group(researcher, group)) == 4
    assert group.members.filter(state=Workload.State.CANCELED).count() == 2  # the pending ones at once


@pytest.mark.parametrize("max_runtime_s", [3 * 3600, None])
def test_members_waiting_on_the_cap_are_estimated_when_a_wall_time_limit_frees_a_slot(
    researcher, submit_kwargs, max_runtime_s
):
    """est31: members waiting on their group's %N cap never had an estimate, although the forward
    simulation ends running work at its wall-time limit. With a limit, the running member's timeout
    frees the slot a grace later and the next member starts there; without one, none (an ``after``
    wait stays without one: test_estimate.py)."""
    from django.conf import settings

    from scheduler.estimates import Coverage, estimate_coverage, store_estimates
    from scheduler.reports import estimate_words

    kw = submit_kwargs(gpu_count=1, array="0-2%1", max_runtime_s=max_runtime_s)
    first = do_submit_workload(researcher, **kw)
    now = timezone.now().replace(microsecond=0)
    run_tick(first.cluster_id, now=now)
    waiting = list(first.group.members.filter(state=Workload.State.PENDING).order_by("array_index"))
    assert [m.pending_detail for m in waiting] == [{"group": str(first.group_id), "limit": 1}] * 2
    store_estimates(first.cluster_id, now)
    got = [Workload.objects.get(pk=m.pk) for m in waiting]
    if max_runtime_s is None:
        assert [m.estimated_start for m in got] == [None, None]
        assert estimate_coverage(first.cluster_id) == Coverage(counted=2, estimated=0)
        # The run searched a whole window and found none: it says so (try37; was "Not known yet").
        assert estimate_words(got[0]).startswith("No start within the next 7 days")
        return
    step = max_runtime_s + int(settings.FAIRWAY["GRACE_PERIOD_S"])
    assert [m.estimated_start for m in got] == [now + timedelta(seconds=step), now + timedelta(seconds=2 * step)]
    assert estimate_coverage(first.cluster_id) == Coverage(counted=2, estimated=2)
    assert estimate_words(got[0]).startswith("By ")
    run_tick(first.cluster_id, now=now + timedelta(seconds=5))  # the reason unchanged: kept
    assert Workload.objects.get(pk=got[0].pk).estimated_start == now + timedelta(seconds=step)


@pytest.mark.parametrize(
    "spec",
    [
        "5-1",
        "a-b",
        "0-1000",
        "1%0",
        "",
        "0-3%",
        # what the database cannot hold is refused, not a 500 (tryout22): SQLite's 64-bit integer
        # overflows at the first two, PostgreSQL's integer already at the next two
        "99999999999999999999",
        "0-1%99999999999999999999",
        "2147483648",
        "0-1%1001",
        "1" * 5000,
    ],
)
def test_bad_arrays_are_refused(researcher, submit_kwargs, spec):
    # "" too (in49): no array is None (absent), as on the API; "" named no index and read as none
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(array=spec))
    assert _codes(exc) == ["invalid_array"]
    assert not ArrayGroup.objects.exists()


def test_after_ok_waits_then_starts_and_a_failed_dependency_cancels(researcher, submit_kwargs):
    a = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="a"))
    b = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="b", after=[f"{a.pk}:ok"]))
    c = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="c", after=[str(b.pk)]))
    anyway = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, name="d", after=[f"{b.pk}:any"]))
    t0 = timezone.now()
    attempt_a = _start(a, t0)
    for w in (b, c, anyway):
        w.refresh_from_db()
        assert (w.state, w.pending_reason) == (Workload.State.PENDING, "dependency")

    lifecycle.attempt_exited(attempt_a.host, attempt_a.pk, 0, now=t0 + timedelta(seconds=5))
    attempt_b = _start(b, t0 + timedelta(seconds=6))
    lifecycle.attempt_exited(attempt_b.host, attempt_b.pk, 1, now=t0 + timedelta(seconds=9))

    run_tick(a.cluster_id, now=t0 + timedelta(seconds=10))
    c.refresh_from_db()
    anyway.refresh_from_db()
    assert c.state == Workload.State.CANCELED
    # tryout35: "workload 7 it waited for (after :ok) ended failed" named no id in its "after"
    message = c.events.get(kind="canceled").message
    assert message == f"workload {b.pk}, which it waited for (after {b.pk}:ok), ended failed", message
    assert anyway.state == Workload.State.STARTING  # :any starts whatever the end


def test_bad_dependencies_are_refused(researcher, outsider, submit_kwargs, org_tree):
    theirs = do_submit_workload(outsider, **submit_kwargs(budget=org_tree["vision/sam"]))
    failed = do_submit_workload(researcher, **submit_kwargs())
    Workload.objects.filter(pk=failed.pk).update(state=Workload.State.FAILED)
    for after, code in [
        (["999999"], "invalid_after"),
        ([str(theirs.pk)], "invalid_after"),
        ([f"{failed.pk}:maybe"], "invalid_after"),
        ([f"{failed.pk}:ok"], "dependency_failed"),
    ]:
        with pytest.raises(SubmissionError) as exc:
            do_submit_workload(researcher, **submit_kwargs(after=after))
        assert _codes(exc) == [code], after
    # try40: another's workload read "No workload 12 of yours to wait for", as if #12 did not exist
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(after=[str(theirs.pk)]))
    assert exc.value.problems[0].message == (
        f"Workload {theirs.pk} is {outsider.username}'s: only your own workloads can be waited for."
    )
    # The refusal says what a bare id means and how to wait for any end (tryout24: "--after 19"
    # was refused with ":ok can never be met", a condition the user had not written).
    with pytest.raises(SubmissionError) as exc:
        do_submit_workload(researcher, **submit_kwargs(after=[str(failed.pk)]))
    message = exc.value.problems[0].message
    assert f"{failed.pk}:ok (what {failed.pk} alone means) can never be met" in message
    assert f"write {failed.pk}:any" in message
    # :any of a failed workload is met at once
    ok = do_submit_workload(researcher, **submit_kwargs(after=[f"{failed.pk}:any"]))
    assert ok.dependencies.get().condition == "any"
