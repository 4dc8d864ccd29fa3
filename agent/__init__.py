"""Fairway host agent: runs attempts on one GPU host for the Fairway server.

Never imports Django: this package is installed alone on GPU hosts (DESIGN.md §2, §5).
"""

AGENT_VERSION = "0.1.0"
