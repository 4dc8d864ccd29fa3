"""One source, random states (same47): every surface that shows a figure shows the same one.

Each seed builds a random state with the shared fixtures (the ``org_tree`` budgets with random
shares, caps and holds; usage entries; workloads pending, running and finished with attempts over
the 7-day window, allocated or not, with GPU minute samples or without), stops the clock, and
reads the figures from every surface that shows them:

- budget usage, committed, entitlement, share, ratio, rank, owed, attainment, running, pending and
  the cap's words: ``budget_standings`` (the one computation), ``budgets/tree/``, ``fairway --json
  budgets`` and ``fairway budgets``, the budgets page's cells, the admin changelist's columns, and
  the allocated GPU-hours of the budget statement (API CSV and ``fairway statement``);
- a workload's GPU-time and efficiency: the API detail, ``fairway --json seff`` and ``fairway
  seff``/``show``, the workload page;
- the four-metric pyramid and its impact per budget: ``metrics/pyramid/``, ``fairway --json
  metrics`` and ``fairway metrics``, the metrics page.

Text is compared in the words of the one formatting function (``gpu_hours_text``,
``percent_text``, ``efficiency_lines``). tests/api/test_one_standing.py keeps one hand-made state;
this file varies it.
"""

from __future__ import annotations

import csv
import html as html_lib
import io
import json
import random
import re
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from budgets.models import Budget, UsageEntry
from budgets.services import do_set_hold, do_set_shares, load_tree
from fairway_cli.numbers import gpu_hours_text, gpu_time_text, percent_text
from fairway_cli.words import efficiency_lines, occupancy_parts_text
from scheduler.models import GPU, Attempt, AttemptGPU, GpuMinuteSample, Workload
from scheduler.reports import budget_standings
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli

SEEDS = [3, 11, 29, 47]
LEAVES = ("nlp/olmo", "nlp/tulu", "vision/sam")
LISTED = "pending,starting,running,succeeded"


@pytest.fixture(autouse=True)
def _rule(settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "IDLE_UTIL_PCT": 1.0}


def _attempt(rng, workload, gpus, number, start, minutes, *, end, allocated, sampled):
    """An attempt of ``workload`` on ``gpus`` from ``start`` (on a minute) for ``minutes``; sampled
    minutes at random utilization, some minutes without a sample."""
    seconds = minutes * 60 - rng.randint(0, 59)  # a charge of whole GPU-seconds, any of them
    attempt = Attempt.objects.create(
        workload=workload, number=number, host=gpus[0].host, allocated=allocated, placed_at=start,
        started_at=start, ended_at=start + timedelta(seconds=seconds) if end else None,
        end_reason="preempted" if end else "", charged_gpu_seconds=len(gpus) * seconds if end and allocated else 0,
    )  # fmt: skip
    AttemptGPU.objects.bulk_create([AttemptGPU(attempt=attempt, gpu=g, open=not end) for g in gpus])
    if sampled:
        samples = []
        for g in gpus:
            for m in range(minutes):
                if rng.random() < 0.8:
                    util = rng.choice([0.0, 0.5, 12.5, 40.0, 77.0, 100.0])
                    samples.append(
                        GpuMinuteSample(
                            gpu=g,
                            minute=start + timedelta(minutes=m),
                            samples=2,
                            utilization_samples=2,
                            utilization_sum=2 * util,
                            memory_used_max_mb=rng.choice([1024, 30 * 1024, 70 * 1024]),
                        )  # fmt: skip
                    )
        GpuMinuteSample.objects.bulk_create(samples)
    return attempt


def _random_state(rng, org_tree, cluster, users, submit_kwargs):
    """Shares, caps and holds; usage entries; finished, running and pending workloads."""
    for path in ("nlp", "vision", *LEAVES):
        do_set_shares(None, org_tree[path], rng.randint(1, 5))
    for path in LEAVES:
        if rng.random() < 0.5:
            Budget.objects.filter(pk=org_tree[path].pk).update(
                cap_gpu_hours=rng.choice([0, 5, 40, 500]),
                cap_period_days=rng.choice([7, 30]),
                on_cap=rng.choice(["downgrade", "hold"]),
            )
    now = timezone.now().replace(second=0, microsecond=0)
    for path in LEAVES:
        for _ in range(rng.randint(0, 2)):
            end = now - timedelta(minutes=rng.randint(10, 5 * 1440))
            UsageEntry.objects.create(
                budget=org_tree[path], cluster=cluster, start=end - timedelta(minutes=rng.randint(5, 600)),
                end=end, gpus=rng.randint(1, 8),
            )  # fmt: skip
    # each GPU used by one attempt at a time: a host's GPUs are handed out from a clock going back
    gpus = {h: list(GPU.objects.filter(host__name=h).order_by("index")) for h in ("a100-1", "a100-2")}
    free_until = {h: now for h in gpus}
    workloads = []
    for i in range(rng.randint(4, 7)):
        path = rng.choice(LEAVES)
        owner = users[path]
        count = rng.choice([1, 2, 4])
        kind = rng.choice(["finished", "running", "pending", "finished", "pending"])
        model = rng.choice(["A100", "H100"]) if kind == "pending" else "A100"
        if model == "H100":
            count = rng.choice([2, 4])  # h100-1: 4 GPUs, free (placed by the tick)
        elif kind == "pending":
            count = rng.choice([8, 16])  # whole hosts: waits while a running one holds a GPU of them
        w = do_submit_workload(
            owner, **submit_kwargs(name=f"w{i}", gpu_count=count, gpu_model=model, budget=org_tree[path])
        )
        host = rng.choice(list(gpus))
        if kind == "pending":
            Workload.objects.filter(pk=w.pk).update(submitted_at=now - timedelta(minutes=rng.randint(5, 3000)))
            workloads.append(w)
            continue
        tries = rng.randint(1, 3)
        # attempts back to back, the last one ending at now when running
        spans = [rng.randint(3, 180) for _ in range(tries)]
        gaps = [rng.randint(0, 30) for _ in range(tries)]
        end_at = free_until[host] - timedelta(minutes=rng.randint(0, 60) if kind == "finished" else 0)
        start_at = end_at - timedelta(minutes=sum(spans) + sum(gaps))
        free_until[host] = start_at - timedelta(minutes=1)
        Workload.objects.filter(pk=w.pk).update(submitted_at=start_at - timedelta(minutes=rng.randint(0, 120)))
        t = start_at
        allocated = rng.random() < 0.8
        for n, (span, gap) in enumerate(zip(spans, gaps, strict=True), start=1):
            t += timedelta(minutes=gap)
            last_running = kind == "running" and n == tries
            _attempt(
                rng, w, gpus[host][:count], n, t, span, end=not last_running, allocated=allocated,
                sampled=rng.random() < 0.8,
            )  # fmt: skip
            t += timedelta(minutes=span)
        if kind == "finished":
            Workload.objects.filter(pk=w.pk).update(state=Workload.State.SUCCEEDED, finished_at=t)
        else:
            Workload.objects.filter(pk=w.pk).update(state=Workload.State.RUNNING)
        workloads.append(w)
    if rng.random() < 0.4:
        do_set_hold(org_tree[rng.choice(LEAVES)], True)
    run_tick(cluster.pk)  # the pending ones' reasons and estimates (a fitting one may be placed)
    return workloads


@pytest.fixture
def world(request, org_tree, cluster, researcher, outsider, submit_kwargs, monkeypatch):
    from accounts.services import do_add_membership

    rng = random.Random(request.param)
    do_add_membership(researcher, org_tree["nlp/tulu"])
    do_add_membership(researcher, org_tree["vision/sam"])
    users = {"nlp/olmo": researcher, "nlp/tulu": researcher, "vision/sam": researcher}
    workloads = _random_state(rng, org_tree, cluster, users, submit_kwargs)
    at = timezone.now() + timedelta(seconds=rng.randint(0, 59))
    monkeypatch.setattr(timezone, "now", lambda: at)
    return rng, workloads, at


def _cells(row_html: str) -> list[str]:
    """The text of a table row's number cells, tags dropped."""
    cells = re.findall(r'<td class="num[^"]*"[^>]*>(.*?)</td>', row_html, re.S)
    return [html_lib.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells]


@pytest.mark.parametrize("world", SEEDS, indirect=True)
def test_budget_figures_are_one_on_every_surface(world, cluster, researcher, admin, monkeypatch):
    _rng, _workloads, at = world
    standing = budget_standings(cluster, load_tree(), at)
    rows = {b.path: b for b in standing.budgets}
    api = APIClient()
    api.force_authenticate(researcher)

    # API: every field the standing has, as it is
    tree = api.get("/api/v1/budgets/tree/").json()
    by_path = {b["path"]: b for b in tree[0]["budgets"]}
    assert set(by_path) == set(rows)
    for path, b in rows.items():
        for key, value in by_path[path].items():
            if hasattr(b, key) and key not in {"boost_until"}:
                assert value == getattr(b, key), (path, key)

    # CLI: --json is the API's answer; the table's cells in the one wording
    assert json.loads(run_cli(monkeypatch, researcher, "--json", "budgets")) == tree
    table = run_cli(monkeypatch, researcher, "budgets").splitlines()
    for path, b in rows.items():
        line = next(ln for ln in table if re.match(rf"\s*{re.escape(b.name)}\b", ln))
        words = line.split()
        for hours in (b.entitlement_gpu_hours, b.usage_gpu_hours, b.committed_gpu_hours, b.owed_gpu_hours):
            assert gpu_hours_text(hours) in words, (path, hours, line)
        assert percent_text(b.normalized_share, 1) in words, (path, line)
        if b.attainment is not None:
            assert percent_text(b.attainment, 1) in words, (path, line)
        if b.ratio is not None:
            assert f"{b.ratio_text}×" in words, (path, line)
        if b.rank_text:
            assert b.rank_text in line, (path, line)
        if b.cap_text:
            assert line.rstrip().endswith(b.cap_text), (path, line)

    # Web page: the row's number cells, in order
    page = APIClient()
    page.force_login(researcher)
    html = page.get("/budgets/").content.decode()
    for path, b in rows.items():
        row = re.search(rf'<tr[^>]*data-budget="{re.escape(path)}">(.*?)</tr>', html, re.S)
        assert row is not None, path
        assert _cells(row.group(1)) == [
            str(b.shares) if b.parent_id else "",
            percent_text(b.normalized_share, 1),
            gpu_hours_text(b.entitlement_gpu_hours),
            gpu_hours_text(b.usage_gpu_hours),
            gpu_hours_text(b.committed_gpu_hours),
            f"{b.ratio_text}×" if b.ratio is not None else "–",
            gpu_hours_text(b.owed_gpu_hours),
            percent_text(b.attainment, 1),
            str(b.running_gpus),
            str(b.pending_workloads),
        ], path
        if b.cap_text:
            assert f"cap {html_lib.escape(b.cap_text)}</div>" in row.group(1), path

    # Dashboard: "My budgets" (the researcher's three and the budgets above them)
    dashboard = page.get("/").content.decode()
    shown = 0
    for path, b in rows.items():
        row = re.search(
            rf'<tr>\s*<td style="padding-left:[^"]*">{re.escape(path)}(?:<|\s*</td>)(.*?)</tr>', dashboard, re.S
        )
        if row is None:
            continue
        shown += 1
        assert _cells(row.group(0)) == [
            percent_text(b.normalized_share, 1),
            f"{gpu_hours_text(b.usage_gpu_hours)} GPU-h",
            f"{gpu_hours_text(b.entitlement_gpu_hours)} GPU-h",
            f"{b.ratio_text}×" if b.ratio is not None else "–",
        ], path
        assert f'<td class="nowrap">{b.rank_text}</td>' in row.group(0), path
        if b.cap_text:
            assert f"cap {html_lib.escape(b.cap_text)}</div>" in row.group(0), path
    assert shown >= len(LEAVES)

    # Admin changelist: share, entitlement, cap
    staff = APIClient()
    staff.force_login(admin)
    listing = staff.get("/admin/budgets/budget/").content.decode()
    for path, b in rows.items():
        row = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*?>{re.escape(path)}</(?:(?!</tr>).)*</tr>", listing, re.S)
        assert row is not None, path

        def field(name: str, row_html: str = row.group(0), path: str = path) -> str:
            cell = re.search(rf'<td class="field-{name}[^"]*">(.*?)</td>', row_html, re.S)
            assert cell is not None, (path, name)
            return html_lib.unescape(re.sub(r"<[^>]+>", "", cell.group(1))).strip()

        assert field("normalized_share") == percent_text(b.normalized_share, 1), path
        assert field("entitlement") == f"{cluster.name}: {gpu_hours_text(b.entitlement_gpu_hours)}", path
        assert field("cap") == (b.cap_text or "–"), path

    # Statement: the allocated GPU-hours of the days holding the window are the budget's usage (all
    # the state lies inside the window), and its cap's use (inside the cap's period)
    since = (at - timedelta(days=7)).date().isoformat()
    for path in LEAVES:
        b = rows[path]
        answer = api.get(f"/api/v1/budgets/{b.budget_id}/statement.csv", {"since": since})
        assert answer.status_code == 200, answer.content
        lines = list(csv.DictReader(io.StringIO(answer.content.decode())))
        allocated = sum(float(r["allocated_gpu_hours"]) for r in lines)
        assert allocated == pytest.approx(b.usage_gpu_hours, abs=0.006), path
        if b.cap_used_gpu_hours is not None:
            assert allocated == pytest.approx(b.cap_used_gpu_hours, abs=0.006), path
        cli_csv = run_cli(monkeypatch, researcher, "statement", path, "--since", since)
        assert cli_csv == answer.content.decode(), path


@pytest.mark.parametrize("world", SEEDS, indirect=True)
def test_a_workloads_gpu_time_and_efficiency_are_one_on_every_surface(world, researcher, admin, monkeypatch):
    _rng, workloads, _at = world
    staff = APIClient()
    staff.force_login(admin)
    attempts_admin = html_lib.unescape(staff.get("/admin/scheduler/attempt/").content.decode())
    api = APIClient()
    api.force_authenticate(researcher)
    page = APIClient()
    page.force_login(researcher)
    listing = html_lib.unescape(page.get("/workloads/", {"state": LISTED}).content.decode())
    ls = run_cli(monkeypatch, researcher, "ls", "--all")
    history = run_cli(monkeypatch, researcher, "history").splitlines()
    pending_listing = html_lib.unescape(page.get("/workloads/").content.decode())
    pending_ls = run_cli(monkeypatch, researcher, "ls").splitlines()
    for w in workloads:
        detail = api.get(f"/api/v1/workloads/{w.pk}/").json()
        if detail["state"] == "pending":  # why it waits: the list page's words are ``fairway ls``'s
            row = re.search(rf"<tr[^>]*>\s*<td[^>]*><a[^>]*>{w.pk}</a>.*?</tr>", pending_listing, re.S)
            assert row is not None, w.pk
            cell = re.search(r'<td class="small why-words">(.*?)</td>', row.group(0), re.S)
            words = re.sub(r"<[^>]+>", "", cell.group(1)).strip()
            line = next(ln for ln in pending_ls if ln.split() and ln.split()[0] == str(w.pk))
            assert words and words in line, (w.pk, words, line)
        if detail["attempts"]:  # the charge: the list page, ``fairway ls`` and ``fairway show`` alike
            want = gpu_time_text(detail["accounting"]["charged_gpu_seconds"])
            web, ls_line, show_line = _charged_cells(monkeypatch, researcher, w, listing, ls)
            assert web == want and want in ls_line and show_line.split(None, 1)[1].strip() == want, w.pk
            for a in detail["attempts"]:  # each attempt's: the admin's attempts, ``fairway history`` (ended ones)
                row = re.search(
                    rf"<tr>(?:(?!</tr>).)*?/admin/scheduler/attempt/{a['id']}/change/.*?</tr>", attempts_admin, re.S
                )
                assert row is not None, a["id"]
                cell = re.search(r'<td class="field-charged">(.*?)</td>', row.group(0), re.S)
                if not a["allocated"] or a["unfunded"]:
                    assert cell.group(1) == "not charged", a["id"]
                elif a["ended_at"] or a["charged_gpu_seconds"]:
                    assert cell.group(1) == gpu_time_text(a["charged_gpu_seconds"]), a["id"]
                line = next((ln for ln in history if ln.split() and ln.split()[0] == f"{w.pk}.{a['number']}"), None)
                if line is not None and a["allocated"]:
                    assert gpu_time_text(a["charged_gpu_seconds"]) in line, (w.pk, line)
            first = detail["attempts"][0]  # its efficiency on the admin's attempt page, in the seff words
            change = html_lib.unescape(staff.get(f"/admin/scheduler/attempt/{first['id']}/change/").content.decode())
            said = "; ".join(f"{label}: {words}" for label, words in efficiency_lines(first["efficiency"]))
            assert said in change, (w.pk, said)
        seff = json.loads(run_cli(monkeypatch, researcher, "--json", "seff", str(w.pk)))
        assert seff["efficiency"] == detail["efficiency"], w.pk
        assert [a["efficiency"] for a in seff["attempts"]] == [a["efficiency"] for a in detail["attempts"]]
        if not detail["attempts"]:
            continue
        lines = efficiency_lines(detail["efficiency"])
        text = run_cli(monkeypatch, researcher, "seff", str(w.pk))
        for label, words in lines:
            assert f"{label + ':':<17}{words}\n" in text, (w.pk, label)
        html = html_lib.unescape(page.get(f"/workloads/{w.pk}/").content.decode())
        block = re.search(r'<table class="small" id="efficiency">(.*?)</table>', html, re.S)
        assert block is not None, w.pk
        shown = [
            (label, words.strip())
            for label, words in re.findall(r"<tr><th[^>]*>(.*?)</th><td>(.*?)</td></tr>", block.group(1), re.S)
        ]
        assert shown == lines, w.pk


@pytest.mark.parametrize("world", SEEDS, indirect=True)
def test_the_pyramid_is_one_on_every_surface(world, researcher, monkeypatch):
    api = APIClient()
    api.force_authenticate(researcher)
    reports = api.get("/api/v1/metrics/pyramid/").json()
    assert json.loads(run_cli(monkeypatch, researcher, "--json", "metrics")) == reports
    text = run_cli(monkeypatch, researcher, "metrics")
    page = APIClient()
    page.force_login(researcher)
    html = html_lib.unescape(page.get("/metrics/").content.decode())
    for r in reports:
        t = r["total"]
        if not r["hours"]:
            continue
        assert f"  availability  {percent_text(t['availability'])} (" in text
        assert f"  occupancy     {percent_text(t['occupancy'])} ({occupancy_parts_text(t)})" in text
        assert f"  utilization   {t['utilization_text']}\n" in text
        assert f"  impact        {percent_text(t['impact'])}\n" in text
        section = html[html.index(f'id="utilization-{r["cluster"]}"') - 2000 :]
        totals = re.findall(r'<td class="num"[^>]*>(.*?)</td>', section)[:4]
        assert totals == [
            percent_text(t["availability"]),
            percent_text(t["occupancy"]),
            t["utilization_text"],
            percent_text(t["impact"]),
        ]
        table = section[section.index('<table class="impact-budgets">') :]
        for b in r["budgets"]:
            row = re.search(rf"<tr[^>]*><td>{re.escape(b['path'])}\b.*?</tr>", table, re.S)
            assert row is not None, b["path"]
            want = [
                gpu_hours_text(b["delivered_gpu_hours"]),
                gpu_hours_text(b["owed_gpu_hours"]),
                gpu_hours_text(b["entitlement_gpu_hours"]),
                gpu_hours_text(b["demand_gpu_hours"]),
                percent_text(b["attainment"], 1),
            ]
            assert _cells(row.group(0)) == want, b["path"]
            line = next(ln for ln in text.splitlines() if ln.split() and ln.split()[0] == b["path"])
            assert line.split()[1:6] == want, b["path"]


def _charged_cells(monkeypatch, researcher, w, listing=None, ls=None):
    """A workload's charged GPU-time on the workloads page, ``fairway ls --all`` and ``fairway show``
    (``listing``, ``ls``: the page's HTML and the CLI's list when already read)."""
    if listing is None:
        page = APIClient()
        page.force_login(researcher)
        listing = html_lib.unescape(page.get("/workloads/", {"state": LISTED}).content.decode())
    row = re.search(rf"<tr[^>]*>\s*<td[^>]*>(?:<a[^>]*>)?#?{w.pk}\b.*?</tr>", listing, re.S)
    assert row is not None, listing[:2000]
    cell = re.search(r'<td class="num small acct-charged">(.*?)</td>', row.group(0), re.S)
    assert cell is not None
    web = re.sub(r"<[^>]+>", "", cell.group(1)).strip()
    ls = ls if ls is not None else run_cli(monkeypatch, researcher, "ls", "--all")
    line = next(ln for ln in ls.splitlines() if ln.split() and ln.split()[0] == str(w.pk))
    show = run_cli(monkeypatch, researcher, "show", str(w.pk))
    charged = next(ln for ln in show.splitlines() if ln.strip().startswith("charged"))
    return web, line, charged


@pytest.mark.parametrize("seconds", [1290, 3618, 5 * 60 + 27])
def test_a_workloads_charged_gpu_time_reads_alike_on_the_list_the_cli_and_show(
    seconds, researcher, submit_kwargs, monkeypatch
):
    """same47: the pages format the GPU-seconds charged, the CLI formatted the API's GPU-hours
    (rounded to 4 decimals) times 3,600: 1,290 GPU-s read "22 GPU-min" on the page and "21 GPU-min"
    in ``fairway ls``; 3,618 "1.00 GPU-h" and "1.01 GPU-h"."""
    w = do_submit_workload(researcher, **submit_kwargs(name="charged", gpu_count=1))
    gpu = GPU.objects.filter(host__name="a100-1").order_by("index").first()
    start = timezone.now() - timedelta(hours=2)
    attempt = Attempt.objects.create(
        workload=w, number=1, host=gpu.host, allocated=True, placed_at=start, started_at=start,
        ended_at=start + timedelta(seconds=seconds), end_reason="succeeded", charged_gpu_seconds=seconds,
    )  # fmt: skip
    AttemptGPU.objects.create(attempt=attempt, gpu=gpu, open=False)
    Workload.objects.filter(pk=w.pk).update(state=Workload.State.SUCCEEDED, finished_at=attempt.ended_at)
    want = gpu_time_text(seconds)
    web, ls_line, show_line = _charged_cells(monkeypatch, researcher, w)
    assert web == want
    assert want in ls_line, ls_line
    assert show_line.split(None, 1)[1].strip() == want, show_line
    # the attempt's: the workload page's attempts table, ``fairway history``
    page = APIClient()
    page.force_login(researcher)
    detail = html_lib.unescape(page.get(f"/workloads/{w.pk}/").content.decode())
    assert f'<td class="num">{want}</td>' in detail
    history = run_cli(monkeypatch, researcher, "history")
    line = next(ln for ln in history.splitlines() if ln.split() and ln.split()[0] == f"{w.pk}.1")
    assert want in line, line
