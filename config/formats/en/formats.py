"""The admin's date-times as every other screen writes them (try44): ``Dec 6 2026 17:41 UTC``.

Django's own English format (``N j, Y, P``: "Dec. 6, 2026, 5:41 p.m.", 12-hour, no zone) is what
the admin showed for each date-time field it renders as it is (join tokens, memberships, usage
entries), beside ``17:41:59 UTC`` on the pages, in the CLI and in the admin's own hosts list
(``fairway_cli.numbers.instant_text``). Minutes, not seconds: instant_text rounds seconds up as
the policy reads instants, a format cannot, and a minute read down never disagrees with them by a
second. Only this one format is set; every other falls back to Django's English ones."""

DATETIME_FORMAT = r"M j Y H:i \U\T\C"
