"""``python manage.py scenario FILE... [--backend memory|db] [--verbose]`` (tests/scenarios/FORMAT.md)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.scenarios.runner import MemoryBackend, run_scenario
from scheduler.scenarios.spec import ScenarioError


class Command(BaseCommand):
    help = "Run scheduling scenario files; exits 0 only when every expectation of every file holds."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE")
        parser.add_argument("--backend", choices=["memory", "db"], default="memory")
        parser.add_argument("--verbose", action="store_true", help="print pending reasons and reservations per step")

    def handle(self, *args: Any, **opts: Any) -> None:
        failed = 0
        for path in opts["files"]:
            if opts["backend"] == "db":
                from scheduler.scenarios.db_backend import DbBackend

                backend: Any = DbBackend()
            else:
                backend = MemoryBackend()
            self.stdout.write(f"== {path} ({opts['backend']})")
            try:
                result = run_scenario(path, backend, verbose=opts["verbose"], emit=self.stdout.write)
            except ScenarioError as exc:
                self.stderr.write(f"error: {exc}")
                failed += 1
                continue
            finally:
                close = getattr(backend, "close", None)
                if close is not None:
                    close()
            if result.ok:
                self.stdout.write(self.style.SUCCESS(f"PASS {result.name}"))
            else:
                failed += 1
                self.stdout.write(self.style.ERROR(f"FAIL {result.name} ({len(result.failures)} failed expectations)"))
        if failed:
            raise CommandError(f"{failed} of {len(opts['files'])} scenario files failed")
