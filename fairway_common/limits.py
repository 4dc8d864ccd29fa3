"""The log, exec and port-forward wire's bounds that the server, the agent and the CLI all read (each
ships this package; the CLI's served wheel ships no ``agent``: ``agent.protocol`` re-exports them)."""

from __future__ import annotations

MAX_LOG_TAIL_BYTES = 64 * 1024
"""Largest log tail, in bytes: one agent ``log`` message, the API's ``logs/?tail=`` and ``fairway logs
--tail`` (try50b: the CLI sent a larger one to be refused by the server, exit 1, its help silent)."""
DEFAULT_LOG_TAIL_BYTES = 16 * 1024
"""The log tail asked when none is named: the API's ``logs/``, ``fairway logs``, a workload's page."""
EXEC_MAX_TIMEOUT_S = 600
"""Longest ``exec.timeout_s``, seconds: the agent's protocol, the API and ``fairway exec --timeout``."""
EXEC_CHUNK_BYTES = 32 * 1024
"""Most bytes of output in one ``exec_output``: escaped as ``\\u0001`` each is 6 characters, far
below ``agent.protocol.MAX_MESSAGE_BYTES``."""
EXEC_TTY_WINDOW = 256 * 1024
"""Most bytes of an interactive session's output (``exec_tty``) the agent sends before the server
acknowledges them (``exec_ack``): a reader that does not read holds at most this much anywhere."""
EXEC_TTY_WINDOW_CHUNKS = 32
"""Most ``exec_output`` messages of one session not yet acknowledged (the server's channel layer
holds 100 messages a channel: many small chunks must not fill it)."""
PORT_CHUNK_BYTES = EXEC_CHUNK_BYTES
"""Most bytes of a forwarded TCP stream in one ``port_data`` (and one websocket frame of ``fairway
port-forward``)."""
STREAM_RETRY_AFTER_KEY = "retry_after"
"""The key of the close reason ``{"retry_after": N}`` of a refusal of ``/ws/exec/`` or
``/ws/port-forward/`` whose API answer has ``Retry-After: N`` (``scheduler.exec_session`` writes it,
``fairway_cli.session`` reads it; ws47)."""
MAX_BACK_DAYS = 400
"""The furthest back, in days, an instant may be given as a duration back from now (``400d``): the
API's ``since`` and ``until`` (``scheduler.api.params.parse_instant``: ``workloads/history/``,
``metrics/pyramid/``, a budget's statement) and the CLI's ``--since``, ``--until`` and ``fairway
metrics --days``, which refuses one past it itself (exit 2; left51: ``fairway history --since 0d``
went to the server, exit 1, where ``fairway metrics --days 0`` was the CLI's usage error)."""
MAX_BACK_S = MAX_BACK_DAYS * 86_400
BACK_RANGE_TEXT = f"a duration from 1s to {MAX_BACK_DAYS}d back, or a date"
"""The refusal of a duration back outside 1 s to :data:`MAX_BACK_DAYS`: the API's 400 and the CLI's
usage error say it alike."""
