"""tryout49: the pyramid's occupancy read "75% (69% allocated, 5% unallocated)" on the metrics page
and in `fairway metrics`: each part rounded on its own, the parts did not add up to the whole the
same line gave. The parts are now rounded so that they sum to the whole's percentage (largest
remainder), one function for both surfaces (``fairway_cli.words.occupancy_parts_text``)."""

from __future__ import annotations

from fairway_cli.words import occupancy_parts_text
from scheduler.pyramid import Pyramid
from tests.browser import log_in
from tests.web.test_pyramid_current_hour import _busy

SPLIT = {"occupancy": 0.657, "occupancy_allocated": 0.303, "occupancy_unallocated": 0.354}


def test_the_parts_add_up_to_the_whole():
    # alone: 30% + 35% = 65% beside a whole of 66%
    assert occupancy_parts_text(SPLIT) == "30% allocated, 36% unallocated"
    assert occupancy_parts_text(
        {"occupancy": 0.745, "occupancy_allocated": 0.6875, "occupancy_unallocated": 0.0575}
    ) == (
        "69% allocated, 5% unallocated"  # whole 74% (half to even, as percent_text): nothing to add
    )
    assert occupancy_parts_text({"occupancy": 0.0, "occupancy_allocated": 0.0, "occupancy_unallocated": 0.0}) == (
        "0% allocated, 0% unallocated"
    )
    assert occupancy_parts_text({"occupancy": 1.0, "occupancy_allocated": 0.5, "occupancy_unallocated": 0.5}) == (
        "50% allocated, 50% unallocated"
    )


def test_a_whole_that_is_not_the_sum_leaves_each_part_its_own_rounding():
    """An older server's figures, or missing ones: no part is moved more than its rounding."""
    assert occupancy_parts_text({"occupancy": 0.9, "occupancy_allocated": 0.303, "occupancy_unallocated": 0.354}) == (
        "30% allocated, 35% unallocated"
    )
    assert occupancy_parts_text({"occupancy": None, "occupancy_allocated": None, "occupancy_unallocated": None}) == (
        "– allocated, – unallocated"
    )


def _split(monkeypatch):
    fractions = Pyramid.fractions
    monkeypatch.setattr(Pyramid, "fractions", lambda self: {**fractions(self), **SPLIT})


def test_fairway_metrics_says_it(monkeypatch, researcher, cluster, submit_kwargs):
    from tests.cli.inprocess import run_cli

    _busy(researcher, cluster, submit_kwargs, monkeypatch)
    _split(monkeypatch)
    out = run_cli(monkeypatch, researcher, "metrics")
    assert "  occupancy     66% (30% allocated, 36% unallocated)\n" in out, out


def test_the_metrics_page_says_it(new_page, researcher, cluster, submit_kwargs, monkeypatch):
    _busy(researcher, cluster, submit_kwargs, monkeypatch)
    _split(monkeypatch)
    page = new_page()
    log_in(page, researcher.username)
    page.goto("/metrics/")
    row = page.locator(".pyramid-occupancy").first.inner_text()
    assert "held by attempts: 30% allocated, 36% unallocated" in row and row.rstrip().endswith("66%"), row
