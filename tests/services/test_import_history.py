"""``manage.py import_history``: the Philly trace's preceding days through the simulator, and a
Slurm ``sacct --parsable2`` export; every bad line reported, nothing written on error."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from budgets.models import UsageEntry
from budgets.services import do_create_budget
from scheduler.models import Attempt, AttemptGPU, Workload, WorkloadEvent
from scheduler.services import do_create_cluster, do_register_host
from tests.conftest import connected

TRACE = """job_id,submit_time_s,vc,num_gpus,duration_s,duration_pcs_s
1,0,aa,2,7200,
2,600,bb,4,3600,
3,1200,aa,1,600,
4,90000,bb,2,1800,
5,172800,aa,1,60,
"""


def _rows() -> tuple[int, ...]:
    return (
        Workload.objects.count(),
        Attempt.objects.count(),
        AttemptGPU.objects.count(),
        WorkloadEvent.objects.count(),
        UsageEntry.objects.count(),
    )


@pytest.fixture
def philly(db, researcher, org_tree):
    cluster = do_create_cluster("philly")
    for h in ("p1", "p2"):
        connected(do_register_host(cluster, h, [(i, f"GPU-{h}-{i}", "H100", 80000) for i in range(4)])[0])
    do_create_budget(name="vc-aa", parent=org_tree["nlp"])
    do_create_budget(name="vc-bb", parent=org_tree["vision"])
    return cluster


def _import_trace(tmp_path: Path) -> str:
    """``import_history philly`` of ``TRACE`` onto the cluster ``philly`` (2 days before job 5); its output."""
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    out = StringIO()
    call_command(
        "import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
        "--before-job", "5", "--days", "2", "--load", "100", stdout=out,
    )  # fmt: skip
    return out.getvalue()


def test_philly_history_is_simulated_and_written_as_finished_work(philly, tmp_path: Path):
    assert "imported 4 Philly jobs" in _import_trace(tmp_path)
    now = timezone.now()
    rows = list(Workload.objects.order_by("submitted_at"))
    assert [w.name for w in rows] == ["philly-1", "philly-2", "philly-3", "philly-4"]
    assert {w.state for w in rows} == {"succeeded"}
    assert all(w.seq == w.pk for w in rows)
    # The span ends now: job 5's submission (trace second 172800) maps to the import's instant.
    assert abs((rows[0].submitted_at - (now - timedelta(seconds=172800))).total_seconds()) < 60
    for a in Attempt.objects.select_related("workload"):
        assert a.ended_at is not None and a.started_at >= a.workload.submitted_at
        assert a.gpu_links.count() == a.workload.gpu_count and not a.gpu_links.filter(open=True).exists()
        if a.allocated:
            assert a.charged_gpu_seconds == a.workload.gpu_count * (a.ended_at - a.started_at).total_seconds()


def test_the_sample_does_not_follow_the_unallocated_rule():
    """A sample of 6 % (16 GPUs against the demo's week) kept only the jobs the default rule's
    10 % makes unallocated: a week of history with no charged GPU-hour. The sample is drawn apart."""
    from scheduler.history import choose_jobs
    from scheduler.trace import DEFAULT_UNALLOCATED_RULE, TraceJob, UnallocatedRule

    jobs = [TraceJob(i, i * 60, "aa", 1, 3600, None) for i in range(1, 5002)]
    chosen, fraction = choose_jobs(jobs, 5001, 4, capacity_gpus=52, load=0.06, max_duration=3600)
    assert 0.05 < fraction < 0.07 and 200 < len(chosen) < 400
    rule = UnallocatedRule.parse(DEFAULT_UNALLOCATED_RULE)
    unallocated = sum(rule.is_unallocated(j) for j in chosen) / len(chosen)
    assert 0.03 < unallocated < 0.2  # about the rule's 10 %, as in the whole trace (was 100 %)


def test_philly_history_fills_the_pyramid_hours_it_spans_though_the_hosts_are_newer(philly, tmp_path: Path):
    """The demo seeds its hosts just before importing the week before: the imported hours must
    still count the hosts' GPUs and the imported attempts' GPU-time, not zeros."""
    from scheduler.models import ClusterHourlyMetrics, Host

    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    call_command(
        "import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
        "--before-job", "5", "--days", "2", "--load", "100", stdout=StringIO(),
    )  # fmt: skip

    first = Attempt.objects.order_by("started_at").first()
    assert first is not None
    assert all(h.created_at <= first.started_at for h in Host.objects.filter(cluster=philly))
    hours = ClusterHourlyMetrics.objects.filter(cluster=philly)
    last = Attempt.objects.order_by("-ended_at").first()
    assert last is not None and last.ended_at is not None
    complete = hours.filter(hour__gte=first.started_at, hour__lt=last.ended_at - timedelta(hours=1))
    assert complete.exists()
    assert {row.registered_gpu_s for row in complete} == {8 * 3600.0}
    charged = sum(a.charged_gpu_seconds for a in Attempt.objects.filter(allocated=True))
    rolled = sum(row.allocated_gpu_s for row in hours)
    assert charged > 0
    assert rolled == pytest.approx(charged, rel=0.01)


def test_philly_history_refuses_an_unknown_start_job(philly, tmp_path: Path):
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    before = _rows()
    with pytest.raises(CommandError, match="job 99 is not in the trace"):
        call_command("import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
                     "--before-job", "99")  # fmt: skip
    assert _rows() == before


SACCT = """JobID|User|Account|AllocTRES|Start|End|State
101|researcher|olmo|billing=8,cpu=8,gres/gpu=4,mem=64G,node=1|{s}|{e}|COMPLETED
102|researcher|nlp/olmo|cpu=4,gres/gpu:a100=2,mem=8G|{s}|{e}|CANCELLED by 0
102.batch|researcher|olmo|cpu=4,gres/gpu=2|{s}|{e}|COMPLETED
103|researcher|olmo|cpu=4,mem=8G|{s}|{e}|COMPLETED
104|researcher|olmo|cpu=4,gres/gpu=1|{s}|Unknown|RUNNING
"""


def _stamp(dt) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%S")


def test_sacct_export_becomes_usage_intervals(cluster, researcher, org_tree, tmp_path: Path):
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    f.write_text(SACCT.format(s=s, e=e))
    out = StringIO()
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=out)

    entries = list(UsageEntry.objects.order_by("note"))
    assert [(u.budget.name, u.gpus, u.note) for u in entries] == [
        ("olmo", 4, "sacct job 101 user researcher"),
        ("olmo", 2, "sacct job 102 user researcher"),
        ("olmo", 1, "sacct job 104 user researcher (running at the export)"),  # its 3 h so far (import48b)
    ]
    assert (entries[0].end - entries[0].start) == timedelta(hours=2)
    text = out.getvalue()
    assert "imported 3 Slurm jobs (15.0 GPU-hours)" in text and "1 running at the export" in text
    assert "2 skipped" in text and "job step 102.batch" in text and "job 103 held no GPUs" in text


def test_a_bad_sacct_export_names_every_bad_line_and_writes_nothing(cluster, researcher, org_tree, tmp_path: Path):
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    f.write_text(
        "JobID|User|Account|AllocTRES|Start|End|State\n"
        f"1|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED\n"
        f"2|nobody|olmo|gres/gpu=1|{s}|{e}|COMPLETED\n"
        f"3|researcher|nlp|gres/gpu=1|{s}|{e}|COMPLETED\n"
        f"4|researcher|olmo|gres/gpu=x|{s}|{e}|COMPLETED\n"
        f"5|researcher|olmo|gres/gpu=1|{e}|{s}|COMPLETED\n"
        "6|researcher|olmo\n"
        f"7|researcher|olmo|gres/gpu=1|2026-13-05T01:00:00|{e}|COMPLETED\n"
        f"8|researcher|olmo|gres/gpu=1|{s}|1764900000|COMPLETED\n"
    )
    before = _rows()
    with pytest.raises(CommandError) as err:
        call_command("import_history", "sacct", str(f), "--cluster", "default")
    text = str(err.value)
    assert "line 3 (job 2): no user 'nobody'" in text
    assert (
        "line 4 (job 3): Account 'nlp' is nlp, which has sub-budgets: usage is charged to a leaf (nlp/olmo, nlp/tulu)"
        in text
    )
    assert "line 5 (job 4)" in text and "line 6 (job 5): End is before Start" in text
    assert "line 8 (job 7): Start '2026-13-05T01:00:00' is not a time like 2026-11-24T10:00:00" in text
    assert "line 9 (job 8): End '1764900000' is not a time like" in text
    assert "line 7: 3 fields" in text
    assert _rows() == before


def test_a_sacct_export_without_the_columns_is_refused(cluster, tmp_path: Path):
    f = tmp_path / "sacct.txt"
    f.write_text("JobID|User|Start\n1|x|now\n")
    with pytest.raises(CommandError, match="the header lacks Account, AllocTRES, End, State"):
        call_command("import_history", "sacct", str(f), "--cluster", "default")


def test_imported_hours_show_utilization_not_measured_on_every_surface(philly, researcher, tmp_path: Path, monkeypatch):
    """Issue 13 (fix13): the imported week has no NVML samples, so its utilization is unknown,
    not 0 %: the API says null, and the metrics page and ``fairway metrics`` say "not measured"
    in the one wording (``Pyramid.utilization_text``). Agents reporting now do not measure the
    past: their latest samples stand for no imported hour. A measured live minute counts alone."""
    from django.test import Client
    from rest_framework.test import APIClient

    from scheduler.models import GPU, ClusterHourlyMetrics, GpuMinuteSample, Host
    from scheduler.pyramid import hour_of
    from tests.cli.inprocess import run_cli

    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    call_command(
        "import_history", "philly", "--trace", str(trace), "--cluster", "philly", "--user", "researcher",
        "--before-job", "5", "--days", "2", "--load", "100", stdout=StringIO(),
    )  # fmt: skip
    # The agents come up after the import: fresh heartbeats and samples at 70 %.
    Host.objects.filter(cluster=philly).update(last_heartbeat=timezone.now())
    GPU.objects.filter(host__cluster=philly).update(last_sample={"utilization_pct": 70})

    busy = [h for h in ClusterHourlyMetrics.objects.filter(cluster=philly) if h.allocated_gpu_s + h.unallocated_gpu_s]
    assert busy and all(h.measured_gpu_s == 0 for h in busy)
    api = APIClient()
    api.force_authenticate(researcher)
    since = (timezone.now() - timedelta(days=3)).isoformat()
    until = hour_of(timezone.now()).isoformat()  # the imported complete hours only
    [c] = api.get("/api/v1/metrics/pyramid/", {"cluster": "philly", "since": since, "until": until}).json()
    assert c["total"]["occupancy"] > 0
    assert c["total"]["utilization"] is None and c["total"]["utilization_of_occupied"] is None
    assert c["total"]["utilization_text"].startswith("not measured")
    assert {h["utilization"] for h in c["hours"] if h["occupancy"] > 0} == {None}
    assert {h["utilization"] for h in c["hours"] if h["occupancy"] == 0} <= {0.0}

    page = Client()
    page.force_login(researcher)
    html = page.get("/metrics/").content.decode()
    assert 'id="utilization-philly">not measured' in html
    assert "utilization   not measured" in run_cli(monkeypatch, researcher, "metrics", "--cluster", "philly")
    # Prometheus shows the last rolled-up hour; made busy (the tiny trace's last hours are idle).
    last = ClusterHourlyMetrics.objects.filter(cluster=philly).order_by("-hour").first()
    assert last is not None and last.measured_gpu_s == 0
    ClusterHourlyMetrics.objects.filter(pk=last.pk).update(allocated_gpu_s=3600.0)
    scrape = Client().get("/metrics").content.decode()
    assert 'fairway_pyramid_occupancy_ratio{cluster="philly"} 0.125' in scrape
    assert 'fairway_pyramid_utilization_ratio{cluster="philly"}' not in scrape  # absent, not 0

    # One measured busy minute now (and no latest sample to stand in for the current hour): the
    # current hour's utilization is that minute's mean; the range's is not measured, not that
    # minute's mean projected onto the imported days (import48: "72% (…, measured over less than
    # 1% of the occupied GPU-time)" on the demo's metrics page).
    GPU.objects.filter(host__cluster=philly).update(last_sample={})
    a = Attempt.objects.order_by("pk").first()
    assert a is not None
    # Two minutes ago, but inside the current (partial) hour: in an hour's first two minutes that
    # is the hour's first minute (the minute two minutes ago belongs to the complete hour before).
    now = timezone.now()
    minute = max(hour_of(now), now.replace(second=0, microsecond=0) - timedelta(minutes=2))
    Attempt.objects.filter(pk=a.pk).update(placed_at=minute, started_at=minute, ended_at=minute + timedelta(minutes=1))
    for link in a.gpu_links.all():
        GpuMinuteSample.objects.create(
            gpu=link.gpu, minute=minute, samples=2, utilization_samples=2, utilization_sum=80.0
        )
    [c] = api.get("/api/v1/metrics/pyramid/", {"cluster": "philly", "since": since}).json()
    [live] = [h for h in c["hours"] if h["partial"]]
    assert live["utilization_of_occupied"] == pytest.approx(0.4)
    assert c["total"]["utilization_measured"] < 0.005
    assert c["total"]["utilization"] is None and c["total"]["utilization_of_occupied"] is None
    assert c["total"]["utilization_text"].startswith("not measured (utilization samples for less than 1% of")
    # the same on the page and in the CLI (the 7 days: the imported hours and the current one)
    said = "not measured (utilization samples for less than 1% of the occupied GPU-time"
    assert f'id="utilization-philly">{said}' in page.get("/metrics/").content.decode()
    assert f"utilization   {said}" in run_cli(monkeypatch, researcher, "metrics", "--cluster", "philly")


def test_a_sacct_export_imported_again_is_refused_and_adds_nothing(cluster, researcher, org_tree, tmp_path: Path):
    """brk30: the same file imported twice doubled the lab's usage (its ratios, its place in the
    queue) without a word; a job already imported on the cluster is refused like a bad line."""
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    f.write_text(SACCT.format(s=s, e=e))
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
    before = _rows()
    with pytest.raises(CommandError) as err:
        call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
    assert "(job 101): JobID 101 is already imported on default" in str(err.value)
    assert _rows() == before


def test_a_sacct_export_with_a_byte_order_mark_is_read(cluster, researcher, org_tree, tmp_path: Path):
    """brk30: a UTF-8 byte order mark (an export saved by a Windows editor) read as a header
    lacking JobID, which it plainly has."""
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    f.write_bytes(b"\xef\xbb\xbf" + SACCT.format(s=s, e=e).encode())
    out = StringIO()
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=out)
    assert "imported 3 Slurm jobs" in out.getvalue()


def test_philly_history_is_imported_before_any_agent_has_connected(db, researcher, org_tree, tmp_path: Path):
    """try32: the demo seeds its hosts, imports the week before, then starts the agents. Since a
    registered host is ``offline`` until its agent's first hello (mend31), the simulated past ran
    on offline hosts: "imported 0 Philly jobs", the demo's week of history gone. The past ran on
    the cluster's hosts as they are registered, taken as active and healthy (as the what-if)."""
    cluster = do_create_cluster("philly")
    for h in ("p1", "p2"):
        do_register_host(cluster, h, [(i, f"GPU-{h}-{i}", "H100", 80000) for i in range(4)])
    assert set(cluster.hosts.values_list("state", flat=True)) == {"offline"}
    do_create_budget(name="vc-aa", parent=org_tree["nlp"])
    do_create_budget(name="vc-bb", parent=org_tree["vision"])
    assert "imported 4 Philly jobs" in _import_trace(tmp_path)
    assert Attempt.objects.filter(workload__cluster=cluster).count() >= 4
    assert set(cluster.hosts.values_list("state", flat=True)) == {"offline"}  # the import changes no host


def test_the_statement_names_the_slurm_user_of_imported_jobs(cluster, researcher, org_tree, tmp_path: Path):
    """tryout35: the statement is "by project and user", but a week imported from ``sacct`` (each
    job's User known, checked and kept in its interval's note) read "(usage entry)" for every row:
    the lab lead could not see who used the imported GPU-hours. An imported job's row now names
    its user; an entry an admin typed in stays "(usage entry)"."""
    from budgets.statement import budget_statement

    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    f.write_text(SACCT.format(s=s, e=e))
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
    UsageEntry.objects.create(budget=org_tree["nlp/olmo"], cluster=cluster, start=now, end=now, gpu_seconds=3600)

    day = now.date()
    rows = budget_statement(org_tree["nlp/olmo"], day - timedelta(days=1), day)
    users: dict[str, float] = {}
    for r in rows:  # a row per UTC day: the jobs cross midnight when the test runs before 03:00 UTC
        users[r.user] = round(users.get(r.user, 0) + r.allocated_gpu_hours, 3)
    assert users.get("researcher", 0) + users.get("(usage entry)", 0) == pytest.approx(16.0, abs=0.01), users
    assert users.get("(usage entry)") == 1.0, users  # the typed-in lump only


def test_a_sacct_account_naming_two_leaf_budgets_is_refused_not_charged_to_one(
    cluster, researcher, org_tree, tmp_path: Path
):
    """try38: with a leaf ``olmo`` under both ``nlp`` and ``vision``, Account ``olmo`` went to
    whichever was loaded first, silently: another program's usage. Ambiguous: a bad line naming
    both paths; the path itself still imports."""
    from budgets.services import do_archive_budget

    do_create_budget(name="olmo", parent=org_tree["vision"])
    do_archive_budget(org_tree["nlp/tulu"])
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = tmp_path / "sacct.txt"
    f.write_text(
        "JobID|User|Account|AllocTRES|Start|End|State\n"
        f"1|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED\n"
        f"2|researcher|nlp/olmo|gres/gpu=1|{s}|{e}|COMPLETED\n"
        f"3|researcher|tulu|gres/gpu=1|{s}|{e}|COMPLETED\n"
    )
    before = _rows()
    with pytest.raises(CommandError) as err:
        call_command("import_history", "sacct", str(f), "--cluster", "default")
    text = str(err.value)
    assert "line 2 (job 1): Account 'olmo' names 2 leaf budgets (nlp/olmo, vision/olmo): write its path" in text
    assert "line 3" not in text
    assert "line 4 (job 3): Account 'tulu' is the archived budget nlp/tulu" in text
    assert _rows() == before


@pytest.mark.parametrize(
    ("tres", "gpus"),
    [
        ("cpu=8,gres/gpu:h100=2,gres/gpu=2,mem=64G", 2),
        ("gres/gpu=2,gres/gpu:h100=2", 2),
        ("gres/gpu:a100=1,gres/gpu:v100=3", 4),
        ("gres/gpu:a100=2", 2),
        ("cpu=8,mem=64G", None),
    ],
)
def test_the_gpus_of_an_alloctres_are_its_total_or_every_type_together(tres, gpus):
    """try38: ``gres/gpu:a100=1,gres/gpu:v100=3`` without the total was read as 1 GPU (the first
    type's), silently a quarter of the usage."""
    from scheduler.history import _gpus_of

    assert _gpus_of(tres) == gpus


def _sacct_lines(tmp_path: Path, *rows: str) -> Path:
    f = tmp_path / "sacct.txt"
    f.write_text("JobID|User|Account|AllocTRES|Start|End|State\n" + "".join(f"{r}\n" for r in rows), encoding="utf-8")
    return f


def _refusal(f: Path) -> str:
    before = _rows()
    with pytest.raises(CommandError) as err:
        call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
    assert _rows() == before  # a refused file changes nothing
    return str(err.value)


def test_a_sacct_job_holding_more_gpus_than_the_cluster_is_refused(cluster, researcher, org_tree, tmp_path: Path):
    """brk46: ``gres/gpu=2147483647`` since 2026-11-01 was imported as 1.5 trillion GPU-hours, the
    budget's fair-share rank sunk for the whole window. A job holds at most the cluster's registered
    GPUs (``default``: 8 + 8 + 4)."""
    e = _stamp(timezone.now() - timedelta(hours=1))
    s = _stamp(timezone.now() - timedelta(hours=3))
    f = _sacct_lines(
        tmp_path,
        f"1|researcher|olmo|gres/gpu=2147483647|2026-11-01T00:00:00|{e}|COMPLETED",
        f"2|researcher|olmo|gres/gpu=21|{s}|{e}|COMPLETED",
        f"3|researcher|olmo|gres/gpu=20|{s}|{e}|COMPLETED",
    )
    text = _refusal(f)
    assert "line 2 (job 1): 2147483647 GPUs is more than cluster default has (20)" in text
    assert "line 3 (job 2): 21 GPUs is more than cluster default has (20)" in text
    assert "line 4" not in text


def test_a_sacct_job_on_a_cluster_without_gpus_is_held_to_the_bound(db, researcher, org_tree, tmp_path: Path):
    """With no registered GPU (an import before the agents join) a job holds at most
    ``SACCT_GPUS_WITHOUT_HOSTS``."""
    from scheduler.history import SACCT_GPUS_WITHOUT_HOSTS
    from scheduler.services import do_create_cluster

    do_create_cluster("default")
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = _sacct_lines(tmp_path, f"1|researcher|olmo|gres/gpu={SACCT_GPUS_WITHOUT_HOSTS + 1}|{s}|{e}|COMPLETED")
    assert f"GPUs is more than cluster default has (no registered GPUs: at most {SACCT_GPUS_WITHOUT_HOSTS})" in (
        _refusal(f)
    )
    f = _sacct_lines(tmp_path, f"1|researcher|olmo|gres/gpu={SACCT_GPUS_WITHOUT_HOSTS}|{s}|{e}|COMPLETED")
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=StringIO())
    assert UsageEntry.objects.get().gpus == SACCT_GPUS_WITHOUT_HOSTS


def test_sacct_usage_before_the_fair_share_window_is_clipped(cluster, researcher, org_tree, tmp_path: Path, settings):
    """brk46: Start ``0001-01-01T00:00:00`` was imported as 71 million GPU-hours. Only the window
    counts (DESIGN.md §3.1): an interval starts at the window's start at the earliest, and a job that
    ended before it adds nothing (skipped, said)."""
    settings.FAIRWAY = {**settings.FAIRWAY, "LOOKBACK_WINDOW_S": 7 * 86400}
    now = timezone.now()
    e = _stamp(now - timedelta(hours=1))
    f = _sacct_lines(
        tmp_path,
        f"1|researcher|olmo|gres/gpu=4|0001-01-01T00:00:00|{e}|COMPLETED",
        f"2|researcher|olmo|gres/gpu=4|0001-01-01T00:00:00|{_stamp(now - timedelta(days=8))}|COMPLETED",
    )
    out = StringIO()
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=out)
    entry = UsageEntry.objects.get()
    assert abs((entry.start - (now - timedelta(days=7))).total_seconds()) < 60
    text = out.getvalue()
    assert "imported 1 Slurm jobs (668." in text or "imported 1 Slurm jobs (667." in text, text
    assert "line 3: job 2 ended before the fair-share window (7 days): adds nothing" in text


def test_a_sacct_job_of_no_length_is_skipped(cluster, researcher, org_tree, tmp_path: Path):
    """brk46: Start equal to End was a usage interval of no length. It held GPUs for no time:
    skipped and said, as a job that held no GPUs (End before Start stays refused)."""
    at = _stamp(timezone.now() - timedelta(hours=1))
    f = _sacct_lines(tmp_path, f"1|researcher|olmo|gres/gpu=4|{at}|{at}|COMPLETED")
    out = StringIO()
    call_command("import_history", "sacct", str(f), "--cluster", "default", stdout=out)
    assert "skipped line 2: job 1 ran for no time (Start is End)" in out.getvalue()
    assert UsageEntry.objects.count() == 0


def test_a_repeated_tres_key_is_refused_as_ambiguous(cluster, researcher, org_tree, tmp_path: Path):
    """brk46: ``gres/gpu=1,gres/gpu=2`` was read as 2 (the last value won)."""
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = _sacct_lines(
        tmp_path,
        f"1|researcher|olmo|gres/gpu=1,gres/gpu=2|{s}|{e}|COMPLETED",
        f"2|researcher|olmo|cpu=4,gres/gpu:a100=1,cpu=8,gres/gpu:a100=1|{s}|{e}|COMPLETED",
    )
    text = _refusal(f)
    assert "line 2 (job 1): AllocTRES names gres/gpu twice: which one is meant is ambiguous" in text
    assert "line 3 (job 2): AllocTRES names cpu, gres/gpu:a100 twice" in text


def test_a_sacct_job_id_with_an_invisible_character_is_refused(cluster, researcher, org_tree, tmp_path: Path):
    """brk46: a JobID with U+202E (right-to-left override) was stored in the interval's note as is,
    shown reversed on every page that prints it. The rule of every name (gpu_text.invisible_problem)."""
    now = timezone.now()
    s, e = _stamp(now - timedelta(hours=3)), _stamp(now - timedelta(hours=1))
    f = _sacct_lines(tmp_path, f"12\u202e34|researcher|olmo|gres/gpu=1|{s}|{e}|COMPLETED")
    text = _refusal(f)
    assert "\u202e" not in text
    assert (
        "line 2 (job '12\\u202e34'): JobID holds an invisible or control character (U+202E); "
        "it must be printable text" in text
    )


def test_imported_hours_count_the_hosts_available_as_the_simulated_past_took_them(db, researcher, org_tree, tmp_path):
    """lead47: the past is simulated on the hosts taken as active and healthy, but its hours were
    rolled up with the hosts' state at the import (``offline`` until the agents' first hello, as in
    the demo): every idle GPU-hour of the week read as unavailable, availability equal to occupancy
    (85 % and 85 % on the demo's metrics page). The imported hours count the hosts available."""
    from scheduler.models import ClusterHourlyMetrics

    cluster = do_create_cluster("philly")
    for h in ("p1", "p2"):
        do_register_host(cluster, h, [(i, f"GPU-{h}-{i}", "H100", 80000) for i in range(4)])
    do_create_budget(name="vc-aa", parent=org_tree["nlp"])
    do_create_budget(name="vc-bb", parent=org_tree["vision"])
    _import_trace(tmp_path)
    rows = list(ClusterHourlyMetrics.objects.filter(cluster=cluster))
    assert rows and any(r.allocated_gpu_s + r.unallocated_gpu_s < r.registered_gpu_s for r in rows)
    assert all(r.available_gpu_s == r.registered_gpu_s for r in rows)
    assert set(cluster.hosts.values_list("state", flat=True)) == {"offline"}  # the import changes no host
