"""left59: a statement's file is named by its budget's path and its days, everywhere
(``budgets.statement.statement_file_name``): the admin's read ``statement-SINCE-UNTIL.csv`` (no
budget), the API's the budget's id."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from budgets.models import Budget
from budgets.statement import parse_range, statement_file_name


def test_the_name_holds_the_path_in_safe_characters(org_tree):
    since, until = parse_range("2026-11-01", "2026-11-30")
    assert statement_file_name(["nlp/olmo"], since, until) == "statement-nlp-olmo-2026-11-01-2026-11-30.csv"
    odd = statement_file_name(['vi"s ion/dét;x'], since, until)
    assert odd == "statement-vi_s_ion-d_t_x-2026-11-01-2026-11-30.csv"
    assert statement_file_name(["nlp/olmo", "vision"], since, until) == (
        "statement-nlp-olmo+vision-2026-11-01-2026-11-30.csv"
    )


def test_the_api_and_the_admin_name_it_so(admin, org_tree, api_client_for):
    olmo = org_tree["nlp/olmo"]
    since, until = parse_range(None, None)
    wanted = f'attachment; filename="{statement_file_name([olmo.path], since, until)}"'
    got = api_client_for(admin).get(reverse("budget-statement-csv", args=[olmo.pk]))
    assert got["Content-Disposition"] == wanted
    client = Client()
    client.force_login(admin)
    url = reverse("admin:budgets_budget_changelist")
    done = client.post(url, {"action": "download_statement", "_selected_action": [olmo.pk]})
    assert done["Content-Disposition"] == wanted
    assert Budget.objects.get(pk=olmo.pk).path == "nlp/olmo"
