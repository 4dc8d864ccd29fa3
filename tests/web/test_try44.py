"""try44 (a lab's operator and researcher from the README): what the admin wrote unlike every other screen."""

from __future__ import annotations

from django.test import Client


def test_the_admins_lists_write_instants_in_utc_on_a_24_hour_clock(admin, researcher, cluster):
    """The join tokens list read "Dec. 6, 2026, 5:41 p.m." for the token the cluster action had
    just announced as "valid until 2026-12-06 17:41 UTC", and the memberships list alike, where
    every page, the CLI and the admin's hosts list write 17:41:xx UTC: Django's locale format,
    12-hour and without a zone, for every date-time field the admin shows as it is."""
    from accounts.models import Membership
    from scheduler.services import do_create_join_token

    row, _token = do_create_join_token(admin, cluster)
    assert Membership.objects.filter(user=researcher).exists()
    browser = Client()
    browser.force_login(admin)
    page = browser.get("/admin/scheduler/jointoken/").content.decode()
    expires = row.expires_at
    assert f"{expires:%b} {expires.day} {expires.year} {expires:%H:%M} UTC" in page
    assert " a.m." not in page and " p.m." not in page
    listing = browser.get("/admin/accounts/membership/").content.decode()
    assert " UTC" in listing
    assert " a.m." not in listing and " p.m." not in listing
