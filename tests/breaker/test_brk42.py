"""brk42: a breaker round on newer, less probed surfaces (host actions outside the admin, the
CLI's spec beside its flags)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import User
from accounts.services import create_api_token
from fairway_cli.cli import EXIT_OK, EXIT_USAGE
from scheduler.models import Host, HostEvent, Workload
from scheduler.services import HOST_OPERATOR_REFUSAL, do_submit_workload
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures

HOST_VERBS = ["cordon", "drain", "drain-now", "resume"]


def _staff(username: str, *codenames: str) -> User:
    """A staff member (the admin site) given view permissions and ``codenames`` besides."""
    user = User.objects.create_user(username=username, password="x", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__startswith="view_") | Permission.objects.filter(codename__in=codenames)
    )
    return user


def _api(user: User) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {create_api_token(user)[1]}")
    return client


def _web(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _ready(host: Host, verb: str) -> None:
    """``host`` in a state the action applies to (resume: a cordoned host)."""
    if verb == "resume":
        Host.objects.filter(pk=host.pk).update(state=Host.State.CORDONED)


def _unchanged(host: Host, before: Any) -> None:
    host.refresh_from_db()
    assert (host.state, host.drain_now, host.removed_at) == before
    assert not HostEvent.objects.filter(host=host, actor__username="auditor").exists()


@pytest.mark.parametrize("verb", [*HOST_VERBS, "remove"])
def test_a_view_only_staff_member_cannot_act_on_hosts_through_the_api(hosts, verb):
    """deploy.md: cordon, drain, resume and removal need ``change_host``; brk40 held the admin's
    actions to it, while ``POST /api/v1/hosts/NAME/drain-now/`` (``fairway hosts drain``) took any
    staff member: a view-only auditor stopped every protected attempt of a host, or removed it."""
    host = hosts["a100-1"]
    if verb == "remove":  # removal is refused on a busy host only: this one is idle
        Host.objects.filter(pk=host.pk).update(state=Host.State.DRAINED)
    _ready(host, verb)
    host.refresh_from_db()
    before = (host.state, host.drain_now, host.removed_at)
    response = _api(_staff("auditor")).post(f"/api/v1/hosts/{host.name}/{verb}/", {}, format="json")
    assert response.status_code == 403, response.content
    assert response.json()["code"] == "forbidden"
    assert response.json()["detail"] == HOST_OPERATOR_REFUSAL
    _unchanged(host, before)


@pytest.mark.parametrize("verb", HOST_VERBS)
def test_a_view_only_staff_member_cannot_act_on_hosts_on_the_clusters_page(hosts, verb):
    host = hosts["a100-1"]
    _ready(host, verb)
    host.refresh_from_db()
    before = (host.state, host.drain_now, host.removed_at)
    client = _web(_staff("auditor"))
    response = client.post(f"/hosts/{host.name}/{verb}/", {"reason": "x"}, follow=True)
    assert response.status_code == 200
    assert "only admins with the change_host permission cordon, drain or resume hosts" in response.content.decode()
    _unchanged(host, before)
    page = client.get(f"/clusters/{host.cluster.name}/").content.decode()
    assert "web-host-action" not in page and f"/hosts/{host.name}/" not in page  # no buttons offered


@pytest.mark.parametrize("verb", HOST_VERBS)
def test_a_staff_member_with_change_host_still_acts_on_both(hosts, verb):
    host = hosts["a100-1"]
    operator = _staff("operator", "change_host")
    _ready(host, verb)
    assert _api(operator).post(f"/api/v1/hosts/{host.name}/{verb}/", {}, format="json").status_code == 200
    other = hosts["a100-2"]
    _ready(other, verb)
    client = _web(operator)
    assert f"/hosts/{other.name}/" in client.get(f"/clusters/{other.cluster.name}/").content.decode()
    client.post(f"/hosts/{other.name}/{verb}/", {"reason": "x"})
    other.refresh_from_db()
    assert other.state == {"cordon": "cordoned", "drain": "draining", "drain-now": "draining", "resume": "active"}[verb]


# --- fairway submit -f SPEC with flags ---------------------------------------------------------


def _spec(tmp_path: Any, extra: str) -> str:
    spec = tmp_path / "job.yaml"
    spec.write_text("budget: nlp/olmo\ngpu_model: A100\ncommand: [python, s.py]\nmin_runtime: 1h\n" + extra)
    return str(spec)


@pytest.mark.parametrize("written", ["[{a}]", '"{a}"', "{a}", '"#{a}:ok"'])
def test_after_in_a_spec_and_after_flags_are_all_waited_for(
    logged_in,  # noqa: F811
    researcher,
    submit_kwargs,
    tmp_path,
    written,
):
    """``-v`` and ``--env`` add to the spec's mounts and env, but ``--after`` replaced the spec's
    ``after``: ``-f job.yaml --after 13`` silently dropped the spec's ``after: [12]``, so the job
    could start before 12 had produced what it reads."""
    first, second = (do_submit_workload(researcher, **submit_kwargs(name=n)) for n in ("first", "second"))
    spec = _spec(tmp_path, f"name: third\nafter: {written.format(a=first.pk)}\n")
    code, _out, err = logged_in("submit", "-f", spec, "--after", f"{second.pk}:any")
    assert code == EXIT_OK, err
    made = Workload.objects.get(name="third")
    assert sorted(made.dependencies.values_list("after_id", "condition")) == [(first.pk, "ok"), (second.pk, "any")]


def test_mounts_in_a_spec_written_as_one_name_are_not_split_into_letters_by_a_v_flag(
    logged_in,  # noqa: F811
    tmp_path,
):
    """``mounts: datasets`` (one string) beside ``-v home`` became ``["d", "a", "t", ...,
    "home"]``: the server then refused a mount ``'d'`` the person never wrote."""
    code, _out, err = logged_in("submit", "-f", _spec(tmp_path, "mounts: datasets\n"), "-v", "home")
    assert code == EXIT_USAGE, err
    assert "mounts" in err and "a list" in err and "'d'" not in err
    assert not Workload.objects.exists()


# --- budget names ------------------------------------------------------------------------------

SPOOFS = ["olmo\u200b", "\u202eomlo", "ol\u00admo", "olmo\x1b[8m", "ol\nmo", "ol\u2028mo"]


@pytest.mark.parametrize("name", SPOOFS)
def test_a_budget_name_with_an_invisible_character_is_refused_as_every_other_name(org_tree, name):
    """A budget's name is on every page and in every path (``nlp/olmo``), but it took a zero-width
    space, a bidirectional override or a control character that workload names, GPU models, labels,
    token names and a trace's VCs refuse (``gpu_text.invisible_problem``): ``olmo\\u200b`` beside
    ``olmo`` showed as a second ``nlp/olmo`` that ``-b nlp/olmo`` could never name (pasted from a
    chat or a wiki page, such characters come along unseen)."""
    from budgets.models import Budget
    from budgets.services import BudgetError, do_create_budget

    count = Budget.objects.count()
    with pytest.raises(BudgetError) as refused:
        do_create_budget(name=name, parent=org_tree["nlp"])
    assert refused.value.problems[0].code == "invalid_name"
    assert "U+" in refused.value.problems[0].message
    assert Budget.objects.count() == count


@pytest.mark.parametrize("name", SPOOFS[:3])
def test_the_admin_refuses_such_a_budget_name_too(org_tree, name):
    from django.core.exceptions import ValidationError

    from budgets.models import Budget

    with pytest.raises(ValidationError) as refused:
        Budget(name=name, parent=org_tree["nlp"]).full_clean()
    assert "U+" in str(refused.value.message_dict["name"])


def test_a_scenario_file_refuses_such_a_budget_name_on_both_backends(tmp_path):
    """brk30's rule: a scenario file the db backend cannot store is refused when read, not taken by
    the memory backend alone."""
    from scheduler.scenarios.spec import ScenarioError, load_scenario

    path = tmp_path / "s.yaml"
    path.write_text(
        'name: s\nhosts:\n  - {name: h1, gpus: 8}\nbudgets:\n  - {path: "A/ol\\u200bmo", shares: 1}\n'
        "steps:\n  - expect: {usage: {A: 0}}\n"
    )
    with pytest.raises(ScenarioError) as refused:
        load_scenario(path)
    assert "U+200B" in str(refused.value)


def test_plain_names_still_pass(org_tree):
    from budgets.services import do_create_budget

    for name in ("olmo-2", "Ünïcödé", "vc 1", "数据"):
        assert do_create_budget(name=name, parent=org_tree["vision"]).name == name


# --- the submissions histogram ------------------------------------------------------------------


def _submissions_counted() -> float:
    from scheduler import histograms

    raw = histograms._raw(histograms.SUBMISSION_DURATION)  # noqa: SLF001 -- the stored series
    return sum(v for k, v in raw.items() if k.endswith(f"{histograms.SEP}count"))


def test_a_quote_is_not_counted_as_a_submission(researcher_client, submission, cluster):
    """``fairway_submission_duration_seconds`` counts submissions (its ``_count`` is the rate a
    dashboard draws), but every quote (a ``dry_run`` of the submission, 30 a minute per user) was
    counted as one."""
    from scheduler import histograms

    histograms.reset()
    assert researcher_client.post("/api/v1/workloads/quote/", submission(), format="json").status_code == 200
    assert _submissions_counted() == 0
    assert researcher_client.post("/api/v1/workloads/", submission(), format="json").status_code == 201
    assert _submissions_counted() == 1


def test_the_submit_pages_checks_and_quotes_are_not_counted_as_submissions(researcher, cluster):
    """The page runs a refused form's submission in a transaction it rolls back, to list every
    problem at once (``web.views._all_problems``): counted as a submission though none was made."""
    from scheduler import histograms

    histograms.reset()
    client = _web(researcher)
    form = {"name": "x", "command": "python t.py", "cluster": "default", "gpu_model": "A100", "gpu_count": "1",
            "budget": "nlp/olmo", "min_runtime": "1h", "retries": "0"}  # fmt: skip
    assert client.post("/submit/", {**form, "cpus": "0"}).status_code == 400  # the form refuses cpus
    assert client.post("/submit/", {**form, "quote": "1"}).status_code == 200
    assert not Workload.objects.exists()
    assert _submissions_counted() == 0
    assert client.post("/submit/", form).status_code == 302
    assert _submissions_counted() == 1


# --- estimate_moved notifications ---------------------------------------------------------------


def test_an_estimate_flipping_back_and_forth_notifies_once_an_hour(hosts, researcher, submit_kwargs, monkeypatch):
    """Any researcher moves others' estimates by hours by submitting a large job their budget ranks
    first and cancelling it (free while pending), again and again: each estimate run (every 15 s
    or so) wrote an ``estimate_moved`` event and sent every owner who chose it an email or webhook
    per flip, hundreds an hour. Now at most one an hour per workload, and a move is judged from
    the start its owner was last told."""
    from datetime import UTC, datetime, timedelta

    import scheduler.sim.estimate as sim_estimate
    from scheduler.estimates import store_estimates
    from scheduler.models import Notification, NotificationSettings, Workload, WorkloadEvent

    researcher.email = "r@example.org"
    researcher.save(update_fields=["email"])
    NotificationSettings.objects.create(user=researcher, email_kinds=["estimate_moved"])
    w = do_submit_workload(researcher, **submit_kwargs())
    a = datetime(2026, 3, 3, 11, 0, tzinfo=UTC)
    b = a + timedelta(hours=3)
    Workload.objects.filter(pk=w.pk).update(estimated_start=a, estimate_told=a)  # given A by a run

    def run(start: datetime) -> None:  # an estimate run whose simulation finds ``start`` for w
        monkeypatch.setattr(
            sim_estimate,
            "forward_found",
            lambda *_a, **_k: sim_estimate.Found({str(w.pk): start.timestamp()}, 1e12, frozenset()),
        )
        store_estimates(w.cluster_id, datetime.now(UTC))

    for _ in range(3):  # the flood: A -> B, B -> A, ...
        run(b)
        run(a)
    events = WorkloadEvent.objects.filter(workload=w, kind="estimate_moved")
    assert events.count() == 1 and events.get().data == {"from": a.isoformat(), "to": b.isoformat()}
    assert Notification.objects.count() == 1

    # An hour on: a move judged from what the owner was told (B), not from the last run's value.
    events.update(at=events.get().at - timedelta(hours=2))
    run(b + timedelta(minutes=30))  # 30 min from B: nothing new to tell
    assert events.count() == 1
    run(a)  # back to A, 3 h from B: told, from B
    assert events.count() == 2
    assert events.order_by("-id").first().data == {"from": b.isoformat(), "to": a.isoformat()}
    assert Notification.objects.count() == 2


def test_each_workload_has_its_own_hour(researcher, submit_kwargs):
    from datetime import UTC, datetime, timedelta

    from scheduler.estimates import _notify_moved
    from scheduler.models import WorkloadEvent

    one, two = (do_submit_workload(researcher, **submit_kwargs(name=n)) for n in ("one", "two"))
    a = datetime(2026, 3, 3, 11, 0, tzinfo=UTC)
    _notify_moved([(one, a, a + timedelta(hours=2))])
    _notify_moved([(one, a + timedelta(hours=2), a), (two, a, a + timedelta(hours=2))])
    assert sorted(WorkloadEvent.objects.filter(kind="estimate_moved").values_list("workload__name", flat=True)) == [
        "one",
        "two",
    ]
