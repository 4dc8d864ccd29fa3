"""The pages and the CLI write a duration by one rule (lead, session 38): the pages' ``duration``
filter wrote ``2h 29s`` and ``0s`` where ``fairway show`` and the server's notes wrote ``2h0m29s``
and ``0``."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fairway_cli.numbers import duration_text
from web.templatetags.fairway import duration


@given(st.integers(min_value=0, max_value=400 * 86400))
def test_the_pages_duration_is_the_cli_s_with_its_units_apart(seconds):
    assert duration(seconds).replace(" ", "") == duration_text(seconds)


def test_a_gap_reads_as_zero_minutes_on_the_pages_too():
    assert duration(2 * 3600 + 29) == "2h 0m 29s"
    assert duration(0) == "0"
    assert duration(None) == ""
