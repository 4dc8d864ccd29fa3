"""brk50: an ``Authorization: Token …`` header whose token is not UTF-8 (a byte such as 0xE9, which
the server reads as Latin-1, as HTTP headers are) was a 500 with a traceback (knox's
``token.decode("utf-8")``, kept in ``accounts.auth.FairwayTokenAuthentication``): it is refused as
any token that is not one, 401 "Invalid token." (the websockets read the header as Latin-1 text and
send it on as UTF-8, which decodes)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient


@pytest.mark.parametrize("token", ["\xe9\xe9\xe9", "abc\xff", "\xc3"])
def test_a_token_that_is_not_utf8_is_refused_401(db, token):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    response = client.get("/api/v1/me/")
    assert response.status_code == 401, response.content
    assert response.json()["detail"] == "Invalid token."
