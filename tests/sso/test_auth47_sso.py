"""auth47: faults an attacker found as an ordinary researcher, through single sign-on. Each test
failed before its fix."""

from __future__ import annotations

from django.test import Client

from accounts.models import User
from budgets.models import Budget
from tests.sso.conftest import add_person, sso_login
from tests.sso.provider import Provider


def test_a_deactivated_sso_account_s_web_session_ends(sso: Provider, org_tree: dict[str, Budget]):
    """A session begun through single sign-on outlived the account's deactivation: the OIDC
    backend's ``get_user`` (mozilla-django-oidc's) returned an inactive user, so every page (the
    queue, a teammate's env and logs, submit, cancel) went on answering a person the admin had
    shut out, while a password login's session (Django's ``ModelBackend``) and the API's token
    and session ended at once. Now it ends too, as the password's does."""
    add_person(sso, "nora", groups=["lab-nlp"])
    client = Client()
    sso_login(client, sso, "nora")
    assert client.get("/workloads/").status_code == 200
    nora = User.objects.get(username="nora")
    nora.is_active = False
    nora.save(update_fields=["is_active"])
    answer = client.get("/workloads/")
    assert answer.status_code == 302 and answer["Location"].startswith("/login/"), answer
    assert client.get("/api/v1/me/").status_code in (401, 403)
