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


def test_ls_reads_as_many_pages_as_its_limit_takes(logged_in, researcher, monkeypatch):  # noqa: F811
    import json

    from config.pagination import FairwayLimitOffsetPagination

    monkeypatch.setattr(FairwayLimitOffsetPagination, "max_limit", 2)
    code, _out, err = logged_in(
        "submit", "-b", "nlp/olmo", "-m", "A100", "-M", "0", "--array", "0-4", "--name", "sweep", "--", "true"
    )
    assert code == EXIT_OK, err
    code, out, err = logged_in("ls", "--limit", "3", "--json")
    assert code == EXIT_OK, err
    assert len(json.loads(out)) == 3
    code, out, err = logged_in("ls", "--limit", "4")
    assert out.splitlines()[-1] == "(4 of 5; --limit for more)"
