"""try37: a new lab's tryout of the pages and the admin (failing-first cases)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@pytest.fixture
def admin_browser(admin, cluster) -> Client:
    client = Client()
    client.force_login(admin)
    return client


def test_the_cluster_page_shows_no_template_comment(admin_browser, hosts):
    """A ``{# … #}`` comment spanning two lines is not a comment in Django: the clusters page
    printed it in every host's actions cell to every admin."""
    page = admin_browser.get("/clusters/").content.decode()
    assert "{#" not in page and "#}" not in page
    assert "formaction); the reason" not in page


def test_no_template_holds_a_comment_over_several_lines():
    """Django's ``{# #}`` ends on its own line; a longer note needs ``{% comment %}``."""
    unclosed = [
        f"{path.relative_to(TEMPLATES)}:{n}"
        for path in TEMPLATES.rglob("*.html")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\{#(?!.*#\})", line)
    ]
    assert unclosed == []
