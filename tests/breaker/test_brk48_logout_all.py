"""brk48: ``POST auth/logout/`` with ``{"all": "true"}`` (or ``1``, ``"yes"``, a form's ``all=true``:
``curl -d all=true``) answered 204 having deleted only the token it came with, the user's other
tokens working on: a person revoking every session after a stolen laptop was told it was done
while the stolen token still worked. ``all`` is ``true`` or ``false``; another value is refused
(400 ``invalid``) and nothing is deleted. Failed before its fix."""

from __future__ import annotations

import pytest
from knox.models import AuthToken
from rest_framework.test import APIClient

from accounts.services import create_api_token


@pytest.mark.parametrize("given", ["true", 1, "yes", None])
def test_logout_all_of_another_value_is_refused_and_deletes_nothing(given, researcher) -> None:
    _row, used = create_api_token(researcher)
    create_api_token(researcher)  # the stolen laptop's
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {used}")
    response = client.post("/api/v1/auth/logout/", {"all": given}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid" and "all" in response.json(), response.json()
    assert AuthToken.objects.filter(user=researcher).count() == 2


def test_a_forms_all_is_refused_and_true_deletes_every_token(researcher) -> None:
    _row, used = create_api_token(researcher)
    create_api_token(researcher)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {used}")
    assert client.post("/api/v1/auth/logout/", {"all": "true"}).status_code == 400  # multipart, as curl -F
    assert (
        client.post("/api/v1/auth/logout/", "all=true", content_type="application/x-www-form-urlencoded").status_code
        == 400
    )
    assert AuthToken.objects.filter(user=researcher).count() == 2
    assert client.post("/api/v1/auth/logout/", {"all": True}, format="json").status_code == 204
    assert not AuthToken.objects.filter(user=researcher).exists()


def test_logout_without_all_or_with_false_ends_this_token_only(researcher) -> None:
    for body in ({}, {"all": False}):
        _row, used = create_api_token(researcher)
        other, _ = create_api_token(researcher)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {used}")
        assert client.post("/api/v1/auth/logout/", body, format="json").status_code == 204
        assert list(AuthToken.objects.filter(user=researcher).values_list("pk", flat=True)) == [other.pk]
        other.delete()
