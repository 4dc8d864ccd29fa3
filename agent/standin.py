"""A stand-in training program for the demo and the tests.

``python -m agent.standin --duration SECONDS [--fail]`` prints a progress line (step, fake loss,
``CUDA_VISIBLE_DEVICES``) about once a second for ``SECONDS``, then exits 0 (1 with ``--fail``).
On SIGTERM it exits at once with 143 (128 + SIGTERM), as a well-behaved trainer would after a
last checkpoint.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from types import FrameType

EXIT_SIGTERM = 128 + signal.SIGTERM


class _Terminated(Exception):
    """SIGTERM arrived. Raised by the handler, which prints nothing: a print there re-entered a
    print in progress (``RuntimeError: reentrant call``, exit 1 instead of 143)."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: the exit path below runs once
    raise _Terminated


def main(argv: list[str] | None = None) -> int:
    """Run the stand-in; returns its exit code (0, or 1 with ``--fail``)."""
    parser = argparse.ArgumentParser(prog="python -m agent.standin", description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds to run (default 10)")
    parser.add_argument("--fail", action="store_true", help="exit 1 at the end instead of 0")
    args = parser.parse_args(argv)
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        _run(args.duration, os.environ.get("CUDA_VISIBLE_DEVICES", ""))
    except _Terminated:
        print("standin: SIGTERM received, exiting", flush=True)
        return EXIT_SIGTERM
    print("standin: done" + (" (failing on purpose)" if args.fail else ""), flush=True)
    return 1 if args.fail else 0


def _run(duration: float, devices: str) -> None:
    start = time.monotonic()
    print(f"standin: running {duration:g} s on CUDA_VISIBLE_DEVICES={devices}", flush=True)
    step = 0
    while (remaining := duration - (time.monotonic() - start)) > 0:
        time.sleep(min(1.0, remaining))
        step += 1
        loss = 2.5 * math.exp(-step / 50) + 0.1
        print(f"step {step} loss {loss:.4f} CUDA_VISIBLE_DEVICES={devices}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
