"""brk51: settings given garbage stop every process at start with one line naming the variable.

Each was taken before its fix, and failed later:

- ``FAIRWAY_PUBLIC_URL=http://[::1`` (a bracket left open) or a port past 65535 passed the URL's
  pattern; ``POST /agent/join`` then registered the host and spent the join token before its
  answer's ``websocket_url`` raised ``ValueError`` (a 500: the host token lost, the name taken).
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from tests.breaker.test_break26 import load_settings


@pytest.mark.parametrize(
    "url", ["http://[::1", "https://[zz]:443", "http://fairway.example.org:99999", "https://fairway:8x", "http://:80"]
)
def test_a_public_url_that_names_no_server_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"^FAIRWAY_PUBLIC_URL=.* is not an http\(s\) URL"):
        load_settings(monkeypatch, FAIRWAY_PUBLIC_URL=url)


@pytest.mark.parametrize(
    "url", ["https://fairway.example.org", "http://[::1]:8000", "http://10.0.0.5:8000/fairway/", "https://h:65535"]
)
def test_a_public_url_with_a_server_is_taken(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    assert load_settings(monkeypatch, FAIRWAY_PUBLIC_URL=url)["FAIRWAY"]["PUBLIC_URL"] == url
