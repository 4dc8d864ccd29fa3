"""tryout45: a token made by ``manage.py create_token`` says where it came from (it showed on the
tokens page as an unnamed "login" token, as if a login had made it)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from knox.models import AuthToken


def test_a_command_token_is_named_for_the_command(researcher, client):
    out = StringIO()
    call_command("create_token", "researcher", stdout=out)
    token = AuthToken.objects.get(user=researcher)
    assert (token.info.kind, token.info.name) == ("personal", "manage.py create_token")
    client.force_login(researcher)
    page = client.get("/tokens/").content.decode()
    assert "<td>manage.py create_token</td>" in page and "<td>personal</td>" in page


def test_a_command_token_takes_a_name(researcher):
    call_command("create_token", "researcher", "--name", "ci runner", stdout=StringIO())
    assert AuthToken.objects.get(user=researcher).info.name == "ci runner"


@pytest.mark.parametrize("name", ["", " ", "x" * 101])
def test_a_bad_name_is_refused_and_makes_no_token(researcher, name):
    with pytest.raises(CommandError, match="A token name is 1-100 characters"):
        call_command("create_token", "researcher", "--name", name, stdout=StringIO())
    assert not AuthToken.objects.filter(user=researcher).exists()
