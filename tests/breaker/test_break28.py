"""break28: faults found trying Fairway as a new user and with hostile input; each case names what it was."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("param", ["state", "budget", "cluster"])
@pytest.mark.parametrize("value", ["%00", "50%", "%(x)s", "%s"])
def test_a_workload_filter_with_a_percent_sign_is_a_400_that_names_it(researcher_client, cluster, param, value):
    """``GET workloads/?state=%25s`` (any unknown state, budget or cluster holding ``%``) was a 500:
    django-filter formats every message with ``%`` and the message quoted the value."""
    response = researcher_client.get("/api/v1/workloads/", {param: value})
    assert response.status_code == 400, response.content
    assert value in response.json()[param][0]


@pytest.mark.parametrize("memory", [1, 32000, "512K", "5M"])
def test_a_memory_request_no_program_runs_in_is_refused_at_submission(researcher_client, submission, cluster, memory):
    """``memory: 32000`` (a Slurm user's ``--mem`` is megabytes; here a bare number is bytes) was
    admitted: every attempt's cgroup killed it before its command ran, four failed starts later
    the workload failed with "the attempt's wrapper ended before its command ran (exit -9)" and
    not a word about memory. A request below Docker's own floor (6M) is refused at submission."""
    from scheduler.models import Workload

    response = researcher_client.post("/api/v1/workloads/", submission(memory=memory), format="json")
    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["code"] == "invalid_memory"
    assert "6M" in body["memory"][0] and "bytes" in body["memory"][0]
    assert not Workload.objects.exists()
    ok = researcher_client.post("/api/v1/workloads/", submission(memory="6M"), format="json")
    assert ok.status_code == 201, ok.json()


def test_a_budget_given_twice_in_a_shares_file_is_named_not_silently_overwritten():
    """The what-if's shares text (and ``simulate --budgets``) with ``large: 1`` then ``large: 2``
    (or ``/large/: 2``, the same path) ran with the second value, saying nothing: a leadership
    what-if on a file edited twice answered for a tree nobody meant."""
    from scheduler.policy.types import Budget
    from scheduler.sim.whatif import BudgetFileError, parse_shares

    budgets = [Budget(key="r", name="org", parent=None, shares=1), Budget(key="a", name="large", parent="r", shares=1)]
    for text in ["shares:\n  large: 1\n  large: 2\n", "shares:\n  large: 1\n  /large/: 2\n"]:
        # the strict reader's words for the same key twice (left39), the file's for the same path
        with pytest.raises(BudgetFileError, match=r"line 3: (budget )?'large' is given twice \(also on line 2\)"):
            parse_shares(text, budgets)
    assert [b.shares for b in parse_shares("shares:\n  large: 2\n", budgets)] == [1, 2]


def test_the_hour_before_a_cluster_had_gpus_is_not_in_the_pyramid(cluster, researcher, monkeypatch):
    """A server started at 10:58 on a cluster made at 10:58 rolled up "the previous hour", 09:00,
    in which no GPU was registered: the pyramid (page, API, ``fairway metrics``) covered "09:00 to
    now, 2 complete hours" and charted an hour of 0 % availability, an outage that never was.
    An hour without registered GPU-time is not stored."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler.models import ClusterHourlyMetrics, Host
    from scheduler.pyramid import hour_of, pyramid_report, rollup_previous_hour

    now = timezone.now()
    Host.objects.update(created_at=hour_of(now) + timedelta(seconds=1))
    rollup_previous_hour(now)
    assert not ClusterHourlyMetrics.objects.exists()
    (report,) = pyramid_report([cluster], now - timedelta(days=7), now, now)
    assert report["range"]["complete_hours"] == 0
    # a cluster whose hosts were there is rolled up as before
    Host.objects.update(created_at=now - timedelta(hours=3))
    assert rollup_previous_hour(now) == 1
    assert ClusterHourlyMetrics.objects.get().registered_gpu_s > 0


def test_a_number_in_the_command_is_named_in_the_refusal(researcher_client, submission, cluster):
    """A spec file's ``command: [python, train.py, --steps, 1000]`` (YAML reads 1000 as a number;
    env values that are numbers are taken) was refused with only "The command is a non-empty list
    of strings (argv)", which the command looks like: the refusal names the argument to quote."""
    body = submission(command=["python", "train.py", "--steps", 1000])
    response = researcher_client.post("/api/v1/workloads/", body, format="json")
    assert response.status_code == 400
    (message,) = response.json()["command"]
    assert "argument 4" in message and "1000" in message and "quote" in message


def test_a_home_mount_refuses_a_user_name_with_a_trailing_newline():
    """``USER_RE.match`` with ``$`` took ``"rita\\n"`` (``$`` matches before a final newline): the
    ``{user}`` expansion, documented as letters, digits, ``_ . -`` only, put a newline into a host
    path (a user made by a script or a provider, around the form's validator)."""
    from scheduler.mounts import NAME_RE, USER_RE

    assert not USER_RE.fullmatch("rita\n") and not USER_RE.match("rita\n")
    assert not NAME_RE.match("datasets\n")
    assert USER_RE.match("rita.k-2") and NAME_RE.match("datasets")


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_webhook_connects_to_the_address_it_checked(researcher, submit_kwargs, monkeypatch, scheme):
    """The send checked the webhook's host (public address) and then let urllib resolve the name
    again to connect: a name answering 93.184.216.34 to the check and 127.0.0.1 to the connection
    (DNS rebinding, TTL 0) reached the server's own network. It connects to the checked address."""
    import socket

    from django.utils import timezone

    from scheduler import lifecycle, notifications
    from scheduler.models import Attempt, Notification, NotificationSettings
    from scheduler.services import do_submit_workload
    from scheduler.tick import run_tick

    answers = iter(["93.184.216.34", "127.0.0.1", "127.0.0.1"])

    def rebinding(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    connected: list[tuple[str, int]] = []

    def create_connection(address, *args, **kwargs):
        connected.append(address)
        raise ConnectionRefusedError("test: not connecting")

    NotificationSettings.objects.create(
        user=researcher, webhook_kinds=["started"], webhook_url=f"{scheme}://hooks.example.org/x"
    )
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    run_tick(w.cluster_id, now=timezone.now())
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=timezone.now())
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(RuntimeError, match="not delivered yet"):
        notifications.deliver(Notification.objects.get().key)
    assert connected == [("93.184.216.34", 443 if scheme == "https" else 80)]


@pytest.mark.parametrize("seconds", [1, 2, 5.9])
def test_a_charge_of_a_few_gpu_seconds_does_not_read_as_zero(seconds):
    """A 1-GPU workload that ran 2 s showed "charged: 0.0 GPU-min" (``fairway show``, ``fairway
    ls``, the page): read as nothing charged, beside an allocated attempt that was."""
    from fairway_cli.numbers import gpu_time_text

    assert gpu_time_text(seconds) == "less than 0.1 GPU-min"
    assert gpu_time_text(6) == "0.1 GPU-min" and gpu_time_text(0) == "0 GPU-h"


def test_the_cli_takes_the_api_url_for_the_server_url():
    """README: "the REST API at /api/v1/". ``fairway login --server https://host/api/v1/`` (the
    URL a new user has at hand) called ``/api/v1/api/v1/me/`` and said only "Not found."."""
    from fairway_cli.cli import Api, server_root

    for url in ["http://h:8000/api/v1/", "http://h:8000/api/v1", "http://h:8000/", "http://h:8000"]:
        assert Api(url).server == "http://h:8000" == server_root(url)
    assert server_root("https://h/fairway/api/v1/") == "https://h/fairway"


def test_an_answer_that_is_no_json_says_it_is_no_fairway_api(monkeypatch):
    """A server URL pointing at another site (a proxy's login page, a web root with ``?x=1``)
    answered HTML with 200: the CLI said "the server failed: HTTP 200", as if Fairway broke."""
    from fairway_cli import cli

    class Html:
        status_code = 200
        headers: dict[str, str] = {}  # a response's, as requests gives (read for Retry-After)

        def json(self):
            raise ValueError("no JSON")

    api = cli.Api("http://h", "t")
    monkeypatch.setattr(api.session, "request", lambda *a, **k: Html())
    with pytest.raises(cli.CliError) as caught:
        api.call("GET", "me/")
    assert "HTTP 200" in str(caught.value) and "not JSON" in str(caught.value)
    assert "Fairway" in str(caught.value) and "failed" not in str(caught.value)


def test_after_takes_an_id_as_every_surface_writes_it(researcher, submit_kwargs, researcher_client, submission):
    """Every surface names work "#12" (``fairway ls``, the pages, "In the way: #12 …"), and
    ``fairway show '#12'`` takes it, but ``--after '#12'`` (web form: After) was refused as
    "not ID, ID:ok or ID:any"."""
    from scheduler.models import WorkloadDependency
    from scheduler.services import do_submit_workload

    first = do_submit_workload(researcher, **submit_kwargs())
    response = researcher_client.post("/api/v1/workloads/", submission(after=[f"#{first.pk}"]), format="json")
    assert response.status_code == 201, response.json()
    assert WorkloadDependency.objects.get().after_id == first.pk
    refused = researcher_client.post("/api/v1/workloads/", submission(after=["##1"]), format="json")
    assert refused.status_code == 400


@pytest.mark.parametrize("other", ["org/nlp", "nlp/", "{id}"])
def test_group_rules_naming_one_budget_two_ways_grant_the_strongest_role(org_tree, other):
    """``FAIRWAY_OIDC_GROUP_RULES`` naming a budget as ``nlp`` in one group and ``org/nlp`` (or its
    id) in another (both resolve to it) were synchronised spelling by spelling: a lead in both
    groups ended as whichever spelling sorted last (``member``), and a lead in the ``manager``
    group alone lost the membership altogether (the other spelling "was not granted")."""
    import json

    from accounts.models import Membership, User
    from accounts.oidc import sync_rights
    from accounts.oidc_rules import parse_group_rules

    nlp = org_tree["nlp"]
    spelled = other.format(id=nlp.pk)
    rules = parse_group_rules(json.dumps({"all": [f"member:{spelled}"], "leads": ["manager:nlp"]}))
    for groups in (["all", "leads"], ["leads"]):
        lead = User.objects.create_user(f"lead{len(groups)}")
        sync_rights(lead, groups, rules)
        assert list(Membership.objects.filter(user=lead).values_list("budget_id", "role")) == [(nlp.pk, "manager")]
    someone = User.objects.create_user("someone")
    sync_rights(someone, ["all"], rules)
    assert list(Membership.objects.filter(user=someone).values_list("role", flat=True)) == ["member"]
    sync_rights(someone, [], rules)
    assert not Membership.objects.filter(user=someone).exists()


def test_a_host_action_refusal_says_who_may_and_which_host_is_unknown(researcher_client, admin_client_api, hosts):
    """``fairway hosts drain NAME`` said "You do not have permission to perform this action." to a
    researcher (the page: "only admins cordon, drain or resume hosts") and "Not found." to an
    admin who mistyped the name."""
    refused = researcher_client.post("/api/v1/hosts/a100-1/drain/", {}, format="json")
    assert refused.status_code == 403 and "admins" in refused.json()["detail"]
    unknown = admin_client_api.post("/api/v1/hosts/a100-9/drain/", {}, format="json")
    assert unknown.status_code == 404 and "a100-9" in unknown.json()["detail"]
    assert admin_client_api.get("/api/v1/hosts/a100-9/").json()["detail"] == "No host 'a100-9'."


SPEC_TWICE = (
    "budget: nlp/olmo\ncluster: default\ngpu_model: A100\ngpu_count: 1\nmin_runtime: 0\ncommand: [x]\ngpu_count: 4\n"
)


def test_a_spec_giving_a_field_twice_is_refused_on_the_page(researcher, cluster, client):
    """A pasted YAML spec with ``gpu_count`` twice (an edit that added a line instead of changing
    one) was submitted with the last value, silently, as YAML does; the page refuses it naming the
    line (never quoting the input)."""
    from scheduler.models import Workload

    client.force_login(researcher)
    page = client.post("/submit/", {"spec": SPEC_TWICE})
    assert page.status_code == 400
    assert "given twice (line 7)" in page.content.decode()
    assert not Workload.objects.exists()


def test_a_spec_file_giving_a_field_twice_is_a_usage_error(researcher, monkeypatch, tmp_path):
    """``fairway submit -f job.yaml`` likewise took the last of two ``gpu_count`` lines."""
    from tests.cli.inprocess import run_cli

    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC_TWICE)
    err = run_cli(monkeypatch, researcher, "submit", "-f", str(spec), expect=2)
    assert "line 7: 'gpu_count' is given twice (also on line 4)" in err
