"""sec63: the per-user-name login limit counted every attempt from any address, before the password:
ten tries a minute from one address kept ``admin`` out of the web login and the API's token
endpoint everywhere. Now (as django-axes and Keycloak): *failed* attempts are counted per (user
name, client address) and checked before the password; every attempt per address, as before. An
attacker at one address is stopped there; the person, from another address, still logs in."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import User

PASSWORD = "correct horse battery staple"
LOGIN = "/api/v1/auth/login/"
ATTACKER, OFFICE = "198.51.100.66", "10.0.0.7"


@pytest.fixture
def admin_account(db):
    return User.objects.create_user("admin", password=PASSWORD, is_staff=True)


def api(username: str, password: str = "wrong", *, addr: str) -> int:  # noqa: S107 -- a wrong password
    body = {"username": username, "password": password}
    return APIClient().post(LOGIN, body, format="json", REMOTE_ADDR=addr).status_code


def web(username: str, password: str = "wrong", *, addr: str) -> int:  # noqa: S107
    return Client().post("/login/", {"username": username, "password": password}, REMOTE_ADDR=addr).status_code


def test_failures_from_one_address_do_not_lock_the_person_out_from_another(admin_account):
    # Given an attacker who spent admin's failures (the default: 10 a minute per name and address)
    codes = [api("admin", addr=ATTACKER) for _ in range(12)]
    assert codes == [400] * 10 + [429, 429]
    assert web("Admin ", addr=ATTACKER) == 429  # the same name however written, the page too
    # Then admin, from the office, logs in with the right password, on the API and the page
    assert api("admin", PASSWORD, addr=OFFICE) == 200
    assert web("admin", PASSWORD, addr=OFFICE) == 302


def test_the_attackers_address_is_refused_even_with_the_right_password(admin_account):
    for _ in range(10):
        web("admin", addr=ATTACKER)
    assert api("admin", PASSWORD, addr=ATTACKER) == 429  # not checked: no oracle for the guesser


def test_only_failures_count_and_a_success_starts_the_count_again(admin_account, settings):
    rest = dict(settings.REST_FRAMEWORK)
    rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], "login": "1000/min"}
    settings.REST_FRAMEWORK = rest
    assert [api("admin", PASSWORD, addr=OFFICE) for _ in range(12)] == [200] * 12  # successes: no failures
    assert [api("admin", addr=OFFICE) for _ in range(9)] == [400] * 9
    assert api("admin", PASSWORD, addr=OFFICE) == 200  # a typo or nine, then the right one
    assert [api("admin", addr=OFFICE) for _ in range(11)] == [400] * 10 + [429]


def test_every_attempt_from_one_address_is_still_limited(admin_account):
    # The per-address limit (30 a minute by default) counts every attempt, any name: no spraying
    codes = [api(f"user{i}", addr=ATTACKER) for i in range(31)]
    assert codes == [400] * 30 + [429]
    assert api("admin", PASSWORD, addr=OFFICE) == 200


def test_the_failures_are_shared_through_redis(admin_account, redis_cache):
    codes = [api("admin", addr=ATTACKER) for _ in range(11)]
    assert codes == [400] * 10 + [429]
    assert api("admin", PASSWORD, addr=OFFICE) == 200
    assert [api("admin", addr=OFFICE) for _ in range(11)] == [400] * 10 + [429]
