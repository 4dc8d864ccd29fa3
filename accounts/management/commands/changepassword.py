"""``manage.py changepassword``: Django's, then what the change ended (its login tokens; personal
tokens keep working: docs/deploy.md, "API tokens: a password change"). ``accounts`` is listed
before ``django.contrib.auth`` in INSTALLED_APPS, so this command wins."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management.commands import changepassword

from accounts.models import password_changed
from accounts.services import password_changed_words


class Command(changepassword.Command):
    def handle(self, *args: Any, **options: Any) -> str:
        ended: list[int] = []

        def changed(*, login_tokens_ended: int, **_kwargs: Any) -> None:
            ended.append(login_tokens_ended)

        password_changed.connect(changed, weak=False, dispatch_uid="accounts.changepassword")
        try:
            done = super().handle(*args, **options)
        finally:
            password_changed.disconnect(dispatch_uid="accounts.changepassword")
        return f"{done}\n{password_changed_words(sum(ended))}"
