"""lead47: a budget's admin page whose move was refused (under an archived budget) named the budget
by the refused path, "robotics/large" in its heading and breadcrumbs, as if it had moved; it names
it as it is. In a real browser (tests/browser.py)."""

from __future__ import annotations

from budgets.models import Budget
from budgets.services import do_archive_budget
from tests.browser import log_in


def test_a_refused_move_leaves_the_page_naming_the_budget_where_it_is(new_page, admin, org_tree):
    olmo, vision = org_tree["nlp/olmo"], org_tree["vision"]
    do_archive_budget(vision)
    page = new_page()
    log_in(page, "admin")
    page.goto(f"/admin/budgets/budget/{olmo.pk}/change/")
    page.evaluate(
        f"""() => {{ const s = document.getElementById('id_parent');
                    s.add(new Option('vision', '{vision.pk}', true, true)); s.value = '{vision.pk}'; }}"""
    )
    page.click("input[name=_save]")
    assert "Budget vision is archived." in page.locator(".field-parent").inner_text()
    assert Budget.objects.get(pk=olmo.pk).parent_id == org_tree["nlp"].pk  # nothing changed
    assert page.locator("#content h2").first.inner_text() == "nlp/olmo"
    crumbs = page.locator(".breadcrumbs").inner_text()
    assert crumbs.endswith("nlp/olmo") and "vision" not in crumbs


def test_the_budget_history_is_titled_with_every_kind_it_lists(new_page, admin, org_tree):
    """admin47: the budget page's history inline was titled "history of shares, holds and archiving"
    while it lists moves, caps and submission limits too: its title names every kind it lists."""
    from budgets.models import ShareChange
    from budgets.services import do_set_shares

    olmo = org_tree["nlp/olmo"]
    do_set_shares(admin, olmo, 3)
    page = new_page()
    log_in(page, "admin")
    page.goto(f"/admin/budgets/budget/{olmo.pk}/change/")
    title = page.locator("#share_changes-group h2").first.inner_text().lower()
    assert "shares, holds and archiving" not in title
    for label in ShareChange.Kind.labels:
        assert str(label).lower() in title, (label, title)
