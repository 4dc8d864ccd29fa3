"""brk48: ``/ws/exec/`` and ``/ws/port-forward/`` opened with an expired login token (tok46) were
refused ``authentication_failed``, the code of a token that never existed, where the API answers
401 ``token_expired``: the CLI's stream refusal (``_stream_refusal``), which reads that code for the
server's "run `fairway login` again", said "not logged in, or the token was revoked" instead, to a
person whose ``fairway ls`` said it had expired. The streams refuse it with the API's code and words
now. Failed before its fix."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken

from accounts.auth import TOKEN_EXPIRED, TOKEN_EXPIRED_TEXT
from accounts.services import create_api_token
from fairway_cli.cli import EXIT_AUTH, _stream_refusal
from fairway_cli.session import SessionRefused
from tests.api.test_exec_session import _run
from tests.test_ws63_services_down import STREAMS, _closed, _first_frame

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


@pytest.mark.parametrize("path", STREAMS)
def test_a_stream_with_an_expired_token_is_refused_as_the_api_refuses_it(path, researcher) -> None:
    row, token = create_api_token(researcher, expiry=timedelta(days=1))
    AuthToken.objects.filter(pk=row.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    frame, closed = _run(_closed(path, token, _first_frame(path, 1)))
    assert (frame["code"], closed["code"]) == (TOKEN_EXPIRED, 4401), (frame, closed)
    assert frame["message"] == TOKEN_EXPIRED_TEXT
    assert not AuthToken.objects.filter(pk=row.pk).exists()  # deleted when presented, as by the API
    said = _stream_refusal(SessionRefused(frame["code"], frame["message"], status=401), 1)
    assert said.exit_code == EXIT_AUTH and "fairway login` again" in str(said), str(said)
