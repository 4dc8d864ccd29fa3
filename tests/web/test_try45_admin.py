"""tryout45: the admin's field labels say GPU as every page does, and the share changes' "By actor"
filter names what its empty choice means."""

from __future__ import annotations

import html
import re

from django.apps import apps

from budgets.models import ShareChange
from budgets.services import do_set_hold, do_set_shares


def test_no_field_label_reads_gpu_in_lower_case():
    """Django's labels capitalize a field's name: "Gpus", "Gpu seconds", "Charged gpu seconds"."""
    bad = [
        f"{model._meta.label}.{field.name}: {field.verbose_name}"
        for model in apps.get_models()
        if model._meta.app_label in {"budgets", "scheduler", "accounts"}
        for field in model._meta.get_fields()
        if re.search(r"\bgpus?\b|\bgpu s\b", str(getattr(field, "verbose_name", "")))
    ]
    assert bad == []


def test_the_usage_entries_list_says_gpus_and_gpu_seconds(client, admin, org_tree):
    from django.utils import timezone

    from budgets.models import UsageEntry
    from scheduler.services import do_create_cluster

    now = timezone.now()
    cluster = do_create_cluster("c45")
    UsageEntry.objects.create(budget=org_tree["nlp/olmo"], cluster=cluster, start=now, end=now, gpus=2, gpu_seconds=60)
    client.force_login(admin)
    page = html.unescape(client.get("/admin/budgets/usageentry/").content.decode())
    assert ">GPUs<" in page and ">GPU-seconds<" in page
    assert "Gpus" not in page and "Gpu seconds" not in page


def test_a_usage_entry_names_its_budget_by_path(client, admin, org_tree):
    """admin47: a usage entry read "2 GPUs for budget 7 until …" (its change page's title, the delete
    page, the history): the budget's id, where every page names a budget by its path."""
    from django.utils import timezone

    from budgets.models import UsageEntry
    from scheduler.services import do_create_cluster

    now = timezone.now()
    olmo = org_tree["nlp/olmo"]
    entry = UsageEntry.objects.create(budget=olmo, cluster=do_create_cluster("c47"), start=now, end=now, gpus=2)
    assert "for budget nlp/olmo until" in str(entry) and f"budget {olmo.pk} " not in str(entry)
    client.force_login(admin)
    listing = html.unescape(client.get("/admin/budgets/usageentry/").content.decode())
    assert ">nlp/olmo<" in listing
    change = html.unescape(client.get(f"/admin/budgets/usageentry/{entry.pk}/change/").content.decode())
    assert "for budget nlp/olmo until" in change


def test_the_by_actor_filter_names_its_empty_choice(client, admin, org_tree):
    do_set_shares(admin, org_tree["nlp"], 5)
    do_set_hold(org_tree["vision"], True)  # no account: a command's change
    assert ShareChange.objects.filter(actor=None).count() == 1
    client.force_login(admin)
    page = html.unescape(client.get("/admin/budgets/sharechange/").content.decode())
    actor = page[page.index("By actor") :]
    actor = actor[: actor.index("</details>")] if "</details>" in actor else actor[:2000]
    assert 'title="-"' not in actor and ">-<" not in actor
    assert "no account (a command, or a deleted user)" in actor
    listed = html.unescape(client.get("/admin/budgets/sharechange/?actor__isnull=True").content.decode())
    assert "1 share change" in listed
