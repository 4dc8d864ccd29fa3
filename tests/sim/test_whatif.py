"""What-if from the database (``manage.py simulate --from-db``): actual vs simulated per budget."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from scheduler.models import Attempt, Workload
from scheduler.sim.budgets import BudgetFileError
from scheduler.sim.dbdemand import load_demand
from scheduler.sim.whatif import parse_shares, whatif


@pytest.fixture
def recorded(org_tree, cluster, hosts, researcher):  # noqa: ANN001, ANN201
    """Two days of demand: olmo runs 8-GPU jobs back to back; sam waits a day for one."""
    now = timezone.now()
    a100 = hosts["a100-1"]

    def job(budget: str, gpus: int, submitted: timedelta, ran: list[tuple[timedelta, timedelta]], done: bool) -> None:
        w = Workload.objects.create(
            name=f"{budget}-{submitted}",
            owner=researcher,
            budget=org_tree[budget],
            cluster=cluster,
            gpu_model="A100",
            gpu_count=gpus,
            command=["true"],
            min_runtime_s=3600,
            submitted_at=now - submitted,
            state="succeeded" if done else "running",
            finished_at=(now - ran[-1][1]) if done else None,
        )
        for n, (start, end) in enumerate(ran, start=1):
            Attempt.objects.create(
                workload=w,
                number=n,
                host=a100,
                allocated=True,
                placed_at=now - start,
                started_at=now - start,
                ended_at=(now - end) if (done or n < len(ran)) else None,
                end_reason="succeeded" if done else "",
            )

    h = timedelta(hours=1)
    for k in range(6):
        job("nlp/olmo", 8, (47 - 8 * k) * h, [((47 - 8 * k) * h, (39 - 8 * k) * h)], True)
    job("vision/sam", 8, 40 * h, [(16 * h, 8 * h)], True)
    return now


def test_whatif_compares_actual_and_simulated_per_budget(recorded) -> None:  # noqa: ANN001
    demand = load_demand(None, timedelta(days=2), recorded)
    assert len(demand.jobs) == 7 and sum(h.size for h in demand.hosts) == 20
    result = whatif(demand, demand.budgets)
    rows = {r["budget"]: r for r in result["budgets"]}
    sam = rows["vision/sam"]
    assert sam["actual"]["wait_p50_h"] == pytest.approx(24, abs=0.01)
    assert sam["simulated"]["wait_p50_h"] == pytest.approx(0, abs=0.01)  # 20 GPUs: room for both at once
    # six 8-hour jobs of 8 GPUs, the last one recorded up to now (7 of its 8 hours)
    assert rows["nlp/olmo"]["simulated"]["delivered_gpu_h"] == pytest.approx(5 * 8 * 8 + 7 * 8, abs=0.5)


def test_command_prints_the_table_and_bad_shares_write_nothing(recorded, tmp_path: Path) -> None:  # noqa: ANN001
    shares = tmp_path / "new.yaml"
    shares.write_text("shares:\n  vision: 3\n  nlp/olmo: 2\n")
    out = StringIO()
    call_command(
        "simulate", "--from-db", "--since", "2d", "--budgets", str(shares), "--out", str(tmp_path / "o"), stdout=out
    )
    text = out.getvalue()
    assert "vision/sam" in text and "nlp/olmo" in text and (tmp_path / "o" / "whatif.json").exists()
    shares.write_text("shares:\n  vision: 3\n  nlp/gpt: 2\n")
    with pytest.raises(CommandError, match=r"new.yaml, line 3: unknown budget 'nlp/gpt'"):
        call_command("simulate", "--from-db", "--budgets", str(shares), "--out", str(tmp_path / "p"))
    assert not (tmp_path / "p").exists()


def test_shares_file_errors_name_the_line(recorded) -> None:  # noqa: ANN001
    budgets = load_demand(None, timedelta(days=2), recorded).budgets
    with pytest.raises(BudgetFileError, match=r"line 2: budget 'vision': shares -2 must be >= 1"):
        parse_shares("shares:\n  vision: -2\n", budgets)
    with pytest.raises(BudgetFileError, match=r"line 3: budget 'nlp': shares 'many' is not an integer"):
        parse_shares("shares:\n  vision: 1\n  nlp: many\n", budgets)
    new = parse_shares("shares:\n  vision: 4\n", budgets)
    assert [b.shares for b in new if b.name == "vision"] == [4]


def test_shares_given_as_a_list_or_beyond_the_database_field_are_clear_errors(recorded) -> None:  # noqa: ANN001
    """break27: a list showed "[ScalarNode(tag=...)]" in the error; 2**31 and more were accepted
    though Budget.shares (PostgreSQL's integer) cannot hold them."""
    budgets = load_demand(None, timedelta(days=2), recorded).budgets
    with pytest.raises(BudgetFileError, match=r"line 2: budget 'vision': shares must be one whole number, not a list"):
        parse_shares("shares:\n  vision: [1, 2]\n", budgets)
    with pytest.raises(
        BudgetFileError, match=r"line 1: budget 'vision': shares must be one whole number, not a mapping"
    ):
        parse_shares('{"shares": {"vision": {"n": 1}}}', budgets)
    with pytest.raises(BudgetFileError, match=r"line 2: expected a budget path"):
        parse_shares("shares:\n  [vision]: 1\n", budgets)
    with pytest.raises(BudgetFileError, match=r"budget 'vision': shares: a number is larger than 2147483647"):
        parse_shares(f"shares:\n  vision: {2**31}\n", budgets)
    assert [b.shares for b in parse_shares(f"shares:\n  vision: {2**31 - 1}\n", budgets) if b.name == "vision"] == [
        2**31 - 1
    ]


def test_a_shares_file_is_read_by_the_strict_reader(recorded) -> None:  # noqa: ANN001
    """left39: the shares file (the admin's what-if, ``simulate --from-db --budgets``) was composed
    with plain ``SafeLoader``: an alias gave one budget another's share, a second ``shares:`` was
    "expected one top-level key"."""
    budgets = load_demand(None, timedelta(days=2), recorded).budgets
    with pytest.raises(BudgetFileError, match=r"line 3: aliases \(\*name\) are not allowed"):
        parse_shares("shares:\n  vision: &v 4\n  nlp: *v\n", budgets)
    with pytest.raises(BudgetFileError, match=r"line 3: 'shares' is given twice \(also on line 1\)"):
        parse_shares("shares:\n  vision: 4\nshares:\n  nlp: 2\n", budgets)


def test_demand_of_a_waiting_job_is_at_most_its_work(recorded) -> None:  # noqa: ANN001
    """sam's job waited 24 h for 8 h of work: it asked for 8 × 8 GPU-h, not 8 × 32 (present 32 h)."""
    demand = load_demand(None, timedelta(days=2), recorded)
    result = whatif(demand, demand.budgets)
    rows = {r["budget"]: r for r in result["budgets"]}
    sam = rows["vision/sam"]["actual"]
    assert sam["demand_gpu_h"] == pytest.approx(64, abs=0.1)
    assert sam["attainment"] == 1.0  # all 64 GPU-h delivered
    # olmo: five finished 8-hour jobs, and one still running (7 h so far: it needs the rest of the window)
    assert rows["nlp/olmo"]["actual"]["demand_gpu_h"] == pytest.approx(5 * 64 + 7 * 8, abs=0.1)
    assert rows["vision/sam"]["simulated"]["demand_gpu_h"] == pytest.approx(64, abs=0.1)
    assert rows["nlp/olmo"]["simulated"]["demand_gpu_h"] == pytest.approx(5 * 64 + 7 * 8, abs=0.1)


@pytest.mark.django_db
def test_rows_follow_the_budget_paths_whatever_the_keys(cluster) -> None:  # noqa: ANN001
    # The keys are primary keys as text: "10" sorts before "9" (the admin's what-if listed the
    # budgets out of order once the ids grew a digit: tests/services/test_share_audit.py).
    from budgets.models import Budget

    org = Budget.objects.create(id=7, name="org")
    nlp = Budget.objects.create(id=8, name="nlp", parent=org)
    Budget.objects.create(id=9, name="olmo", parent=nlp)
    Budget.objects.create(id=10, name="tulu", parent=nlp)
    demand = load_demand(None, timedelta(days=1), timezone.now())
    assert [r["budget"] for r in whatif(demand, demand.budgets)["budgets"]] == ["nlp/olmo", "nlp/tulu"]


def test_a_changed_program_share_is_shown_not_only_the_leaves_unchanged(recorded) -> None:  # noqa: ANN001
    """break28: the what-if (admin page, ``simulate --budgets``) listed the leaves only, so a
    leadership file changing a program (``vision: 4``) printed every row ``1→1``, as if the file
    had changed nothing. The changed budgets are listed, each with its old and new shares."""
    from scheduler.sim.whatif import format_table

    demand = load_demand(None, timedelta(days=2), recorded)
    result = whatif(demand, parse_shares("shares:\n  vision: 4\n", demand.budgets))
    assert result["changed"] == [{"budget": "vision", "shares": [1, 4]}]
    assert "shares changed: vision 1→4" in format_table(result)
    unchanged = whatif(demand, parse_shares("shares:\n  vision: 1\n", demand.budgets))
    assert unchanged["changed"] == [] and "shares changed: none" in format_table(unchanged)


def test_the_admin_what_if_names_the_changed_program(recorded, admin) -> None:  # noqa: ANN001
    from django.test import Client

    client = Client()
    client.force_login(admin)
    page = client.post(
        "/admin/budgets/budget/what-if/", {"shares": "shares:\n  vision: 4\n", "window": "2d", "cluster": "default"}
    ).content.decode()
    assert "Shares changed: vision 1→4" in page


def test_an_archived_budget_without_work_leaves_its_share_to_its_siblings(recorded, org_tree) -> None:  # noqa: ANN001
    """tryout36: with nlp/tulu archived (no work), the admin's what-if gave nlp/olmo half of nlp's
    entitlement, actual and simulated, where the budgets page and the tick give it all (§3.7: an
    archived budget without work drops out of its siblings' normalization)."""
    from budgets.services import do_archive_budget

    do_archive_budget(org_tree["nlp/tulu"])
    demand = load_demand(None, timedelta(days=2), recorded)
    rows = {r["budget"]: r for r in whatif(demand, demand.budgets)["budgets"]}
    nlp_share = 2 / 3  # nlp 2 : vision 1
    whole = nlp_share * 20 * 48  # 20 GPUs for 48 hours
    assert rows["nlp/olmo"]["actual"]["entitlement_gpu_h"] == pytest.approx(whole, abs=0.1)
    assert rows["nlp/olmo"]["simulated"]["entitlement_gpu_h"] == pytest.approx(whole, abs=0.1)
    assert rows["vision/sam"]["simulated"]["entitlement_gpu_h"] == pytest.approx(20 * 48 / 3, abs=0.1)


def test_an_archived_budget_with_unfinished_work_keeps_its_share(recorded, org_tree, cluster, researcher) -> None:  # noqa: ANN001
    from budgets.services import do_archive_budget

    Workload.objects.create(
        name="tulu-left",
        owner=researcher,
        budget=org_tree["nlp/tulu"],
        cluster=cluster,
        gpu_model="A100",
        gpu_count=1,
        command=["true"],
        min_runtime_s=3600,
        submitted_at=recorded - timedelta(hours=1),
    )
    do_archive_budget(org_tree["nlp/tulu"])
    demand = load_demand(None, timedelta(days=2), recorded)
    rows = {r["budget"]: r for r in whatif(demand, demand.budgets)["budgets"]}
    assert rows["nlp/olmo"]["simulated"]["entitlement_gpu_h"] == pytest.approx(20 * 48 / 3, abs=0.1)


def test_waits_read_as_every_other_duration_on_the_page_and_in_the_command(
    recorded, org_tree, cluster, hosts, researcher, admin
):  # noqa: ANN001, E501
    """left40: the what-if printed waits as raw hours, ``2.12`` beside ``24.0`` and ``0.001``, where
    every page writes a duration with the ``duration`` filter (``2h 7m 13s``, the workloads' wait
    column) and the CLI and the server's notes with ``duration_text`` (``2h7m13s``). The rows keep the
    wait in whole seconds (``wait_p50_s``); the page and the command's table word it."""
    import re

    from django.test import Client

    from budgets.admin import current_shares_yaml
    from fairway_cli.numbers import duration_text
    from scheduler.sim.whatif import format_table
    from web.templatetags.fairway import duration

    now = recorded
    odd = timedelta(hours=2, minutes=7, seconds=13)
    w = Workload.objects.create(
        name="tulu-odd",
        owner=researcher,
        budget=org_tree["nlp/tulu"],
        cluster=cluster,
        gpu_model="A100",
        gpu_count=1,
        command=["true"],
        min_runtime_s=3600,
        submitted_at=now - timedelta(hours=5) - odd,
        state="succeeded",
        finished_at=now - timedelta(hours=4),
    )
    start = now - timedelta(hours=5)
    Attempt.objects.create(
        workload=w, number=1, host=hosts["a100-1"], allocated=True, placed_at=start, started_at=start,
        ended_at=now - timedelta(hours=4), end_reason="succeeded",
    )  # fmt: skip

    result = whatif(load_demand(None, timedelta(days=2), now), load_demand(None, timedelta(days=2), now).budgets)
    rows = {r["budget"]: r for r in result["budgets"]}
    assert rows["nlp/tulu"]["actual"]["wait_p50_s"] == odd.total_seconds() == 7633
    assert rows["vision/sam"]["actual"]["wait_p90_s"] == 24 * 3600
    table = format_table(result)
    tulu = next(line for line in table.splitlines() if line.startswith("nlp/tulu"))
    assert duration_text(7633) == "2h7m13s" and "2h7m13s" in tulu.split()
    assert "2.12" not in tulu

    client = Client()
    client.force_login(admin)
    page = client.post(
        "/admin/budgets/budget/what-if/", {"shares": current_shares_yaml(), "window": "3d", "cluster": cluster.name}
    ).content.decode()
    assert "wait p50 (h)" not in page
    cells = {
        c[0]: c
        for row in re.findall(r'<tr class="whatif-row">(.*?)</tr>', page, re.S)
        for c in [[x.strip() for x in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]]
    }
    assert cells["nlp/tulu"][6] == duration(7633) == "2h 7m 13s", cells["nlp/tulu"]
    assert cells["vision/sam"][8] == duration(24 * 3600) == "1d", cells["vision/sam"]


def test_the_what_if_table_writes_attainment_as_the_admin_page_and_the_budgets_page(recorded) -> None:  # noqa: ANN001
    """try44: ``manage.py simulate --from-db`` printed attainment as a fraction ("0.983", "1")
    under a note saying "as on the budgets page", where the budgets page, ``fairway budgets`` and
    the admin's what-if page (the same result) write "98.3%". One wording: the page's ``pct``."""
    from scheduler.sim.whatif import format_table
    from web.templatetags.fairway import pct

    demand = load_demand(None, timedelta(days=2), recorded)
    result = whatif(demand, parse_shares("shares:\n  vision: 4\n", demand.budgets))
    table = format_table(result)
    for r in result["budgets"]:
        line = next(line for line in table.splitlines() if line.startswith(r["budget"]))
        for side in ("actual", "simulated"):
            attainment = (r[side] or {}).get("attainment")
            if attainment is not None:
                assert pct(attainment, 1) in line.split(), (line, attainment)
    assert "capped at 1)" not in table
