"""left51: ``fairway wait ID ID …`` reads its workloads with one list request per poll
(``GET workloads/?id=…``), in chunks of the list's cap, not one ``GET workloads/{id}/`` each."""

from __future__ import annotations

from typing import Any

import requests

from fairway_cli import cli as fairway_cli
from fairway_cli.cli import EXIT_API, EXIT_OK
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures
from tests.cli.test_cli_wait import become, fairway, submitted, together  # noqa: F401 -- fixtures


def _recording(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = requests.Session.request

    def request(self: requests.Session, method: str, url: str, **kwargs: Any) -> Any:
        seen.append(f"{method} {url.split('/api/v1/', 1)[-1]}")
        return real(self, method, url, **kwargs)

    monkeypatch.setattr(requests.Session, "request", request)
    return seen


def test_one_list_request_per_poll(fairway, submitted, clock, monkeypatch):  # noqa: F811
    a, b, c = submitted("a"), submitted("b"), submitted("c")
    clock(become(a, "running"), together(become(a, "succeeded"), become(b, "succeeded")), become(c, "succeeded"))
    seen = _recording(monkeypatch)

    code, out, err = fairway("wait", str(a.pk), str(b.pk), str(c.pk))

    assert code == EXIT_OK, err
    assert out.splitlines()[-1] == "all 3 succeeded"
    assert seen == ["GET workloads/"] * 4  # the first read, then one per poll


def test_more_ids_than_the_cap_go_in_chunks(fairway, submitted, clock, monkeypatch):  # noqa: F811
    a, b, c = submitted("a"), submitted("b"), submitted("c")
    clock(together(become(a, "succeeded"), become(b, "succeeded"), become(c, "succeeded")))
    monkeypatch.setattr(fairway_cli, "LIST_MAX_IDS", 2)
    seen = _recording(monkeypatch)

    code, _out, err = fairway("wait", str(a.pk), str(b.pk), str(c.pk))

    assert code == EXIT_OK, err
    assert seen == ["GET workloads/"] * 4  # 2 chunks: the first read, one poll


def test_unknown_ids_are_still_named_together(fairway, submitted, clock, monkeypatch):  # noqa: F811
    w = submitted()
    fake = clock()
    seen = _recording(monkeypatch)

    code, out, err = fairway("wait", str(w.pk), "999998", "#999999")

    assert code == EXIT_API
    assert err == "fairway: no workload #999998, #999999: nothing waited for\n"
    assert out == "" and fake.sleeps == [] and seen == ["GET workloads/"]
