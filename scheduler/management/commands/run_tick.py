"""``manage.py run_tick [CLUSTER ...]``: run one scheduling tick now, in this process (operators, debugging)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.models import Cluster
from scheduler.services import unknown_cluster_words
from scheduler.tick import run_tick


class Command(BaseCommand):
    help = "Run one scheduling tick of the named clusters (default: all) and print what it did."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("clusters", nargs="*", help="cluster names (default: every cluster)")

    def handle(self, *args: Any, **opts: Any) -> None:
        clusters = Cluster.objects.all()
        if opts["clusters"]:
            clusters = clusters.filter(name__in=opts["clusters"])
            missing = set(opts["clusters"]) - set(clusters.values_list("name", flat=True))
            if missing:
                raise CommandError(unknown_cluster_words(missing))
        for cluster in clusters:
            result = run_tick(cluster.pk)
            self.stdout.write(
                f"{cluster.name}: {result.status}; started {len(result.starts)}, stopped {len(result.stops)}, "
                f"host states {result.host_states or '-'}, dropped {result.dropped} ({result.seconds:.3f}s)"
            )
