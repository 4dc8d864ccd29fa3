"""A new lab's tryout (tryout36): what a researcher, leadership or an operator tripped on, one test each."""

from __future__ import annotations

import yaml
from django.test import Client

from accounts.services import do_add_membership
from scheduler.models import Workload
from scheduler.services import do_create_cluster, do_register_host
from tests.conftest import connected, gpu_specs


def test_the_submit_page_s_yaml_example_is_this_install_s_and_submits_as_it_stands(org_tree, django_user_model):
    """The YAML example named budget nlp/olmo, cluster ``default`` and 8 × A100 on every install:
    on a lab's ``h100`` cluster "Submit spec" refused the page's own example. It names a budget the
    user may submit to, a cluster and a GPU model of this install, and 1 GPU."""
    cluster = do_create_cluster("h100")
    host, _token = do_register_host(cluster, "gpu1", gpu_specs("gpu1", "H100", 4), {})
    connected(host)
    user = django_user_model.objects.create_user(username="alice", password="pw")
    do_add_membership(user, org_tree["vision/sam"])
    web = Client()
    web.force_login(user)

    example = web.get("/submit/").context["spec_form"].initial["spec"]
    spec = yaml.safe_load(example)
    assert (spec["budget"], spec["cluster"], spec["gpu_model"], spec["gpu_count"]) == ("vision/sam", "h100", "H100", 1)
    assert "cpus" not in spec and "memory" not in spec  # left as comments: the per-GPU share fits any host

    response = web.post("/submit/", {"spec": example})
    assert response.status_code == 302, response.content.decode()[:2000]
    workload = Workload.objects.get()
    assert (workload.budget.path, workload.cluster.name, workload.gpu_model, workload.gpu_count) == (
        "vision/sam",
        "h100",
        "H100",
        1,
    )


def test_the_example_quotes_only_the_names_yaml_would_misread() -> None:
    from web.forms import spec_example

    spec = yaml.safe_load(spec_example(["nlp/olmo"], ["on"], ["100"]))
    assert (spec["budget"], spec["cluster"], spec["gpu_model"]) == ("nlp/olmo", "on", "100")
    assert "budget: nlp/olmo\n" in spec_example(["nlp/olmo"], ["h100"], ["H100"])


def test_the_budgets_page_links_the_statements_its_reader_may_download(researcher, outsider, org_tree, cluster):
    """The statement CSV (members of the budget, admins) had no link in the UI: a member had to
    find the budget's id and call the API with a token. The budgets page links each budget the
    reader may read one of; the link answers the CSV in the browser's session."""
    web = Client()
    web.force_login(researcher)
    page = web.get("/budgets/")
    olmo = org_tree["nlp/olmo"].pk
    assert page.context["statements"] == [("nlp/olmo", f"/api/v1/budgets/{olmo}/statement.csv")]
    assert f'href="/api/v1/budgets/{olmo}/statement.csv"' in page.content.decode()
    csv = web.get(f"/api/v1/budgets/{olmo}/statement.csv")
    assert csv.status_code == 200 and csv.content.decode().startswith("budget,day,project,user,")
    other = Client()
    other.force_login(outsider)
    assert [path for path, _url in other.get("/budgets/").context["statements"]] == ["vision/sam"]
    assert other.get(f"/api/v1/budgets/{olmo}/statement.csv").status_code == 403


def test_the_admin_budget_list_leads_to_the_standing_and_the_pyramid(admin):
    """Leadership edits shares in the admin, but nothing there led to what the shares did: the
    budgets page's standing and the metrics page's pyramid."""
    web = Client()
    web.force_login(admin)
    page = web.get("/admin/budgets/budget/").content.decode()
    assert 'href="/budgets/">Standing' in page and 'href="/metrics/">Pyramid' in page


def test_the_admin_budget_form_says_what_shares_hold_and_caps_do(admin, org_tree):
    """The budget form showed "Cap gpu hours", "Cap period days" and "On cap" bare."""
    web = Client()
    web.force_login(admin)
    page = web.get(f"/admin/budgets/budget/{org_tree['nlp/olmo'].pk}/change/").content.decode()
    assert "Cap (GPU-hours)" in page and "Cap period (days)" in page
    assert "Empty: no cap." in page and "runs unallocated (free, preemptible) or waits" in page
    assert "Weight among its siblings" in page
