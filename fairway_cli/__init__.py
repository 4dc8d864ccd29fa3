"""``fairway``: the researchers' command line for a Fairway server (REST API v1).

Never imports Django: it talks HTTP only (``requests``), so it installs on any laptop.
"""

__version__ = "0.1.0"  # the Fairway release (scheduler/version.py)

__all__ = ["__version__", "main"]


def main(argv: list[str] | None = None) -> int:
    from fairway_cli.cli import main as _main

    return _main(argv)
