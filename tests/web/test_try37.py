"""try37: a new lab's tryout of the pages and the admin (failing-first cases)."""

from __future__ import annotations

import re
from pathlib import Path

from django.test import Client

from scheduler.models import Host
from scheduler.services import do_remove_host, do_set_host_state

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


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


def test_the_admin_host_list_says_a_removed_host_left_its_cluster(admin_browser, admin, hosts):
    """A removed host read "Drained" with its 8 GPUs in the admin's host list, beside the clusters
    list's count without it; its state says it was removed."""
    do_set_host_state(admin, hosts["a100-2"], "draining", "retire")
    do_remove_host(admin, Host.objects.get(name="a100-2"), "decommissioned")
    page = admin_browser.get("/admin/scheduler/host/").content.decode()
    row = re.search(r"<tr>(?:(?!</tr>).)*?a100-2(?:(?!</tr>).)*</tr>", page, re.S)
    assert row is not None
    assert "removed " in row.group(0) and "not in the cluster" in row.group(0)
    other = re.search(r"<tr>(?:(?!</tr>).)*?a100-1(?:(?!</tr>).)*</tr>", page, re.S)
    assert other is not None and "Active" in other.group(0)


def test_the_admin_budget_list_writes_each_cap_as_the_budgets_page(admin_browser, org_tree):
    """The list's "Cap gpu hours" column gave no period, and "On cap" read "run as unallocated
    (unfunded)" for every budget without a cap; one "cap" column in the budgets page's words."""
    from budgets.models import Budget

    olmo = Budget.objects.get(name="olmo")
    Budget.objects.filter(pk=olmo.pk).update(cap_gpu_hours=1, cap_period_days=7, on_cap=Budget.OnCap.HOLD)
    page = admin_browser.get("/admin/budgets/budget/").content.decode()
    assert "1 GPU-h / 7 d, then held" in page
    assert "run as unallocated (unfunded)</td>" not in page  # no budget without a cap names a consequence
    assert "Cap gpu hours" not in page


def test_the_workload_page_writes_a_dependency_as_the_cli(researcher, researcher_client, submission, cluster):
    """The page read "#9 :any (running)" where ``fairway show`` says "#9:any (running)", the form
    the submission takes (``--after 9:any``)."""
    first = researcher_client.post("/api/v1/workloads/", submission(), format="json").json()["id"]
    second = researcher_client.post("/api/v1/workloads/", submission(after=[f"{first}:any"]), format="json").json()[
        "id"
    ]
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{second}/").content.decode()
    assert re.search(rf">#{first}</a>:any <span", page), page[page.find("<dt>after") : page.find("<dt>after") + 300]


def test_the_admin_host_list_writes_the_heartbeat_as_every_other_surface(admin_browser, hosts):
    """The list read "Dec. 6, 2026, 9:19 a.m." where the clusters page and ``fairway hosts`` say
    "09:19:48 UTC"."""
    from django.utils import timezone

    from fairway_cli.numbers import instant_text

    beat = timezone.now().replace(hour=9, minute=19, second=48, microsecond=0)
    Host.objects.filter(name="a100-1").update(last_heartbeat=beat)
    page = admin_browser.get("/admin/scheduler/host/").content.decode()
    assert instant_text(beat) in page
    assert " a.m." not in page and " p.m." not in page
    assert ">never<" in page  # a host never heard from


def test_the_dashboard_explains_no_window_to_a_user_without_budgets(django_user_model, cluster):
    """A user in no budget read "Usage against entitlement over the last window" above "You are not
    a member of any budget yet" (try37's finding): the explanation is for a table that is not there."""
    client = Client()
    client.force_login(django_user_model.objects.create_user("newcomer"))
    page = client.get("/").content.decode()
    assert "not a member of any budget yet" in page
    assert "Usage against entitlement over the last" not in page


def test_the_dashboard_does_not_tell_a_superuser_they_cannot_submit(django_user_model, cluster, org_tree):
    """fin43: a superuser in no budget read "You are not a member of any budget yet; ask your program
    lead" although a superuser may submit to any budget."""
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root-admin", password="x"))
    page = client.get("/").content.decode()
    assert "not a member of any budget yet" not in page
    assert "may submit to any budget" in page
    submit = client.get("/submit/").content.decode()
    assert "not a member of any budget" not in submit
