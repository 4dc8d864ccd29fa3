"""brk49 (a careless operator): ``manage.py create_token`` printed a token for a deactivated user,
refused at every use ("User inactive or deleted."), and one with ``--expiry-hours 0.0001`` that had
expired before anyone could paste it (0.36 s). Each is a CommandError now that prints and makes no
token. Failed before the fix."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from knox.models import AuthToken


def test_no_token_for_a_deactivated_user(researcher: Any) -> None:
    researcher.is_active = False
    researcher.save(update_fields=["is_active"])
    out = StringIO()
    with pytest.raises(CommandError, match="deactivated"):
        call_command("create_token", "researcher", stdout=out)
    assert out.getvalue() == "" and not AuthToken.objects.exists()


@pytest.mark.parametrize("hours", ["0.0001", "1e-9", "0.9"])
def test_no_token_that_expires_within_the_hour(researcher: Any, hours: str) -> None:
    out = StringIO()
    with pytest.raises(CommandError, match="at least 1"):
        call_command("create_token", "researcher", "--expiry-hours", hours, stdout=out)
    assert out.getvalue() == "" and not AuthToken.objects.exists()
    call_command("create_token", "researcher", "--expiry-hours", "1", stdout=out)
    assert AuthToken.objects.count() == 1
