"""``manage.py create_join_token --cluster C [--ttl 1h] [--note TEXT]``: a single-use join token for a new host."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.errors import ServiceError
from fairway_cli.numbers import instant_text
from scheduler.models import Cluster
from scheduler.services import JOIN_TOKEN_MAX_TTL, do_create_join_token, unknown_cluster_words
from scheduler.trace import parse_duration


def parse_ttl(text: str) -> timedelta:
    """A duration in the project's one grammar (:func:`scheduler.trace.parse_duration`: ``90s``,
    ``15m``, ``1h30m``, ``2d`` or plain seconds) → timedelta; ValueError otherwise. Beyond the
    longest life is kept just beyond it, for the service to refuse with its message (a timedelta
    of 10**20 s would overflow)."""
    seconds = parse_duration(text)
    return timedelta(seconds=min(seconds, int(JOIN_TOKEN_MAX_TTL.total_seconds()) + 1))


class Command(BaseCommand):
    help = "Create a single-use, expiring join token that lets one new host join a cluster; prints it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True, help="cluster the host joins")
        parser.add_argument("--ttl", default="1h", help="validity: 90s, 15m, 1h (default), 1h30m, 2d; at most 30d")
        parser.add_argument("--note", default="", help="free text kept with the token (e.g. the host it is for)")

    def handle(self, *args: Any, **opts: Any) -> None:
        cluster = Cluster.objects.filter(name=opts["cluster"]).first()
        if cluster is None:
            # A first install has no cluster at all, and nothing said where one comes from (tryout36).
            raise CommandError(unknown_cluster_words([opts["cluster"]]))
        try:
            ttl = parse_ttl(opts["ttl"])
            row, token = do_create_join_token(None, cluster, ttl, opts["note"])
        except (ValueError, ServiceError) as exc:
            raise CommandError(str(exc)) from None
        base = str(settings.FAIRWAY.get("PUBLIC_URL") or "http://SERVER").rstrip("/")
        self.stdout.write(token)
        until = instant_text(row.expires_at, absolute=True)
        self.stderr.write(
            f"join token {row.pk} for cluster {cluster.name}, valid until {until}, "
            f"single use. On the new host, as root:\n"
            f"  curl -fsSL {base}/agent/install.sh | FAIRWAY_JOIN_TOKEN={token} bash -s --\n"
        )
        if not settings.FAIRWAY.get("PUBLIC_URL"):
            # pasted as printed, curl could not resolve SERVER (tryout35)
            self.stderr.write(
                "  (replace SERVER with the address the host reaches this server at; set FAIRWAY_PUBLIC_URL "
                'to have it printed, as the admin\'s "Create a join token" does)\n'
            )
