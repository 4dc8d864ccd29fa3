"""dramatiq's command line (``dramatiq …``, which ``manage.py rundramatiq`` runs) with its main
process's own lines ("Dramatiq '2.2.1' is booting up.", "Sending signal 'SIGTERM' to
subprocesses...", a worker process's death) in Fairway's log format, as its worker processes'
are (they set Django up, whose ``LOGGING`` replaces dramatiq's): one format in the worker's log
(left44; docs/deploy.md §4). Started by ``scheduler/management/dramatiq.sh``."""

from __future__ import annotations

import sys

import dramatiq.cli

from config.logformat import LOG_FORMAT


def main() -> int:
    """Run dramatiq's ``main`` (its arguments from ``sys.argv``) with Fairway's log format; its exit status."""
    dramatiq.cli.LOGFORMAT = LOG_FORMAT  # read by its basicConfig calls (dramatiq 2.x: cli.LOGFORMAT)
    return int(dramatiq.cli.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
