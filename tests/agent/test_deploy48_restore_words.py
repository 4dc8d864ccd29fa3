"""deploy48: after a restore of a dump older than a host's join (docs/deploy.md §7: "hosts that
joined after it must join again"), its agent was refused with "unknown host token (mistyped, or
rotated or revoked since)" and told to put an admin's rotated token in its config: the restored
database has no such host, so the admin has nothing to rotate. Both words name the way back."""

from __future__ import annotations

import pytest

from agent.client import REFUSED_LINK_HINT
from scheduler.gateway import link_refusal


@pytest.mark.django_db
def test_the_refusal_of_an_unknown_token_names_a_restore():
    words, removed = link_refusal("fwh_nosuchtoken")
    assert not removed
    assert "rotated or revoked since" in words and "restore" in words, words


def test_the_agents_hint_says_how_a_host_the_server_lost_joins_again():
    assert "Rotate the host token" in REFUSED_LINK_HINT
    assert "--uninstall" in REFUSED_LINK_HINT and "new join token" in REFUSED_LINK_HINT, REFUSED_LINK_HINT
