"""The admin pages render, and the host and workload actions go through the services."""

from __future__ import annotations

import pytest
from django.urls import reverse

from scheduler.models import Host, HostEvent, Workload
from scheduler.services import do_submit_workload
from tests.conftest import PASSWORD


@pytest.fixture
def admin_web(client, admin):
    client.login(username="admin", password=PASSWORD)
    return client


MODELS = [
    "accounts_user",
    "accounts_membership",
    "budgets_budget",
    "budgets_usageentry",
    "scheduler_cluster",
    "scheduler_host",
    "scheduler_gpu",
    "scheduler_workload",
    "scheduler_attempt",
    "scheduler_workloadevent",
    "scheduler_hostevent",
]


@pytest.mark.parametrize("model", MODELS)
def test_admin_changelist_renders(admin_web, researcher, submit_kwargs, model):
    do_submit_workload(researcher, **submit_kwargs())
    response = admin_web.get(reverse(f"admin:{model}_changelist"))
    assert response.status_code == 200


def test_admin_change_pages_render(admin_web, researcher, submit_kwargs, hosts, org_tree):
    workload = do_submit_workload(researcher, **submit_kwargs())
    for name, pk in [
        ("scheduler_workload", workload.pk),
        ("scheduler_host", hosts["a100-1"].pk),
        ("budgets_budget", org_tree["nlp/olmo"].pk),
    ]:
        assert admin_web.get(reverse(f"admin:{name}_change", args=[pk])).status_code == 200


def test_budget_changelist_shows_path_and_normalized_share(admin_web, org_tree):
    page = admin_web.get(reverse("admin:budgets_budget_changelist")).content.decode()
    assert "nlp/olmo" in page
    assert "66.7%" in page


@pytest.mark.parametrize(
    ("action", "state", "drain_now", "kind"),
    [
        ("cordon", "cordoned", False, "cordoned"),
        ("drain", "draining", False, "draining"),
        ("drain_now_action", "draining", True, "drain_now"),
    ],
)
def test_host_actions_change_state_and_record_who(admin_web, admin, hosts, action, state, drain_now, kind):
    host = hosts["a100-1"]
    response = admin_web.post(
        reverse("admin:scheduler_host_changelist"), {"action": action, "_selected_action": [host.pk]}
    )
    assert response.status_code == 302
    host.refresh_from_db()
    assert (host.state, host.drain_now) == (state, drain_now)
    assert HostEvent.objects.filter(host=host, kind=kind, actor=admin).exists()


def test_resume_action_returns_host_to_active(admin_web, hosts):
    host = hosts["a100-1"]
    Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINED)
    admin_web.post(reverse("admin:scheduler_host_changelist"), {"action": "resume", "_selected_action": [host.pk]})
    host.refresh_from_db()
    assert host.state == Host.State.ACTIVE


def test_workload_cancel_action(admin_web, researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs())
    changelist = reverse("admin:scheduler_workload_changelist")
    admin_web.post(changelist, {"action": "cancel", "_selected_action": [workload.pk]})
    workload.refresh_from_db()
    assert workload.state == Workload.State.CANCELED


def test_budget_admin_shows_entitlement_per_cluster_beside_the_shares(admin, org_tree, cluster):
    from django.test import Client

    client = Client()
    client.force_login(admin)
    page = client.get("/admin/budgets/budget/").content.decode()

    # nlp has 2 of 3 shares of 20 GPUs over 168 h: 2,240 GPU-hours per window.
    assert "ntitlement (GPU-h per window)" in page
    assert "default: 2,240" in page


def _budget_form(budget, **changes):
    data = {
        "name": budget.name,
        "parent": budget.parent_id or "",
        "shares": budget.shares,
        "cap_gpu_hours": "",
        "cap_period_days": budget.cap_period_days,
        "on_cap": budget.on_cap,
        "description": "",
        "change_note": "",
        "share_changes-TOTAL_FORMS": "0",
        "share_changes-INITIAL_FORMS": "0",
        "share_changes-MIN_NUM_FORMS": "0",
        "share_changes-MAX_NUM_FORMS": "0",
        "_continue": "1",
    }
    data.update(changes)
    return data


@pytest.mark.parametrize("new_parent", ["nlp", "nlp/olmo"])
def test_a_budget_cannot_be_moved_under_itself_or_its_sub_budgets(admin_web, org_tree, new_parent):
    """tryout22: the admin saved nlp's parent as nlp itself (or as nlp/olmo): a cycle. Every tick
    of every cluster then failed ("the share tree has a cycle") and ``Budget.path`` looped for
    ever, one query per turn (the demo's server grew to 1.3 GB on the change page)."""
    from budgets.models import Budget

    nlp = org_tree["nlp"]
    url = reverse("admin:budgets_budget_change", args=[nlp.pk])
    response = admin_web.post(url, _budget_form(nlp, parent=org_tree[new_parent].pk))
    assert response.status_code == 200
    assert "under itself or one of its sub-budgets" in response.content.decode()
    assert Budget.objects.get(pk=nlp.pk).parent_id == org_tree["org"].pk


def test_a_budgets_path_ends_even_on_a_corrupt_cycle(org_tree):
    """A cycle already in the database (written around the admin) still gives a path: the walk
    stops at the first budget it meets twice, as ``ancestor_ids`` does."""
    from budgets.models import Budget

    Budget.objects.filter(pk=org_tree["nlp"].pk).update(parent=org_tree["nlp/olmo"])
    assert Budget.objects.get(pk=org_tree["nlp/olmo"].pk).path == "nlp/olmo"


def test_a_negative_cap_is_refused(admin_web, org_tree):
    """tryout22: the admin saved a cap of -5 GPU-hours (a budget capped for ever)."""
    from budgets.models import Budget

    sam = org_tree["vision/sam"]
    url = reverse("admin:budgets_budget_change", args=[sam.pk])
    response = admin_web.post(url, _budget_form(sam, cap_gpu_hours="-5"))
    assert response.status_code == 200
    assert "A cap is 0 GPU-hours or more" in response.content.decode()
    assert Budget.objects.get(pk=sam.pk).cap_gpu_hours is None


def test_a_budget_name_with_a_slash_is_refused(admin_web, org_tree):
    """tryout22: the admin renamed a budget "a/b": its path "small/a/b" then named no budget
    (``resolve_budget`` walks names split at '/'), so it could be submitted to by id only. The
    admin now says what ``do_create_budget`` says."""
    from budgets.models import Budget

    sam = org_tree["vision/sam"]
    url = reverse("admin:budgets_budget_change", args=[sam.pk])
    response = admin_web.post(url, _budget_form(sam, name="a/b"))
    assert response.status_code == 200
    assert "without &#x27;/&#x27;" in response.content.decode()
    assert Budget.objects.get(pk=sam.pk).name == "sam"


def test_a_second_live_budget_of_the_same_name_is_refused_not_a_500(admin_web, org_tree):
    """tryout24: adding "nlp" under org again (or renaming tulu to olmo) was a 500: the unique
    constraint is conditional on ``archived_at``, which the admin's form leaves out, so Django
    skipped it and the database raised IntegrityError. The admin now says what
    ``do_create_budget`` says, and nothing is written."""
    from budgets.models import Budget

    before = Budget.objects.count()
    add = reverse("admin:budgets_budget_add")
    response = admin_web.post(add, _budget_form(org_tree["nlp"], parent=org_tree["org"].pk))
    assert response.status_code == 200
    assert "A live budget named &#x27;nlp&#x27; exists there already." in response.content.decode()
    assert Budget.objects.count() == before

    tulu = org_tree["nlp/tulu"]
    response = admin_web.post(reverse("admin:budgets_budget_change", args=[tulu.pk]), _budget_form(tulu, name="olmo"))
    assert response.status_code == 200
    assert "exists there already" in response.content.decode()
    assert Budget.objects.get(pk=tulu.pk).name == "tulu"
    # Saving a budget unchanged is no duplicate of itself.
    response = admin_web.post(reverse("admin:budgets_budget_change", args=[tulu.pk]), _budget_form(tulu))
    assert response.status_code == 302


def test_a_budget_cannot_be_added_under_an_archived_one(admin_web, org_tree):
    from django.utils import timezone

    from budgets.models import Budget

    Budget.objects.filter(pk=org_tree["vision"].pk).update(archived_at=timezone.now())
    form = _budget_form(org_tree["vision/sam"], name="new", parent=org_tree["vision"].pk)
    response = admin_web.post(reverse("admin:budgets_budget_add"), form)
    assert response.status_code == 200
    assert "is archived" in response.content.decode()
    assert not Budget.objects.filter(name="new").exists()


def test_the_admin_index_names_notification_settings_in_plain_english(admin_web):
    page = admin_web.get(reverse("admin:index")).content.decode()
    assert "Notification settings<" in page and "settingss" not in page


def test_the_what_if_prints_both_entitlements_as_the_budgets_page(
    admin_web, cluster, org_tree, researcher, submit_kwargs
):
    """tryout: the actual column printed 298.667 beside the simulated 597.3; try38: both read
    ``597.3`` beside the budgets page's and the admin list's ``597`` (``gpu_hours_text``)."""
    import re

    from budgets.admin import current_shares_yaml
    from budgets.services import do_set_shares, load_tree
    from fairway_cli.numbers import gpu_hours_text
    from scheduler.reports import budget_standings

    do_set_shares(None, org_tree["nlp/olmo"], 10)  # elevenths: entitlements that do not end in .0
    do_submit_workload(researcher, **submit_kwargs())
    page = admin_web.post(
        "/admin/budgets/budget/what-if/", {"shares": current_shares_yaml(), "window": "7d", "cluster": cluster.name}
    ).content.decode()
    rows = re.findall(r'<tr class="whatif-row">(.*?)</tr>', page, re.S)
    assert rows
    entitled = {b.path: gpu_hours_text(b.entitlement_gpu_hours) for b in budget_standings(cluster, load_tree()).budgets}
    for row in rows:
        cells = [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        assert cells[2] == entitled[cells[0]], (cells, entitled)
        assert cells[3] == entitled[cells[0]], (cells, entitled)  # the same shares: the same entitlement


def test_budget_changelist_is_in_tree_order_with_bounded_queries(admin_web, org_tree):
    """tryout: the list was sorted by parent name then name (olmo, tulu, nlp, vision, sam): each
    budget now comes before its sub-budgets, depth-first, siblings by name."""
    import re

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from budgets.services import do_create_budget

    def paths() -> list[str]:
        page = admin_web.get(reverse("admin:budgets_budget_changelist")).content.decode()
        return re.findall(r'<th class="field-path"><a href="[^"]+">([^<]+)</a>', page)

    assert paths() == ["org", "nlp", "nlp/olmo", "nlp/tulu", "vision", "vision/sam"]
    do_create_budget(name="alpha", parent=org_tree["vision"])
    do_create_budget(name="aaa", parent=org_tree["org"])  # a sibling sorted before nlp
    assert paths() == ["org", "aaa", "nlp", "nlp/olmo", "nlp/tulu", "vision", "vision/alpha", "vision/sam"]

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            paths()
        return len(ctx.captured_queries)

    before = queries()
    for n in range(5):
        do_create_budget(name=f"team{n}", parent=org_tree["nlp"])
    queries()  # the tree is loaded again once after a change
    assert queries() == before


def test_tree_order_lists_every_budget_even_on_a_corrupt_cycle(org_tree):
    from budgets.models import Budget
    from budgets.services import tree_order

    Budget.objects.filter(pk=org_tree["nlp"].pk).update(parent=org_tree["nlp/olmo"])
    order = tree_order()
    ids = {b.pk: path for path, b in org_tree.items()}
    assert [ids[pk] for pk in order] == ["org", "vision", "vision/sam", "nlp", "nlp/olmo", "nlp/tulu"]


def test_a_second_root_budget_is_refused(admin_web, org_tree):
    """tryout24: the admin saved a second budget without a parent; every tick of every cluster
    then failed ("the share tree has 2 roots; exactly one is allowed"), and so did the budget tree
    API (500): scheduling stopped until someone deleted it."""
    from django.utils import timezone

    from budgets.models import Budget

    form = _budget_form(org_tree["vision/sam"], name="org2", parent="")
    response = admin_web.post(reverse("admin:budgets_budget_add"), form)
    assert response.status_code == 200
    assert "one root budget, org: choose a parent under it" in response.content.decode()
    assert not Budget.objects.filter(name="org2").exists()
    nlp = org_tree["nlp"]  # moving a budget to the top is the same second root
    response = admin_web.post(reverse("admin:budgets_budget_change", args=[nlp.pk]), _budget_form(nlp, parent=""))
    assert response.status_code == 200 and Budget.objects.get(pk=nlp.pk).parent_id == org_tree["org"].pk
    org = org_tree["org"]  # an archived root is still the tree's root (the snapshot keeps it)
    Budget.objects.filter(pk=org.pk).update(archived_at=timezone.now())
    assert admin_web.post(reverse("admin:budgets_budget_add"), form).status_code == 200
    assert not Budget.objects.filter(name="org2").exists()
    Budget.objects.filter(pk=org.pk).update(archived_at=None)
    # the root itself saves unchanged
    assert admin_web.post(reverse("admin:budgets_budget_change", args=[org.pk]), _budget_form(org)).status_code == 302


@pytest.mark.parametrize("page", ["add", "change"])
def test_the_budget_forms_shares_input_offers_no_less_than_one(admin_web, org_tree, page):
    """brk35: the shares input said ``min="0"`` (a PositiveIntegerField's form field) while the
    model refuses 0 (MinValueValidator(1)): the browser offered a value the server refuses."""
    import re

    args = [org_tree["nlp"].pk] if page == "change" else []
    html = admin_web.get(reverse(f"admin:budgets_budget_{page}", args=args)).content.decode()
    (shares,) = re.findall(r'<input[^>]*name="shares"[^>]*>', html)
    assert 'min="1"' in shares, shares


def _host_form(labels: str) -> dict[str, str]:
    """The host change page's post: its labels, and its read-only inlines' empty management forms."""
    data = {"labels": labels, "_continue": "1"}
    for inline in ("gpus", "events"):
        data |= {f"{inline}-{k}": "0" for k in ("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS")}
        data[f"{inline}-MAX_NUM_FORMS"] = "1000"
    return data


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        ('{"rack": "r1\\u001b[2J"}', "U+001B"),  # an escape sequence: rewrites the terminal showing it
        ('{"rack\\u200b": "r1"}', "U+200B"),  # prints like "rack", is another key
        ('{"": "r1"}', "A label key is not empty"),
        ('["rack"]', "Labels map short strings to strings"),
    ],
)
def test_a_host_label_edit_is_held_to_the_join_rule(admin_web, hosts, labels, said):
    """left35: the host's change page saved labels a join refuses (``check_labels``): a control or
    invisible character, an empty key, a list. Now the form says what the join says; nothing saved."""
    host = hosts["a100-1"]
    before = Host.objects.get(pk=host.pk).labels
    url = reverse("admin:scheduler_host_change", args=[host.pk])
    response = admin_web.post(url, _host_form(labels))
    assert response.status_code == 200
    assert said in response.content.decode()
    assert Host.objects.get(pk=host.pk).labels == before


def test_a_host_label_edit_within_the_rule_is_saved(admin_web, hosts):
    host = hosts["a100-1"]
    url = reverse("admin:scheduler_host_change", args=[host.pk])
    response = admin_web.post(url, _host_form('{"rack": "r2"}'))
    assert response.status_code == 302
    assert Host.objects.get(pk=host.pk).labels == {"rack": "r2"}


def test_the_budget_list_words_share_and_entitlement_as_the_budgets_page(admin_web, org_tree):
    """try38: the admin list printed ``66.67%`` and ``56`` GPU-h where the budgets page, ``fairway
    budgets`` and the API's standing read ``66.7%`` and ``56.0`` (entitlements below 100 GPU-hours were
    rounded to whole hours): one wording, ``pct:1`` and ``gpu_hours_text``."""
    from budgets.services import load_tree
    from fairway_cli.numbers import gpu_hours_text
    from scheduler.models import Cluster
    from scheduler.reports import budget_standings
    from scheduler.services import do_create_cluster, do_register_host

    tiny = do_create_cluster("tiny")
    do_register_host(tiny, "tiny-1", [(0, "GPU-tiny-0", "H100", 80000)])
    standing = budget_standings(Cluster.objects.get(name="tiny"), load_tree())
    olmo = next(b for b in standing.budgets if b.path == "nlp/olmo")
    page = admin_web.get(reverse("admin:budgets_budget_changelist")).content.decode()
    assert f"tiny: {gpu_hours_text(olmo.entitlement_gpu_hours)}" in page  # 1 GPU × 168 h × 1/3: "56.0"
    assert "tiny: 56.0" in page
    assert f"{olmo.normalized_share * 100:.1f}%" in page and "33.3%" in page
    assert "66.67%" not in page


@pytest.mark.django_db
def test_the_first_budget_is_said_to_be_the_root_where_leadership_makes_it(admin_web):
    """try43: an operator made the programs `nlp` then `vision` in the admin; `nlp`, the first, had
    silently become the organisation's root and `vision` was refused ("choose a parent under
    it"). The add page's parent field says what an empty parent makes, and the refusal says how
    to recover when the root was meant as a program."""
    from budgets.models import Budget

    page = admin_web.get(reverse("admin:budgets_budget_add")).content.decode()
    assert "Empty only for the organisation&#x27;s root" in page or "Empty only for the organisation's root" in page
    Budget.objects.create(name="nlp")
    form = {"name": "vision", "shares": "1", "parent": "", "on_cap": "downgrade", "description": ""}
    form.update({"share_changes-TOTAL_FORMS": "0", "share_changes-INITIAL_FORMS": "0"})
    text = admin_web.post(reverse("admin:budgets_budget_add"), form).content.decode()
    assert "one root budget, nlp: choose a parent under it" in text
    assert "the first budget made is the root" in text and "rename it" in text, text[-3000:]
