"""The Fairway release this server runs, and which agents it accepts (CHANGELOG.md, docs/deploy.md §11).

One version for the release: the server (``SERVER_VERSION``), the agent (``agent.AGENT_VERSION``,
sent in its ``hello``) and the CLI (``fairway_cli.__version__``, ``fairway --version``) carry the same
number, and ``pyproject.toml`` too (tests/ops/test_version.py keeps them equal).

Agent compatibility rule: the server accepts every agent that speaks its agent protocol version
(``agent.protocol.PROTOCOL_VERSION``, the ``v`` of every message; any other is refused with
``bad_version``), whatever the agent's release number. A release that changes the protocol in an
incompatible way raises ``PROTOCOL_VERSION`` and says so in CHANGELOG.md; additions that old agents
can ignore (new optional fields) do not. So an agent of the same protocol, older or newer, keeps
working (save what CHANGELOG.md says an older server refuses, as ``null`` GPU readings before
nvml56: upgrade the server first); after a protocol change, agents are reinstalled from the new
server (its install script serves its own agent).
"""

from __future__ import annotations

from agent import AGENT_VERSION
from agent.protocol import PROTOCOL_VERSION

SERVER_VERSION = "0.1.0"
ACCEPTED_PROTOCOL_VERSIONS = frozenset({PROTOCOL_VERSION})

__all__ = ["ACCEPTED_PROTOCOL_VERSIONS", "AGENT_VERSION", "PROTOCOL_VERSION", "SERVER_VERSION", "accepts_agent"]


def accepts_agent(protocol_version: object) -> bool:
    """Whether this server accepts an agent speaking ``protocol_version`` (the rule above)."""
    return type(protocol_version) is int and protocol_version in ACCEPTED_PROTOCOL_VERSIONS
