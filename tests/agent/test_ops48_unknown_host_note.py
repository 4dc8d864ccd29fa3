"""ops48: after a database restore older than a host's join (docs/deploy.md §7), the server has no
such host and refuses its agent's token as unknown (4401); the install script's ``--uninstall`` then
said "the host … is still registered on the server". The agent now leaves a note the script reads
(``HOST_UNKNOWN_FILE``), only for that refusal, and forgets it once the server takes it again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection

from agent.client import CLOSE_UNAUTHORIZED, HOST_UNKNOWN_FILE, note_link_closed, note_link_open
from agent.protocol import UNKNOWN_TOKEN_REASON
from scheduler.gateway import link_refusal
from tests.agent.agent_testkit import FakeServer, join_again, kill_leftovers, make_agent, run_async, running


@pytest.mark.django_db
def test_the_servers_refusal_of_an_unknown_token_leaves_the_note(tmp_path: Path) -> None:
    words, _ = link_refusal("fwh_nosuchtoken")  # what the server says, word for word
    note_link_closed(tmp_path, CLOSE_UNAUTHORIZED, words)
    text = (tmp_path / HOST_UNKNOWN_FILE).read_text()
    assert text.startswith("the server does not know this host's token; told at "), text
    assert text.endswith(" UTC\n") and text.count("\n") == 1, text  # instant_text's (small49)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (CLOSE_UNAUTHORIZED, "host 'n1': its token was rotated, revoked or removed while it connected"),
        (CLOSE_UNAUTHORIZED, "host token rotated"),  # the host exists: its token changed under it
        (1006, ""),
        (4409, "superseded"),
    ],
)
def test_other_closes_leave_no_note(tmp_path: Path, code: int, reason: str) -> None:
    note_link_closed(tmp_path, code, reason)
    assert not (tmp_path / HOST_UNKNOWN_FILE).exists()


def test_a_link_the_server_takes_forgets_the_note(tmp_path: Path) -> None:
    (tmp_path / HOST_UNKNOWN_FILE).write_text("the server does not know this host's token; told at X\n")
    note_link_open(tmp_path)
    assert not (tmp_path / HOST_UNKNOWN_FILE).exists()
    note_link_open(tmp_path / "missing")  # best effort: no state directory yet is no error


def test_a_new_join_forgets_the_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    state = tmp_path / "state"
    state.mkdir()
    (state / HOST_UNKNOWN_FILE).write_text("the server does not know this host's token; told at X\n")
    join_again(tmp_path, monkeypatch, state)
    assert not (state / HOST_UNKNOWN_FILE).exists()


class _RefusingServer(FakeServer):
    """Refuses the token as unknown (4401, the server's words) until ``taken`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = False

    async def _handler(self, ws: ServerConnection) -> None:
        if not self.taken:
            await ws.close(
                code=CLOSE_UNAUTHORIZED, reason=f"{UNKNOWN_TOKEN_REASON} (or its host joined after a restore)"
            )
            return
        await super()._handler(ws)


def test_the_agent_notes_the_refusal_and_forgets_it_once_taken(tmp_path: Path) -> None:
    note = tmp_path / HOST_UNKNOWN_FILE

    async def until(condition: Callable[[], bool]) -> None:
        while not condition():  # noqa: ASYNC110 -- a file the agent writes: no event to wait on
            await asyncio.sleep(0.02)

    async def scenario() -> None:
        async with _RefusingServer() as server:
            agent = make_agent(server.url, tmp_path)
            async with running(agent):
                await asyncio.wait_for(until(note.exists), 10)
                server.taken = True
                await asyncio.wait_for(until(lambda: not note.exists()), 10)

    try:
        run_async(scenario())
    finally:
        kill_leftovers(tmp_path)
