"""left60: the agent's ``owner_busy`` (one owner holds half of the host's exec slots) is a 429
``exec_busy`` that says it is that person's share (tests/agent/test_left60_exec_share.py)."""

from __future__ import annotations

from tests.api.test_exec_api import agent_answers, running, url  # noqa: F401 -- fixtures


def test_the_agents_owner_busy_says_it_is_ones_share(running, researcher_client, agent_answers) -> None:  # noqa: F811
    w, attempt = running
    agent_answers[0].answer = {"error": "owner_busy", "message": "4 commands (half of the 8 a host runs at once)"}
    got = researcher_client.post(url(w.pk), {"command": ["id"], "timeout": 5}, format="json")
    assert (got.status_code, got.json()["code"]) == (429, "exec_busy"), got.json()
    assert got.json()["detail"] == (
        f"You run 4 commands (half of the 8 a host runs at once) on host {attempt.host.name} already, "
        "as many as one person may there at once; try again when one has ended."
    )
