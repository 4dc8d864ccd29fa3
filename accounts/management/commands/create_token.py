"""``manage.py create_token USERNAME [--name NAME] [--expiry-hours H]``: print a new personal API token
(for the CLI/demo), named for the command unless ``--name`` is given."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import ApiTokenInfo, User
from accounts.services import COMMAND_TOKEN_NAME, AccountError, check_token_name, create_api_token
from fairway_cli.args import positive_number


class Command(BaseCommand):
    help = "Create a knox API token for USERNAME and print it (it is stored hashed and cannot be shown again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--name",
            default=COMMAND_TOKEN_NAME,
            help=f"the token's name on the tokens page (1-100 characters; default: {COMMAND_TOKEN_NAME!r})",
        )
        parser.add_argument(  # timedelta holds at most 999,999,999 days
            "--expiry-hours", type=positive_number(24 * 36500), default=None, help="at least 1; default: never expires"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            user = User.objects.get(username=options["username"])
        except User.DoesNotExist:
            raise CommandError(f"no user {options['username']!r}") from None
        if not user.is_active:  # brk49: its token was refused at every use ("User inactive or deleted.")
            raise CommandError(
                f"user {user.username!r} is deactivated: a token of theirs would be refused at every use "
                "(activate them in the admin first); no token made"
            )
        hours = options["expiry_hours"]
        if hours is not None and hours < 1:  # brk49: 0.0001 made a token expired before it was pasted
            raise CommandError("--expiry-hours must be at least 1 (a token expiring sooner is gone before it is used)")
        try:
            check_token_name(options["name"])
        except AccountError as exc:
            raise CommandError(exc.message) from None
        expiry = timedelta(hours=hours) if hours else None
        _instance, token = create_api_token(
            user, expiry=expiry, name=options["name"].strip(), kind=ApiTokenInfo.Kind.PERSONAL
        )
        self.stdout.write(token)
