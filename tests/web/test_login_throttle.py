"""The web log-in page has the API login's throttles (accounts.api.views): per client address
(not reset by X-Forwarded-For), failures per user name and address (sec63), and the same counters
as the API."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import User

PASSWORD = "correct horse battery staple"


@pytest.fixture
def rates(settings):
    """Small login rates: 3 per address, 5 failures per user name and address (a minute each)."""

    def set_rates(login: str = "3/min", login_user: str = "5/min", proxies: int | None = None) -> None:
        rest = dict(settings.REST_FRAMEWORK)
        rest["DEFAULT_THROTTLE_RATES"] = {**rest["DEFAULT_THROTTLE_RATES"], "login": login, "login_user": login_user}
        if proxies is not None:
            rest["NUM_PROXIES"] = proxies
        settings.REST_FRAMEWORK = rest

    set_rates()
    return set_rates


def _web_login(
    username: str,
    password: str = "wrong",  # noqa: S107 -- a wrong password
    *,
    addr: str = "10.0.0.1",
    xff: str | None = None,
) -> Any:
    extra = {"REMOTE_ADDR": addr}
    if xff is not None:
        extra["HTTP_X_FORWARDED_FOR"] = xff
    return Client().post("/login/", {"username": username, "password": password}, **extra)


def test_varying_x_forwarded_for_does_not_reset_the_address_counter(db, rates):
    rates(login_user="1000/min")
    codes = [_web_login(f"user{i}", xff=f"203.0.113.{i}").status_code for i in range(5)]
    assert codes == [200, 200, 200, 429, 429]  # 200: the form again, with "wrong password"
    throttled = _web_login("user9", xff="203.0.113.9")
    assert throttled.status_code == 429 and int(throttled["Retry-After"]) >= 1
    assert "Too many login attempts" in throttled.content.decode()
    assert _web_login("user0", addr="10.0.0.2").status_code == 200  # another address: its own counter


def test_behind_one_trusted_proxy_the_address_the_proxy_saw_is_counted(db, rates):
    rates(login_user="1000/min", proxies=1)
    codes = [_web_login(f"u{i}", addr="10.9.9.9", xff=f"198.51.100.{i}, 192.0.2.7").status_code for i in range(4)]
    assert codes == [200, 200, 200, 429]
    assert _web_login("other", addr="10.9.9.9", xff="192.0.2.8").status_code == 200


def test_one_user_names_failures_are_throttled_per_address_even_with_the_right_password(db, rates):
    rates(login="1000/min")
    User.objects.create_user("researcher", password=PASSWORD)
    codes = [_web_login("researcher", addr="10.0.1.1").status_code for i in range(5)]
    assert codes == [200] * 5
    right = _web_login("researcher", PASSWORD, addr="10.0.1.1")
    assert right.status_code == 429 and "_auth_user_id" not in right.client.session  # not checked
    assert _web_login("someone-else", addr="10.0.1.1").status_code == 200
    # sec63: from another address the person still logs in (counted per name alone, they could not)
    assert _web_login("researcher", PASSWORD, addr="10.0.1.99").status_code == 302


def test_the_page_and_the_api_share_the_counters(db, rates):
    rates(login_user="1000/min")
    api = [APIClient().post("/api/v1/auth/login/", {"username": "x", "password": "y"}, format="json",
                            REMOTE_ADDR="10.7.7.7").status_code for _ in range(2)]  # fmt: skip
    assert api == [400, 400]
    assert _web_login("x", addr="10.7.7.7").status_code == 200
    assert _web_login("x", addr="10.7.7.7").status_code == 429


def test_a_login_under_the_limits_still_logs_in(db, rates):
    User.objects.create_user("researcher", password=PASSWORD)
    response = _web_login("researcher", PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/"


def _admin_login(username: str, password: str = "wrong", *, addr: str = "10.0.0.1") -> Any:  # noqa: S107
    return Client().post("/admin/login/?next=/admin/", {"username": username, "password": password}, REMOTE_ADDR=addr)


def test_the_admin_s_log_in_page_is_throttled_as_the_web_s(db, rates):
    """auth47: the Django admin's own log-in page (``/admin/login/``) checked passwords without the
    throttles: anyone guessed an admin's password there without end while ``/login/`` and the API
    answered 429 after 5 failures. It now counts in the same counters, with the admin's form (staff
    only) and page."""
    rates(login="1000/min")
    User.objects.create_user("boss", password=PASSWORD, is_staff=True, is_superuser=True)
    codes = [_admin_login("boss", addr="10.0.3.1").status_code for _ in range(5)]
    assert codes == [200] * 5  # the admin's form again, with its error
    right = _admin_login("boss", PASSWORD, addr="10.0.3.1")
    assert right.status_code == 429 and "_auth_user_id" not in right.client.session
    assert "Too many login attempts" in right.content.decode()
    assert _web_login("boss", PASSWORD, addr="10.0.3.1").status_code == 429  # one count with /login/'s
    done = _admin_login("boss", PASSWORD, addr="10.0.3.2")
    assert done.status_code == 302 and done["Location"] == "/admin/"
    page = Client().get("/admin/login/?next=/admin/").content.decode()
    assert 'id="login-form"' in page and 'name="next" value="/admin/"' in page and "Django administration" in page
    assert done.client.get("/admin/login/")["Location"] == "/admin/"  # already in: the admin's index
    # a researcher's right password logs nobody into the admin (the admin's form: staff only)
    User.objects.create_user("someone", password=PASSWORD)
    refused = _admin_login("someone", PASSWORD, addr="10.0.3.3")
    assert refused.status_code == 200 and "_auth_user_id" not in refused.client.session
