"""brk55 (breaker): quotes without -M, holds (single, bulk, group, the page), the budget list's
``archived`` filter, a bulk action's partial failure and ``submit --json --wait`` interrupted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from fairway_cli import cli as fairway_cli
from scheduler import services
from scheduler.bulk import do_bulk_action
from scheduler.models import Workload, WorkloadEvent
from scheduler.services import do_hold_group, do_hold_workload, do_submit_workload
from tests.cli.conftest import clock  # noqa: F401 -- the CLI's fake clock
from tests.cli.inprocess import run_cli

HOUR = 3600


# --- a quote without -M prices no minimum runtime its own wall-time limit refuses -------------


def test_a_quote_prices_no_minimum_runtime_above_the_wall_time_limit(researcher_client, submission, cluster):
    """left52's ladder (0, 30m, 2h, 8h, 24h) was priced whatever the request's wall-time limit:
    ``fairway submit --quote -t 1h`` listed M = 2h, 8h and 24h lines charging 8, 32 and 96 GPU-h,
    minimum runtimes a submission with that limit refuses (``max_runtime_below_min``): the ladder
    stops at the limit, as at the site's longest minimum runtime."""
    body = submission(max_runtime="1h")
    del body["min_runtime"]
    lines = researcher_client.post("/api/v1/workloads/quote/", body, format="json").json()["quotes"]
    assert [q["min_runtime_s"] for q in lines] == [0, 1800]

    lines = researcher_client.post("/api/v1/workloads/quote/", {**body, "min_runtime": "45m"}, format="json").json()[
        "quotes"
    ]
    assert [(q["min_runtime_s"], q["yours"]) for q in lines] == [(0, False), (1800, False), (2700, True)]
    refused = researcher_client.post("/api/v1/workloads/", {**body, "min_runtime": "2h"}, format="json")
    assert refused.status_code == 400  # what the dropped lines would have priced


# --- a hold that changed nothing is not counted (or said) as one that held --------------------


def _admin_holds_first(monkeypatch: pytest.MonkeyPatch, admin: Any) -> None:
    """Another request (an admin's hold) commits between a hold's read of a workload and its lock."""
    lock = services._lock_pending
    held: set[int] = set()

    def admin_first(actor: Any, workload: Workload, *, release: bool = False) -> Workload:
        if not release and workload.pk not in held:
            held.add(workload.pk)
            lock(admin, workload)
            services.do_hold_workload(admin, workload)
        return lock(actor, workload, release=release)

    monkeypatch.setattr(services, "_lock_pending", admin_first)


def test_a_bulk_hold_counts_no_workload_another_held_meanwhile(researcher, admin, submit_kwargs, monkeypatch):
    """bulk50's hold counted a workload changed when its hold read differently from the row as the
    bulk read it (``done.hold != w.hold``): an admin's hold committed in between made the owner's
    bulk hold say "held 1 workload" though it changed nothing (the service's no-op). left53 fixed
    the cancel alike; the hold now answers what its service changed."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    _admin_holds_first(monkeypatch, admin)

    outcome = do_bulk_action(researcher, "hold", Workload.objects.filter(pk=w.pk))

    assert (outcome.changed, outcome.skipped) == ([], [(w.pk, "unchanged")])
    assert Workload.objects.get(pk=w.pk).hold == "admin"
    assert WorkloadEvent.objects.filter(workload=w, kind="held", actor=researcher).count() == 0


def test_a_group_hold_counts_no_member_another_held_meanwhile(researcher, admin, submit_kwargs, monkeypatch):
    group = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, array="0-1")).group
    _admin_holds_first(monkeypatch, admin)

    assert do_hold_group(researcher, group) == []


def test_the_hold_answer_says_unchanged_when_another_held_it_meanwhile(
    researcher, researcher_client, admin, submit_kwargs, monkeypatch
):
    """``POST hold/``'s ``changed`` compared the version read before the lock with the one after:
    another's hold in between read as this request's."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    _admin_holds_first(monkeypatch, admin)

    answer = researcher_client.post(f"/api/v1/workloads/{w.pk}/hold/", {}, format="json").json()

    assert (answer["hold"], answer["changed"]) == ("admin", False)


def test_the_pages_hold_of_a_held_workload_says_what_fairway_hold_says(researcher, admin, submit_kwargs):
    """A page shown before an admin's hold still offers "Hold"; its POST changed nothing but said
    "Held pretrain (#1, admin hold): it does not start until released.", where ``fairway hold``
    says "already held by an admin (admin): nothing changed; only an admin may release it"."""
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    do_hold_workload(admin, w)
    client = Client()
    client.force_login(researcher)

    page = client.post(f"/workloads/{w.pk}/hold/", follow=True).content.decode()

    assert "already held by an admin (admin): nothing changed; only an admin may release it" in page
    assert "Held pretrain" not in page


# --- the budget list's archived filter is true or false ---------------------------------------


@pytest.mark.parametrize("value", ["False", "off", "nope", "f", " "])
def test_the_budget_lists_archived_filter_refuses_what_it_does_not_read(researcher_client, org_tree, value):
    """``GET budgets/?archived=false`` hides archived budgets; ``?archived=False`` (or ``off``, a
    typo) listed them all without a word, as if asked for."""
    from budgets.services import do_archive_budget

    do_archive_budget(org_tree["nlp/tulu"])
    response = researcher_client.get("/api/v1/budgets/", {"archived": value})

    assert response.status_code == 400, response.json()
    assert "archived" in response.json()


@pytest.mark.parametrize("value, listed", [("false", False), ("0", False), ("no", False), ("true", True), ("1", True)])
def test_the_budget_lists_archived_filter(researcher_client, org_tree, value, listed):
    from budgets.services import do_archive_budget

    do_archive_budget(org_tree["nlp/tulu"])
    rows = researcher_client.get("/api/v1/budgets/", {"archived": value}).json()

    assert any(row["id"] == org_tree["nlp/tulu"].pk for row in rows) is listed


# --- a bulk action that fails part-way says what it did -----------------------------------------


def test_a_bulk_cancel_failing_part_way_says_how_many_it_canceled(researcher, submit_kwargs, monkeypatch):
    """``fairway cancel --mine --yes`` acts 200 ids a request: a chunk refused by a busy or failing
    server ended the command with that error alone, saying nothing of the workloads the chunks
    before had canceled."""
    from rest_framework.test import APIClient

    for i in range(3):
        do_submit_workload(researcher, **submit_kwargs(name=f"w{i}", gpu_count=1))
    monkeypatch.setattr(fairway_cli, "BULK_CHUNK", 1)
    post = APIClient.post
    confirmed: list[int] = []

    class Busy:
        status_code = 503

        @staticmethod
        def json() -> dict[str, str]:
            return {"detail": "Service unavailable.", "code": "unavailable"}

    def second_fails(self: APIClient, path: str, data: Any = None, *args: Any, **kwargs: Any) -> Any:
        if "bulk" in path and not (data or {}).get("dry_run"):
            confirmed.append(1)
            if len(confirmed) == 2:
                return Busy()
        return post(self, path, data, *args, **kwargs)

    monkeypatch.setattr(APIClient, "post", second_fails)

    # a failing server (5xx), not a refusal: a 503, exit 75 (cli46; left60: a 5xx in the API's format says its words)
    err = run_cli(monkeypatch, researcher, "cancel", "--mine", "--yes", expect=fairway_cli.EXIT_TEMPFAIL)

    assert Workload.objects.filter(state="canceled").count() == 1
    assert "canceled 1 workload of 3 before" in err, err


# --- submit --json --wait, interrupted, names what it submitted ---------------------------------


def _interrupt() -> None:
    raise KeyboardInterrupt


SUBMIT_WAIT = ("submit", "-b", "nlp/olmo", "-c", "default", "-m", "A100", "-M", "0", "--wait")
"""``fairway submit --wait`` of a 1-GPU unallocated ``true``, less its trailing ``-- true``."""


def _submit_wait(monkeypatch: pytest.MonkeyPatch, researcher: Any, fake: Any, *extra: str) -> Callable[[], str]:
    fake(_interrupt)  # the first pause is a Ctrl-C
    return lambda: run_cli(
        monkeypatch, researcher, *SUBMIT_WAIT, *extra, "--", "true", expect=fairway_cli.EXIT_INTERRUPTED
    )


def test_submit_json_wait_interrupted_names_the_workload_it_submitted(researcher, cluster, monkeypatch, clock):  # noqa: F811
    """With ``--json`` nothing is printed before the wait's one document: a Ctrl-C (a CI job
    cancelled) said "the workloads go on (`fairway cancel ID` stops one)", naming no id, so the
    workload submitted could not be found to cancel. left52 named it for the first read only."""
    err = _submit_wait(monkeypatch, researcher, clock, "--json")()

    w = Workload.objects.get()
    assert f"#{w.pk} was submitted" in err, err


def test_a_wait_failing_after_its_first_read_names_the_workload_submitted(researcher, cluster, monkeypatch, clock):  # noqa: F811
    from rest_framework.test import APIClient

    get = APIClient.get
    reads: list[int] = []

    class Gone:
        status_code = 403

        @staticmethod
        def json() -> dict[str, str]:
            return {"detail": "You do not have permission to perform this action.", "code": "permission_denied"}

    def second_refused(self: APIClient, path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("/workloads/"):
            reads.append(1)
            if len(reads) == 2:
                return Gone()
        return get(self, path, *args, **kwargs)

    monkeypatch.setattr(APIClient, "get", second_refused)
    clock()
    err = run_cli(monkeypatch, researcher, *SUBMIT_WAIT, "--json", "--", "true", expect=fairway_cli.EXIT_API)

    w = Workload.objects.get()
    assert f"#{w.pk} was submitted, but" in err, err


def test_submit_wait_interrupted_during_its_first_read_names_the_workload(researcher, cluster, monkeypatch, clock):  # noqa: F811
    """left52 named the submitted work for a Ctrl-C in the first read's pause; one during the read
    itself (a server slow to answer, up to the CLI's 30 s) exited 130 without a word."""
    from rest_framework.test import APIClient

    def slow(self: APIClient, path: str, *args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(APIClient, "get", slow)
    err = _submit_wait(monkeypatch, researcher, clock)()

    assert f"#{Workload.objects.get().pk} was submitted" in err, err


# --- the submit page quotes without a minimum runtime, as the API and the CLI do --------------

SPEC = "name: a\nbudget: nlp/olmo\ncluster: default\ngpu_model: A100\ngpu_count: 4\nimage: x\ncommand: [python]\n"


@pytest.mark.parametrize("mode", ["form", "spec"])
def test_the_pages_quote_without_a_minimum_runtime_prices_the_ladder(researcher, cluster, mode):
    """left52: ``fairway submit --quote`` without ``-M`` and the API's quote without ``min_runtime``
    price the ladder (docs/estimates.md: "one constant for the API, the CLI and the form"); the
    page's "Quote first" answered "This field is required." (the form, and the spec's
    ``min_runtime: This field is required.``)."""
    import re

    from tests.web.test_pages import _form

    client = Client()
    client.force_login(researcher)
    post = {**_form(min_runtime=""), "quote": "1"} if mode == "form" else {"spec": SPEC, "quote": "1"}

    response = client.post("/submit/", post)

    page = response.content.decode()
    assert response.status_code == 200, re.findall(r"<li>(.*?)</li>", page)
    table = page[page.index('id="quote-table"') :]
    rows = re.findall(r"<tr(?: class=\"yours\")?><td>(.*?)</td>", table)
    assert [re.sub("<.*?>", "", r).strip() for r in rows] == ["0 (unallocated)", "30m", "2h", "8h", "1d"]
    assert "yours" not in table.split("</table>")[0]
    assert Workload.objects.count() == 0


def test_the_page_still_needs_a_minimum_runtime_to_submit(researcher, cluster):
    import re

    from tests.web.test_pages import _form

    client = Client()
    client.force_login(researcher)
    for post in ({**_form(min_runtime="")}, {"spec": SPEC}, {**_form(min_runtime="", gpu_count="x"), "quote": "1"}):
        response = client.post("/submit/", post)
        assert response.status_code == 400
        assert Workload.objects.count() == 0
    # a quote refused for another field names that field alone, not the minimum runtime it may leave out
    assert "Enter a whole number." in response.content.decode()
    assert "This field is required." not in response.content.decode()
    # and the browser does not refuse "Quote first" without one itself: the form is not checked by
    # the browser (the server says what is missing, for a quote or a submission alike)
    page = client.get("/submit/").content.decode()
    form = re.search(r'<form[^>]*id="submit-form"[^>]*>', page).group(0)
    assert "novalidate" in form


# --- a running limit lowered below the time already run says it stops now, everywhere -----------


def test_a_limit_below_the_time_run_says_it_stops_on_the_cli_and_the_page(researcher, submit_kwargs, monkeypatch):
    """The ``updated`` event says "already run longer: it stops at the next pass, timeout", but
    ``fairway update ID -t 2h`` said only "wall-time limit now 2h, counted from its start" (and the
    page "Changed …: wall-time limit now 2h, counted from its start."), of work stopped seconds later."""
    from tests.breaker.test_brk51 import _running

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=5 * HOUR))
    _running(w, started_ago_s=3 * HOUR)
    said = "(already run longer: it stops at the next pass, timeout)"

    out = run_cli(monkeypatch, researcher, "update", str(w.pk), "-t", "2h")
    assert out.strip() == f"#{w.pk} pretrain — running: wall-time limit now 2h, counted from its start {said}"
    out = run_cli(monkeypatch, researcher, "update", str(w.pk), "-t", "1h")  # still past: said again
    assert out.strip().endswith(said)

    client = Client()
    client.force_login(researcher)
    w2 = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=HOUR, max_runtime_s=5 * HOUR))
    _running(w2, started_ago_s=3 * HOUR)
    page = client.post(f"/workloads/{w2.pk}/update/", {"max_runtime": "4h"}, follow=True).content.decode()
    assert "wall-time limit now 4h, counted from its start." in page and said not in page
    page = client.post(f"/workloads/{w2.pk}/update/", {"max_runtime": "2h"}, follow=True).content.decode()
    assert f"wall-time limit now 2h, counted from its start {said}." in page


# --- a bulk action's ids past the cap are refused before each is read --------------------------


def test_bulk_ids_past_the_cap_are_refused_before_each_id_is_parsed(researcher_client, settings, cluster):
    """``ids`` was a ListField whose cap ran after every item was parsed: a 2.5 MB body of 1.2
    million ids cost 1.8 s of a web process's CPU before its 400 (any user, 6000 a minute). The count
    is checked first: past it, one refusal and no item read (bad items are not named)."""
    settings.FAIRWAY = {**settings.FAIRWAY, "BULK_MAX": 2}

    answer = researcher_client.post(
        "/api/v1/workloads/bulk/?owner=me", {"action": "hold", "ids": ["x", "y", "z"]}, format="json"
    ).json()

    assert answer == {"ids": ["Ensure this field has no more than 2 elements."], "code": "max_length"}


# --- a skip code with two reasons says both -------------------------------------------------


def test_a_bulk_release_says_each_reason_of_a_code_not_only_the_first(researcher, teammate, admin, submit_kwargs):
    """``reasons`` kept the first message of each code: a release of another's held work (forbidden:
    not one who may) and of one's own admin-held work (forbidden: only an admin may release it)
    explained both as "Only the owner, a budget manager or an admin … may hold or release it",
    which the owner reads as not theirs."""
    from scheduler.services import HOLD_FORBIDDEN, RELEASE_ADMIN_HOLD

    theirs = do_submit_workload(teammate, **submit_kwargs(gpu_count=1, hold=True))
    mine = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    do_hold_workload(admin, mine)

    outcome = do_bulk_action(researcher, "release", Workload.objects.all(), dry_run=True)

    assert outcome.skipped == [(theirs.pk, "forbidden"), (mine.pk, "forbidden")]
    assert HOLD_FORBIDDEN in outcome.reasons["forbidden"] and RELEASE_ADMIN_HOLD in outcome.reasons["forbidden"]


# --- a bulk cancel of started work: one wording, and no charge claimed of unallocated work -------


def test_a_bulk_cancel_of_started_work_is_worded_once_and_claims_no_charge(researcher, submit_kwargs, monkeypatch):
    """The page's preview said "(1 started: asked to stop, they end canceled once their GPUs are
    released, charged until then)" of unallocated work (M = 0: never charged, as the single cancel
    says), and ``fairway cancel --dry-run`` "(1 started: they would be asked to stop)": one wording
    for both, the CLI's and the page's "done" alike (``fairway_cli.words.bulk_stopping_text``)."""
    from fairway_cli.words import bulk_stopping_text
    from tests.breaker.test_brk51 import _running

    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1, min_runtime_s=0))
    _running(w)
    client = Client()
    client.force_login(researcher)

    page = client.get("/workloads/bulk/", {"action": "cancel", "owner": "me"}).content.decode()
    out = run_cli(monkeypatch, researcher, "cancel", "--mine", "--dry-run")

    assert "charged until then" not in page
    assert bulk_stopping_text(1, done=False) in page and bulk_stopping_text(1, done=False) in out
    out = run_cli(monkeypatch, researcher, "cancel", "--mine", "--yes")
    assert bulk_stopping_text(1, done=True) in out


# --- fairway ls --resubmitted-from takes #12, as the list's filter and the pages write it ----------


def test_ls_resubmitted_from_takes_an_id_as_the_pages_write_it(researcher, submit_kwargs, monkeypatch):
    """left53 made ``?resubmitted_from=#12`` the API's (the pages and ``fairway show`` write
    "resubmitted from #12"; ``ls --id #12`` and ``wait #12`` take it), but ``fairway ls
    --resubmitted-from #12`` was a usage error ("'#12' is not a whole number")."""
    old = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    again = researcher_client_resubmit(researcher, old.pk)

    out = run_cli(monkeypatch, researcher, "ls", "--resubmitted-from", f"#{old.pk}")

    assert f"{again}" in out.split()
    run_cli(monkeypatch, researcher, "ls", "--resubmitted-from", "0", expect=fairway_cli.EXIT_USAGE)


def researcher_client_resubmit(user: Any, pk: int) -> int:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    return client.post(f"/api/v1/workloads/{pk}/resubmit/", {}, format="json").json()["id"]


def test_wait_for_workload_0_is_a_usage_error_not_a_failed_workload(researcher, cluster, monkeypatch):
    """``fairway wait 0`` asked the server, whose 400 exits 1: ``fairway wait``'s "a workload did not
    succeed". No workload has id 0: a usage error (2) before any request, as ``wait abc``."""
    err = run_cli(monkeypatch, researcher, "wait", "0", expect=fairway_cli.EXIT_USAGE)
    assert "'0' is not a workload id" in err
    run_cli(monkeypatch, researcher, "show", "#0", expect=fairway_cli.EXIT_USAGE)
