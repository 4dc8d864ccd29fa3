"""sec63: the API's pages hold at most ``config.pagination.MAX_LIMIT`` rows; ``fairway wait --group``
reads a group larger than a page in several pages, every member waited for."""

from __future__ import annotations

from django.utils import timezone

from fairway_cli.cli import EXIT_OK
from scheduler.models import ArrayGroup, Workload
from tests.cli.test_cli import REPO, cli, logged_in  # noqa: F401 -- the live-server fixtures


def test_wait_for_a_group_larger_than_a_page(logged_in, researcher, clock, monkeypatch):  # noqa: F811
    fairway = logged_in
    from config.pagination import FairwayLimitOffsetPagination

    monkeypatch.setattr(FairwayLimitOffsetPagination, "max_limit", 2)  # the server's bound, small
    code, _out, err = fairway(
        "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--array", "0-4", "--name", "sweep", "--", "true"
    )
    assert code == EXIT_OK, err
    group = ArrayGroup.objects.get()
    clock(lambda: Workload.objects.update(state="succeeded", finished_at=timezone.now()))

    code, out, err = fairway("wait", "--group", str(group.pk))

    assert code == EXIT_OK, err
    assert out.splitlines()[-1] == "all 5 succeeded"
