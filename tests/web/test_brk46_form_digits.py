"""brk46: the submit page's GPUs, CPUs and retries fields read a number as Django's ``int()`` does,
so ``٣`` (an Arabic-Indic 3), ``１６`` (full-width) and ``1_6`` were taken as 3 and 16 and the
workload submitted, where the API, a YAML spec (the page's own other tab) and the CLI refuse them:
a count is ASCII digits (``fairway_cli.numbers.PLAIN_INT``, the API's rule). The page refuses them
as it refuses ``x``, and submits nothing."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler.models import Workload
from tests.web.test_pages import _form


@pytest.mark.parametrize(
    ("field", "typed"),
    [
        ("gpu_count", "\u0663"),
        ("gpu_count", "1_6"),
        ("gpu_count", "+3"),
        ("cpus", "\uff11\uff16"),
        ("retries", "\u0661"),
    ],
)
def test_a_count_that_is_not_ascii_digits_is_refused(researcher, cluster, field, typed) -> None:
    client = Client()
    client.force_login(researcher)
    response = client.post("/submit/", _form(**{field: typed}))
    assert response.status_code == 400
    assert "Enter a whole number." in response.content.decode()
    assert not Workload.objects.exists()


def test_ascii_counts_and_their_bounds_read_as_before(researcher, cluster) -> None:
    client = Client()
    client.force_login(researcher)
    refused = client.post("/submit/", _form(gpu_count="-1"))
    assert refused.status_code == 400 and "gpu_count is an integer &gt;= 1." in refused.content.decode()
    assert client.post("/submit/", _form(gpu_count=" 2 ", cpus="16", retries="1")).status_code == 302
    (w,) = Workload.objects.all()
    assert (w.gpu_count, w.cpus, w.retries) == (2, 16, 1)
