"""An owner's attempt reaches ``<state>/attempts/<id>.d`` by its path with its own file-system
identity (iso58), so a state dir under a directory others may not search fails every such start
("Permission denied: …/<id>.d"). The agent says so once, at its start, in its log and in
``isolation.json``, naming the directory and the fix."""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from agent.state import closed_parent


def test_a_closed_parent_is_named_and_an_open_path_passes() -> None:
    base = Path(tempfile.mkdtemp(prefix="fw-reach-", dir="/var/tmp"))  # noqa: S108 -- searchable, as /var/lib
    try:
        base.chmod(0o755)
        closed = base / "closed"
        state = closed / "fairway" / "state"
        state.mkdir(parents=True)
        closed.chmod(0o700)
        assert closed_parent(state) == closed
        closed.chmod(0o711)
        assert closed_parent(state) is None
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_agent_warns_at_its_start_where_owners_cannot_reach_the_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import agent.__main__ as main

    class Owner:
        def status(self) -> dict[str, Any]:
            return {"identity": "owner", "cgroup": "v2", "cgroup_parent": "/x", "cgroup_note": "", "warnings": []}

    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setattr("agent.state.closed_parent", lambda _path: tmp_path)
    with caplog.at_level(logging.WARNING, logger="agent"):
        main.report_isolation(Owner(), state)  # type: ignore[arg-type]
    said = json.loads((state / "isolation.json").read_text())["warnings"]
    assert len(said) == 1 and f"{tmp_path} is not searchable by others" in said[0] and "chmod o+x" in said[0]
    assert said[0] in caplog.text


def test_an_agent_whose_attempts_run_as_itself_needs_no_searchable_parent(tmp_path: Path) -> None:
    import agent.__main__ as main

    class Agent:
        def status(self) -> dict[str, Any]:
            return {"identity": "agent", "cgroup": "none", "cgroup_parent": "", "cgroup_note": "", "warnings": []}

    state = tmp_path / "state"
    state.mkdir()
    main.report_isolation(Agent(), state)  # type: ignore[arg-type]
    assert json.loads((state / "isolation.json").read_text())["warnings"] == []


@pytest.mark.parametrize(
    ("state", "fails"),
    [(Path("/var/lib/closed/state"), False), (Path("/tmp/closed/state"), True)],  # noqa: S108
)
def test_the_warning_says_what_fails_where_the_state_dir_lies(
    state: Path, fails: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """try59: an agent whose state dir lay under a 0700 directory of /var/lib warned "every attempt
    run as its owner fails to start", yet its attempts started and ran: only what the private /tmp
    binds back (a state dir under /tmp, /dev/shm, /var/tmp) is opened as the owner at the start.
    Elsewhere the attempt starts but cannot reach its directory: its preemption notice
    (``$FAIRWAY_PREEMPT_FILE``) is unreadable. The warning says which."""
    import agent.__main__ as main

    class Owner:
        def status(self) -> dict[str, Any]:
            return {"identity": "owner", "cgroup": "v2", "cgroup_parent": "/x", "cgroup_note": "", "warnings": []}

    written: dict[str, str] = {}
    monkeypatch.setattr("agent.state.closed_parent", lambda _path: state.parent)
    monkeypatch.setattr("agent.state.fix_private_modes", lambda _path: None)
    monkeypatch.setattr("agent.state.write_private", lambda path, text: written.setdefault("text", text))
    main.report_isolation(Owner(), state)  # type: ignore[arg-type]
    (said,) = json.loads(written["text"])["warnings"]
    assert ("fails to start" in said) is fails, said
    assert ("FAIRWAY_PREEMPT_FILE" in said) is not fails and "chmod o+x" in said, said
