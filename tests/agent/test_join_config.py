"""left39: ``fairway-agent join`` asks whether the host joined already by reading the existing config
with the strict loader the agent reads it with (``fairway_common.strict_yaml``, brk37), not with
plain ``yaml.safe_load``: ``host_name: no`` is the host "no", and a config the agent would refuse
(a key twice, YAML 1.1's octal) stops the join with the agent's words instead of being read as
something else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import join as join_module
from agent.gpu.base import GpuBackend
from agent.join import JoinFailed, already_joined, join
from tests.agent.agent_testkit import join_again


def test_a_host_named_no_is_already_joined_as_no(tmp_path: Path) -> None:
    # Given a config written by hand for the host "no" (YAML 1.2 text; YAML 1.1's False)
    config = tmp_path / "agent.yaml"
    config.write_text("server: ws://s/agent/\ntoken: fwh_x\nhost_name: no\n")
    # When the join asks whether the host joined, Then it names the host as written
    assert already_joined(config) == "no"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("token: fwh_x\nhost_name: n1\ntoken: ''\n", r"line 3: 'token' is given twice \(also on line 1\)"),
        ("token: fwh_x\nhost_name: 010\n", r"line 2: '010' is 8"),
    ],
)
def test_a_config_the_agent_refuses_stops_the_join_naming_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, said: str
) -> None:
    # Given an existing config the agent's loader refuses (safe_load read an empty token: not
    # joined, and the join overwrote the config; or the host "8")
    config = tmp_path / "agent.yaml"
    config.write_text(text)
    posted: list[Any] = []
    monkeypatch.setattr(join_module, "post_join", lambda *a, **k: posted.append(a))
    # When the host joins, Then the join stops with the loader's words and nothing is sent or written
    with pytest.raises(JoinFailed, match=rf"{config}: {said}"):
        join(
            server="http://s",
            join_token="fwj_x",
            config_path=config,
            host_name="n1",
            gpu=_NoGpu(),
            settings={},
        )
    assert posted == []
    assert config.read_text() == text


class _NoGpu(GpuBackend):
    def inventory(self) -> list[Any]:  # pragma: no cover - the join stops before
        raise AssertionError("the join read the GPUs")

    def sample(self) -> list[Any]:  # pragma: no cover - never sampled
        raise AssertionError("the join sampled the GPUs")


def test_the_removed_hosts_advice_is_what_rejoins_it(tmp_path: Path) -> None:
    """try43: a removed host's agent logged "re-run the install script to rejoin", but a rerun keeps
    the config holding the refused token (the script's "already joined", the join's "nothing to
    do") and the agent exits 77 again; and the host's name stays taken (a join under it is a 409).
    The line now says what rejoins: uninstall, then install with a new join token and another name."""
    from agent.client import HOST_REMOVED_LOG

    config = tmp_path / "agent.yaml"
    config.write_text("server: ws://s/agent/\ntoken: fwh_refused\nhost_name: n1\n")
    no_gpu: Any = None  # never read: the existing config ends the join first
    report = join(server="http://s", join_token="fwj_new", config_path=config, host_name="n1", gpu=no_gpu, settings={})
    assert "nothing to do" in report  # a rerun of the install script does not rejoin
    assert "re-run the install script" not in HOST_REMOVED_LOG
    assert "--uninstall" in HOST_REMOVED_LOG and "new join token" in HOST_REMOVED_LOG
    assert "--host-name" in HOST_REMOVED_LOG and "stays taken" in HOST_REMOVED_LOG
    assert "\n" not in HOST_REMOVED_LOG  # one line


def test_a_new_join_forgets_the_removed_hosts_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """try56: the note a removed host's agent leaves (``HOST_REMOVED_FILE``, read by ``--uninstall``)
    belongs to the old host: a join that keeps the state directory drops it."""
    from agent.client import HOST_REMOVED_FILE

    state = tmp_path / "state"
    state.mkdir()
    (state / HOST_REMOVED_FILE).write_text("removed from Fairway by an admin; told at Dec 6 2026 23:10:00 UTC\n")
    join_again(tmp_path, monkeypatch, state)

    assert not (state / HOST_REMOVED_FILE).exists()
