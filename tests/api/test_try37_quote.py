"""try37: the array quote's note names the minimum runtime as the table's lines do."""

from __future__ import annotations

URL = "/api/v1/workloads/quote/"


def test_an_array_quote_names_the_minimum_runtime_as_its_lines(researcher_client, submission, cluster):
    """``-M 20m --array 0-3%2``: the note read "at your minimum runtime 0.333333 h" under lines
    that say "20m"; it says "20m" (and 1h30m, not "1.5 h")."""
    for written, shown in (("20m", "20m"), ("1h30m", "1h30m"), ("2h", "2h")):
        body = researcher_client.post(URL, submission(array="0-3%2", min_runtime=written), format="json").json()
        note = next(n for n in body["notes"] if "array" in n)
        assert f"at your minimum runtime {shown}, would charge" in note, note
