"""break31: faults found trying Fairway as a new researcher, an operator and leadership (brk31)."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduler import lifecycle
from scheduler.models import Attempt
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick
from tests.cli.inprocess import run_cli


def test_an_attempt_that_never_started_is_not_shown_as_starting(researcher, cluster, submit_kwargs, monkeypatch):
    """An attempt that ended ``failed_to_start`` read "starting" in the start column of the page
    and of ``fairway show``, next to its end time: it never started, and never will."""
    w = do_submit_workload(researcher, **submit_kwargs())
    run_tick(cluster.pk)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_failed_to_start(attempt.host, attempt.pk, "no such command")
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{w.pk}/").content.decode()
    row = page.split("<h2>Attempts</h2>")[1].split("</table>")[0]
    assert "starting" not in row and "never started" in row
    out = run_cli(monkeypatch, researcher, "show", str(w.pk))
    attempts = out.split("attempts:")[1].split("events:")[0]
    assert "starting" not in attempts and "never started" in attempts


def test_the_workload_list_refuses_a_parameter_it_does_not_read(researcher, api_client_for, cluster, submit_kwargs):
    """``GET /api/v1/workloads/?user=bob`` (the column says "user"; the filter is ``owner``) and
    ``?mine=1`` listed everyone's workloads as if filtered: brk30 made the web page name such a
    parameter; the API, which ``fairway ls`` and scripts read, still dropped it. Same for history."""
    do_submit_workload(researcher, **submit_kwargs())
    api = api_client_for(researcher)
    for url, param in [
        ("/api/v1/workloads/", "user"),
        ("/api/v1/workloads/", "mine"),
        ("/api/v1/workloads/", "page_size"),
        ("/api/v1/workloads/history/", "owner"),
    ]:
        response = api.get(url, {param: "someone"})
        assert response.status_code == 400, (url, param, response.content[:200])
        body = response.json()
        assert body["code"] == "unknown_parameter" and param in body, body
    for params in [{"limit": "5", "offset": "0", "state": "pending", "owner": "me"}, {"format": "json"}]:
        assert api.get("/api/v1/workloads/", params).status_code == 200
    assert api.get("/api/v1/workloads/history/", {"since": "7d", "limit": "5", "format": "json"}).status_code == 200


def test_an_owner_or_group_filter_naming_nothing_is_a_400_not_an_empty_list(
    researcher, api_client_for, cluster, submit_kwargs
):
    """``?owner=nobdy`` (a typo) listed no workload, as if that user had none, while an unknown
    budget, cluster or state is a 400 naming it (scheduler/api/params.py: "a filter naming nothing
    that exists is a 400 naming it ... never an empty list"); a group that does not exist likewise
    (docs/jobs.md: "a group that does not exist is an error")."""
    do_submit_workload(researcher, **submit_kwargs())
    api = api_client_for(researcher)
    for param, value, words in [("owner", "nobdy", "No user 'nobdy'"), ("group", "999", "No group 999")]:
        response = api.get("/api/v1/workloads/", {param: value})
        assert response.status_code == 400, response.content[:200]
        assert words in response.json()[param][0]
    assert api.get("/api/v1/workloads/", {"owner": "researcher"}).json()["count"] == 1
    assert api.get("/api/v1/workloads/", {"owner": "me"}).json()["count"] == 1
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/workloads/", {"owner": "nobdy"}).content.decode()
    assert "No user &#x27;nobdy&#x27;" in page or "No user 'nobdy'" in page


def test_the_group_list_filters_by_any_owner_and_refuses_what_it_does_not_read(
    researcher, teammate, api_client_for, cluster, submit_kwargs
):
    """``GET /api/v1/groups/?owner=teammate`` listed every group, the researcher's too (only
    ``owner=me`` was read); ``?owner=nobdy`` and ``?user=`` likewise listed everything."""
    do_submit_workload(researcher, **submit_kwargs(array="0-1", gpu_count=1))
    api = api_client_for(researcher)
    assert api.get("/api/v1/groups/", {"owner": "teammate"}).json()["count"] == 0
    assert api.get("/api/v1/groups/", {"owner": "researcher"}).json()["count"] == 1
    assert api.get("/api/v1/groups/", {"owner": "me"}).json()["count"] == 1
    assert "No user 'nobdy'" in api.get("/api/v1/groups/", {"owner": "nobdy"}).json()["owner"][0]
    assert api.get("/api/v1/groups/", {"user": "teammate"}).json()["code"] == "unknown_parameter"


def test_the_workloads_page_keeps_its_filters_in_its_refresh_and_page_links(researcher, cluster, submit_kwargs):
    """The rows' 5 s refresh (``hx-get``) and the "older →" link wrote the filters unencoded:
    ``?owner=j+doe`` came back as the owner "j doe", ``?budget=R&D`` as ``budget=R`` and a ``D``,
    so 5 s after loading, the page listed another filter's rows (or none)."""
    from accounts.models import User

    User.objects.create_user("j+doe", password="x")
    for _ in range(51):  # more than one page (50), so the "older →" link is there
        do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    browser = Client()
    browser.force_login(researcher)
    page = browser.get("/workloads/", {"owner": "j+doe"}).content.decode()
    assert "owner=j%2Bdoe" in page and "owner=j+doe" not in page
    page = browser.get("/workloads/", {"owner": "researcher", "state": "pending,running"}).content.decode()
    assert "state=pending%2Crunning" in page and 'href="?owner=researcher&amp;state=pending%2Crunning&page=2"' in page


def test_a_host_action_refuses_a_body_it_cannot_read_and_changes_nothing(admin, api_client_for, hosts):
    """``POST hosts/NAME/cordon/`` with ``{"reasn": "disk swap"}`` (a typo) or a JSON list as the
    body cordoned the host without the reason, where a submission refuses an unknown field."""
    from scheduler.models import Host, HostEvent

    api = api_client_for(admin)
    name = next(iter(hosts))
    for body in [{"reasn": "disk swap"}, ["disk swap"], {"reason": "ok", "drain_now": True}]:
        response = api.post(f"/api/v1/hosts/{name}/cordon/", body, format="json")
        assert response.status_code == 400, (body, response.content[:200])
    assert Host.objects.get(name=name).state == Host.State.ACTIVE and not HostEvent.objects.filter(kind="cordoned")
    assert api.post(f"/api/v1/hosts/{name}/cordon/", {"reason": "disk swap"}, format="json").status_code == 200
    assert api.post(f"/api/v1/hosts/{name}/resume/", {}, format="json").status_code == 200
    assert api.post(f"/api/v1/hosts/{name}/drain/").status_code == 200  # no body: no reason


@pytest.mark.parametrize(
    ("url", "known"),
    [
        ("/api/v1/hosts/", {"cluster": "default", "state": "active"}),
        ("/api/v1/budgets/", {"archived": "false"}),
        ("/api/v1/budgets/tree/", {"cluster": "default"}),
        ("/api/v1/metrics/", {"cluster": "default"}),
        ("/api/v1/metrics/pyramid/", {"cluster": "default", "since": "2h", "until": "1h"}),
    ],
)
def test_the_reading_endpoints_refuse_a_parameter_they_do_not_read(researcher, api_client_for, cluster, url, known):
    """``hosts/?stat=drained`` (a typo) listed every host, ``budgets/tree/?clustr=h100`` every
    cluster's tree: a filter dropped reads as applied (the workloads list's brk31 fault)."""
    api = api_client_for(researcher)
    response = api.get(url, {"clustr": "default"})
    assert response.status_code == 400 and response.json()["code"] == "unknown_parameter", response.content[:200]
    assert api.get(url, {**known, "format": "json"}).status_code == 200


def test_a_statement_refuses_a_parameter_it_does_not_read(researcher, api_client_for, org_tree):
    api = api_client_for(researcher)
    url = f"/api/v1/budgets/{org_tree['nlp/olmo'].pk}/statement.csv"
    response = api.get(url, {"sinc": "2026-01-01"})
    assert response.status_code == 400 and response.json()["code"] == "unknown_parameter"
    assert api.get(url, {"since": "2026-01-01", "until": "2026-01-02"}).status_code == 200


@pytest.mark.parametrize(("window", "words"), [("99999999d", "at most 400d"), ("0d", "longer than zero")])
def test_simulate_from_db_refuses_the_windows_the_admin_what_if_refuses(cluster, org_tree, window, words):
    """``manage.py simulate --from-db --since 99999999d`` was an OverflowError traceback and
    ``--since 0d`` replayed nothing, where the admin's what-if refuses both (one rule for both)."""
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=words):
        call_command("simulate", "--from-db", "--since", window)


def test_a_submit_page_that_shows_a_typed_secret_back_is_not_cached(researcher, cluster):
    """A refused or quoted submission shows the form again with the secret env the user typed
    (so a quote can be submitted as is), but the page had no ``Cache-Control``: the browser could
    keep the secret in its cache or history. Every submit page is now ``no-store``."""
    from tests.web.test_pages import _form

    browser = Client()
    browser.force_login(researcher)
    for data in [_form(gpu_count="-3"), _form(quote="1")]:
        page = browser.post("/submit/", data)
        assert "hf_secret" in page.content.decode()
        assert "no-store" in page.headers.get("Cache-Control", ""), page.headers
    assert "no-store" in browser.get("/submit/").headers.get("Cache-Control", "")


def test_the_tokens_page_that_shows_a_new_token_once_is_not_cached(researcher):
    """The tokens page shows a new token's plaintext once, with no ``Cache-Control``."""
    browser = Client()
    browser.force_login(researcher)
    page = browser.post("/tokens/", {"name": "laptop"})
    assert page.status_code == 200 and "no-store" in page.headers.get("Cache-Control", ""), page.headers


def test_the_page_lists_an_attempts_gpus_in_the_apis_order(researcher, cluster, submit_kwargs):
    """The page ordered an attempt's GPUs by rank alone (0 for every GPU of one host), so the
    database's order decided: ``philly-001:1 philly-001:0`` on the page, ``philly-001:0,1`` in the
    API and ``fairway show``."""
    from scheduler.models import AttemptGPU

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=2))
    run_tick(cluster.pk)
    attempt = Attempt.objects.get(workload=w)
    links = sorted(AttemptGPU.objects.filter(attempt=attempt).select_related("gpu__host"), key=lambda x: -x.gpu.index)
    AttemptGPU.objects.filter(attempt=attempt).delete()
    for link in links:  # stored highest index first
        AttemptGPU.objects.create(attempt=attempt, gpu=link.gpu, rank=0, open=True)
    host, low, high = links[-1].gpu.host.name, links[-1].gpu.index, links[0].gpu.index
    browser = Client()
    browser.force_login(researcher)
    page = browser.get(f"/workloads/{w.pk}/").content.decode()
    assert f"{host}:{low} {host}:{high}" in page, page.split("<h2>Attempts</h2>")[1][:1500]
