"""tryout49: the what-if (admin → Budgets → "What-if of changed shares", `manage.py simulate
--from-db`) asked for a window of "7d" and answered "What-if over 7.0 days": its window now reads as
every other duration, `What-if over 7d` (``fairway_cli.numbers.duration_text``), from one key of
the result (``window_text``; ``days`` stays in whatif.json for scripts)."""

from __future__ import annotations

from io import StringIO
from pathlib import Path

from django.core.management import call_command

from scheduler.services import do_submit_workload
from tests.browser import log_in


def test_the_command_says_the_window_as_a_duration(researcher, cluster, submit_kwargs, tmp_path: Path) -> None:
    do_submit_workload(researcher, **submit_kwargs())
    shares = tmp_path / "new.yaml"
    shares.write_text("shares:\n  vision: 3\n")
    out = StringIO()
    call_command(
        "simulate", "--from-db", "--since", "36h", "--budgets", str(shares), "--out", str(tmp_path / "o"), stdout=out
    )
    assert "What-if over 1d12h: 1 workload on 20 GPUs" in out.getvalue(), out.getvalue()


def test_the_admin_page_says_the_window_as_a_duration(new_page, admin, researcher, cluster, submit_kwargs) -> None:
    do_submit_workload(researcher, **submit_kwargs())
    page = new_page()
    log_in(page, "admin")
    page.goto("/admin/budgets/budget/what-if/")
    page.fill("#id_window", "7d")
    page.locator("input[type=submit], button[type=submit]").last.click()
    heading = page.locator("h2", has_text="What-if over").inner_text()
    assert heading == "What-if over 7d: 1 workload on 20 GPUs", heading
