"""Single sign-on in a real browser (Playwright driving Debian's Chromium, as tests/e2e/test_browser.py):
Fairway's login page → the test provider's form → back, logged in with the budgets of the
person's groups; a personal API token made on the tokens page then works for the API.

Screenshots of the flow go to ``$FAIRWAY_SCREENSHOTS`` when set (``make screenshots`` refreshes
docs/screenshots/), else to the test's temporary directory. Skipped without /usr/bin/chromium.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import requests

from accounts.models import Membership, User
from tests.sso.conftest import add_person
from tests.sso.provider import Provider


def test_a_researcher_logs_in_through_the_identity_provider_and_uses_a_personal_token(
    _no_stray_sessions: None,
    sso: Provider,
    live_server: Any,
    new_page: Any,
    org_tree: Any,
    cluster: Any,
    tmp_path: Path,
) -> None:
    shots = Path(os.environ.get("FAIRWAY_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    add_person(sso, "nora", groups=["lab-nlp", "lab-nlp-leads"])
    page = new_page(viewport={"width": 1200, "height": 760})
    page.goto("/budgets/")
    assert "/login/" in page.url
    page.screenshot(path=str(shots / "sso-01-login.png"))
    page.click("#sso-login")
    page.wait_for_url(f"{sso.issuer}/authorize?**")
    page.fill("#idp-username", "nora")
    page.fill("#idp-password", "wrong")
    page.click("#idp-submit")
    assert "Wrong user name or password" in page.inner_text("#idp-error")
    page.fill("#idp-username", "nora")
    page.fill("#idp-password", "nora-idp-password")
    page.screenshot(path=str(shots / "sso-02-identity-provider.png"))
    page.click("#idp-submit")
    page.wait_for_url(f"{live_server.url}/budgets/")
    assert "nora" in page.inner_text("header")
    page.screenshot(path=str(shots / "sso-03-logged-in-budgets.png"), full_page=True)

    nora = User.objects.get(username="nora")
    assert dict(Membership.objects.filter(user=nora).values_list("budget__name", "role")) == {
        "nlp": "member",
        "olmo": "manager",
    }

    page.goto("/tokens/")
    page.fill("input[name=name]", "laptop")
    page.click("form.filters button[type=submit]")
    token = page.inner_text("#new-token").strip()
    page.screenshot(path=str(shots / "sso-04-personal-token.png"), full_page=True)
    me = requests.get(f"{live_server.url}/api/v1/budgets/", headers={"Authorization": f"Token {token}"}, timeout=10)
    assert me.status_code == 200
