"""Rules stated once (STYLE.md: the policy is the one statement of a rule): every surface that
needs one of these rules calls its single definition, and gives the same answer."""

from __future__ import annotations

import json
import re
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from agent import protocol
from budgets.services import do_archive_budget, load_tree, normalized_shares
from scheduler import lifecycle, services
from scheduler.gpu_text import gpu_text_problem
from scheduler.models import GPU, Attempt, Workload
from scheduler.policy import PendingReason, schedule
from scheduler.policy.admission import gpu_shapes, infeasible_request
from scheduler.policy.core import pass_loads
from scheduler.policy.standing import nominations_of
from scheduler.policy.tree import BudgetTree
from scheduler.reports import budget_standings
from scheduler.scenarios.runner import MemoryBackend
from scheduler.scenarios.spec import (
    BudgetSpec,
    HostSpec,
    Scenario,
    ScenarioError,
    Settings,
    WorkloadSpec,
    load_scenario,
)
from scheduler.services import SubmissionError, do_submit_workload
from scheduler.sim import engine, simulate
from scheduler.snapshot import load_snapshot
from tests.policy import builders

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    p
    for top in ("accounts", "agent", "bench", "budgets", "config", "fairway_cli", "scheduler", "web")
    for p in (ROOT / top).rglob("*.py")
]


def _defining(pattern: str) -> list[str]:
    rx = re.compile(pattern, re.MULTILINE)
    return sorted(str(p.relative_to(ROOT)) for p in SOURCES if rx.search(p.read_text()))


# --- fatal XIDs (DESIGN.md §4): agent/protocol.py, which the server imports (agent/ never imports Django)


def test_fatal_xids_have_one_home_the_agent_protocol() -> None:
    assert _defining(r"^FATAL_XIDS\b.*=") == ["agent/protocol.py"]
    assert _defining(r"frozenset\(\{48, 63") == ["agent/protocol.py"]


def test_server_and_simulator_use_the_protocols_fatal_xids() -> None:
    assert lifecycle.FATAL_XIDS is protocol.FATAL_XIDS
    assert engine.FATAL_XIDS is protocol.FATAL_XIDS


# --- feasibility at submission (DESIGN.md §3.3): scheduler/policy/admission.py

# The conftest cluster "default": two 8-GPU A100 hosts and one 4-GPU H100 host.
DEFAULT_HOSTS = [("A100", 8), ("A100", 8), ("H100", 4)]
SIZES = [
    ("A100", 1),
    ("A100", 8),
    ("A100", 12),  # more than a host, not a multiple
    ("A100", 16),  # a gang of both hosts
    ("A100", 24),  # three whole hosts, two exist
    ("H100", 4),
    ("H100", 8),  # two whole hosts, one exists
    ("V100", 1),  # no such model
]


@pytest.mark.parametrize(("model", "gpus"), SIZES)
def test_submission_refuses_exactly_what_the_policy_rule_refuses_with_its_message(
    researcher, submit_kwargs, model: str, gpus: int
) -> None:
    expected = infeasible_request(DEFAULT_HOSTS, model, gpus, cluster="default")
    try:
        do_submit_workload(researcher, **submit_kwargs(gpu_model=model, gpu_count=gpus))
    except SubmissionError as exc:
        assert expected is not None, exc.problems
        assert [(p.code, p.message) for p in exc.problems] == [expected]
    else:
        assert expected is None


@pytest.fixture
def policy_says_no(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The policy's feasibility function replaced by one that refuses everything: every surface
    that shows this refusal asked the one definition."""
    calls: list[tuple[str, int]] = []

    def refuse(host_table, model: str, gpus: int, *, cluster: str | None = None, **_requests) -> tuple[str, str]:
        calls.append((model, gpus))
        return "too_many_gpus", f"the policy refuses {gpus} {model} GPUs on {cluster}"

    # the services judge a request on the policy's table of the kept hosts (infeasible_request's own)
    monkeypatch.setattr(services, "infeasible_in", refuse)
    return calls


def test_api_shows_the_policy_rules_message(researcher_client, submission, cluster, policy_says_no) -> None:
    response = researcher_client.post("/api/v1/workloads/", submission(gpu_count=2), format="json")

    assert response.status_code == 400
    assert response.json()["code"] == "too_many_gpus"
    assert response.json()["gpu_count"] == ["the policy refuses 2 A100 GPUs on default"]
    assert policy_says_no == [("A100", 2)]
    assert not Workload.objects.exists()


def test_web_form_shows_the_policy_rules_message(researcher, cluster, policy_says_no) -> None:
    browser = Client()
    browser.force_login(researcher)
    form = {
        "name": "pretrain",
        "image": "",
        "command": "python train.py",
        "env": "",
        "secret_env": "",
        "cluster": "default",
        "gpu_model": "A100",
        "gpu_count": "2",
        "budget": "nlp/olmo",
        "min_runtime": "2h",
    }
    response = browser.post("/submit/", form)

    assert response.status_code == 400
    assert response.context["form"].errors["gpu_count"] == ["the policy refuses 2 A100 GPUs on default"]
    assert not Workload.objects.exists()


def test_trace_simulator_admits_by_the_policy_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def rule(shapes, model: str, gpus: int, **kw):  # noqa: ANN003, ANN202 -- a spy
        calls.append((dict(shapes), model, gpus))
        return None if gpus == 3 else ("too_many_gpus", "no")

    monkeypatch.setattr(simulate, "infeasible_shape", rule)
    sim = SimpleNamespace(_shape=gpu_shapes(DEFAULT_HOSTS))

    assert simulate.TraceSim._fits(sim, 3, "A100") is True
    assert simulate.TraceSim._fits(sim, 1, "A100") is False
    assert calls[0] == ({"A100": (8, 2), "H100": (4, 1)}, "A100", 3)


@pytest.mark.parametrize(("model", "gpus"), SIZES)
def test_scenario_runner_rejects_by_the_policy_rule(model: str, gpus: int) -> None:
    backend = MemoryBackend()
    backend.setup(
        Scenario(
            file="inline",
            name="sizes",
            settings=Settings(),
            hosts=[HostSpec(name=f"h{i}", gpus=n, model=m) for i, (m, n) in enumerate(DEFAULT_HOSTS)],
            budgets=[BudgetSpec(path="A")],
            description="",
            usage=[],
            running=[],
            pending=[],
            steps=[],
        )
    )
    spec = WorkloadSpec(id="w", budget="A", gpus=gpus, min_runtime=3600, model=model)
    expected = infeasible_request(DEFAULT_HOSTS, model, gpus)
    assert backend.submit([spec]).get("w") == (expected[0] if expected else None)


# --- normalized shares (DESIGN.md §1, §3.7): scheduler/policy/tree.py BudgetTree.normalized_shares


@pytest.mark.parametrize("with_work", [False, True], ids=["archived-without-work", "archived-with-work"])
def test_budgets_api_tree_api_and_policy_give_one_share_for_an_archived_budget(
    manager, researcher_client, submit_kwargs, org_tree, cluster, with_work: bool
) -> None:
    if with_work:
        do_submit_workload(manager, **submit_kwargs(budget=org_tree["nlp/tulu"]))
    do_archive_budget(org_tree["nlp/tulu"])

    snap, _index = load_snapshot(cluster, timezone.now())
    policy = BudgetTree(snap.budgets)
    live = {b.key for b in snap.budgets if not b.archived or with_work}  # tulu's work keeps it counted
    expected = {path: policy.normalized_shares(live)[str(b.pk)] for path, b in org_tree.items()}
    listed = {row["path"]: row["normalized_share"] for row in researcher_client.get("/api/v1/budgets/").json()}
    (standing,) = researcher_client.get("/api/v1/budgets/tree/", {"cluster": "default"}).json()
    reported = {row["path"]: row["normalized_share"] for row in standing["budgets"]}

    assert expected["nlp/olmo"] == (Fraction(1, 3) if with_work else Fraction(2, 3))
    # Without work it has dropped out: 0, not a share computed as if it were live (left40)
    assert expected["nlp/tulu"] == (Fraction(1, 3) if with_work else Fraction(0))
    for path, share in expected.items():
        assert listed[path] == float(share), path
        assert reported[path] == pytest.approx(float(share), abs=1e-6), path
        assert normalized_shares()[org_tree[path].pk] == share, path


# --- committed usage C (DESIGN.md §3.2, §3.4): scheduler/policy/usage.py committed_usage


def test_reports_count_a_nominated_workloads_commitment_as_the_policy_does(
    researcher, submit_kwargs, org_tree, cluster, hosts
) -> None:
    nominated = do_submit_workload(researcher, **submit_kwargs(gpu_count=4, min_runtime_s=7200))
    GPU.objects.filter(host=hosts["a100-1"], index__lt=4).update(nominated_for=nominated)
    now = timezone.now()

    standing = budget_standings(cluster, load_tree(), now)
    snap, _index = load_snapshot(cluster, now)
    pending = {w.id: w for w in snap.pending}
    usage, load = pass_loads(snap, BudgetTree(snap.budgets), nominations_of(snap, pending), pending)

    reported = {b.path: b.committed_gpu_hours for b in standing.budgets}
    assert reported["nlp/olmo"] == reported["nlp"] == 4 * 7200 / 3600  # from the moment of nomination
    for path, budget in org_tree.items():
        key = str(budget.pk)
        assert reported[path] == round((load[key] - usage[key]) / 3600, 3), path


# The pass's `unschedulable` reason (scheduler/policy/core.py, not this branch's to change) must
# give the verdict of the submission rule on the same hardware: hardware no host set could ever
# serve is rejected at submission, and work left over when the cluster shrinks shows this reason.
@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.sampled_from(["A100", "H100"]), st.integers(1, 8)), max_size=5),
    requests=st.lists(st.tuples(st.sampled_from(["A100", "H100", "B200"]), st.integers(1, 40)), min_size=1, max_size=6),
)
def test_the_pass_calls_unschedulable_exactly_what_submission_refuses(sizes, requests) -> None:
    hosts = [builders.host(f"h{i}", n, model) for i, (model, n) in enumerate(sizes)]
    work = [builders.pending(f"w{i}", "a", n, seq=i, model=m) for i, (m, n) in enumerate(requests)]
    decisions = schedule(builders.snap(hosts, builders.tree("a"), pend=work))
    for w in work:
        reason = decisions.pending.get(w.id)
        unschedulable = reason is not None and reason.reason == PendingReason.UNSCHEDULABLE
        assert unschedulable == (infeasible_request(sizes, w.model, w.gpus) is not None), (w, sizes)


# --- the budget tree's structural refusals (DESIGN.md §3.7): budgets/rules.py


@pytest.mark.parametrize("code", ["not_a_leaf", "budget_archived", "parent_has_work"])
def test_budget_refusals_have_one_home_the_budget_rules(code: str) -> None:
    """left35: the memory scenario backend and the services each spelled these refusals out."""
    assert _defining(rf"[\"']{code}[\"']") == ["budgets/rules.py"]


# --- GPU model text (ops35): scheduler/gpu_text.py gpu_text_problem, the rule of a join

BAD_MODELS = ["A100\u200b", "A100\x07", " A100", "A100 ", "\ufeffA100"]


@pytest.mark.parametrize("model", BAD_MODELS)
def test_submission_refuses_a_model_the_join_rule_refuses_with_its_words(researcher, submit_kwargs, model) -> None:
    """left35: a submission checked only NUL and length, then stripped the blanks: "A100\\u200b" was
    answered as an unknown model without naming the character, " A100" was taken as A100."""
    problem = gpu_text_problem(model)
    assert problem is not None
    before = Workload.objects.count()
    with pytest.raises(SubmissionError) as refused:
        do_submit_workload(researcher, **submit_kwargs(gpu_model=model))
    assert (refused.value.code, refused.value.field) == ("unknown_model", "gpu_model")
    assert refused.value.message == f"gpu_model {problem}."
    assert Workload.objects.count() == before


@pytest.mark.parametrize("where", ["hosts", "pending"])
@pytest.mark.parametrize("model", BAD_MODELS)
def test_scenario_files_refuse_a_model_the_join_rule_refuses(tmp_path: Path, where: str, model: str) -> None:
    """left35: the memory backend ran a host or workload model the db backend's join refuses."""
    entry = {"hosts": f"{{name: h1, gpus: 2, model: {json.dumps(model)}}}", "pending": "{name: h1, gpus: 2}"}
    work = f", model: {json.dumps(model)}" if where == "pending" else ""
    path = tmp_path / "model.yaml"
    path.write_text(
        f"name: x\nhosts: [{entry[where]}]\nbudgets: [{{path: A}}]\n"
        f"pending: [{{id: P, budget: A, gpus: 1, min_runtime: 1h{work}}}]\nsteps: [{{tick: {{}}}}]\n"
    )
    with pytest.raises(ScenarioError) as refused:
        load_scenario(path)
    assert refused.value.key.endswith(".model")
    assert str(gpu_text_problem(model)) in str(refused.value)


# --- Host labels (left37): scheduler/gpu_text.py labels_problem, the rule of a join and the admin

BAD_LABELS = [{"rack\u200b": "r1"}, {"rack": "r1\x1b[2J"}, {"": "r1"}, {"  ": "r1"}, {"rack": "\u202er1"}]


@pytest.mark.parametrize("labels", BAD_LABELS)
def test_scenario_files_refuse_host_labels_the_join_rule_refuses_with_its_words(tmp_path: Path, labels) -> None:
    """left37: a scenario file's host labels were checked for length and NUL only: a zero-width
    space, an escape sequence or an empty key ran in the memory backend, where the join, a
    registration and the admin's edit refuse them (``services.check_labels``)."""
    from scheduler.gpu_text import labels_problem
    from scheduler.services import HostError, check_labels

    problem = labels_problem(labels)
    assert problem is not None
    with pytest.raises(HostError) as joined:
        check_labels(labels)
    assert joined.value.message == problem
    path = tmp_path / "labels.yaml"
    path.write_text(
        f"name: x\nhosts: [{{name: h1, gpus: 2, labels: {json.dumps(labels)}}}]\nbudgets: [{{path: A}}]\n"
        "pending: [{id: P, budget: A, gpus: 1, min_runtime: 1h}]\nsteps: [{tick: {}}]\n"
    )
    with pytest.raises(ScenarioError) as refused:
        load_scenario(path)
    assert (refused.value.key, refused.value.problem) == ("hosts[0].labels", problem)


def test_host_labels_have_one_rule() -> None:
    """The label rule is written once (scheduler/gpu_text.py); the services and the scenario files call it."""
    assert _defining(r"A label key is not empty") == ["scheduler/gpu_text.py"]


# --- a cancel over an issued stop (DESIGN.md §4): scheduler/stop_rules.py cancel_replaces


@pytest.mark.parametrize(
    ("stop_reason", "retries_left", "replaces"),
    [
        (None, False, True),  # no stop yet: the cancel is the stop
        ("", False, True),
        ("preempted", False, True),  # the workload would be requeued: the cancel ends it instead
        ("drained", False, True),
        ("gpu_fault", False, True),
        ("failed_to_start", False, True),
        ("failed", True, True),  # a gang part's failure with a retry left
        ("failed", False, False),  # stops that end the workload keep their reason
        ("timeout", False, False),
        ("timeout", True, False),
        ("canceled", False, False),
        ("succeeded", False, False),
    ],
)
def test_a_cancel_replaces_only_a_stop_after_which_the_workload_runs_again(
    stop_reason: str | None, retries_left: bool, replaces: bool
) -> None:
    from scheduler.stop_rules import cancel_replaces

    assert cancel_replaces(stop_reason, retries_left=retries_left) is replaces


def test_the_cancel_over_a_stop_rule_has_one_home_called_by_the_server_and_the_simulator() -> None:
    """left39: ``services._cancel_replaces`` decided it and ``Engine.cancel`` restated the timeout
    case in a line of its own (``a.stop_reason != "timeout"``)."""
    from scheduler import stop_rules

    assert _defining(r"def _?cancel_replaces\b") == ["scheduler/stop_rules.py"]
    assert _defining(r"^REQUEUE_REASONS = ") == ["scheduler/stop_rules.py"]
    assert lifecycle.REQUEUE_REASONS is stop_rules.REQUEUE_REASONS
    assert {str(r) for r in stop_rules.REQUEUE_REASONS} <= set(Attempt.EndReason.values)
    assert "cancel_replaces(" in (ROOT / "scheduler/services.py").read_text()
    engine_source = (ROOT / "scheduler/sim/engine.py").read_text()
    assert "cancel_replaces(" in engine_source
    assert '!= "timeout"' not in engine_source


# --- hand-written YAML (brk30, brk37, left39): fairway_common/strict_yaml.py, its one reader


def test_no_source_reads_yaml_past_the_strict_reader() -> None:
    """left39: ``agent join`` read the existing agent config with ``yaml.safe_load`` and the
    simulator's budget and shares files were composed with plain ``SafeLoader``."""
    assert _defining(r"(?<!\w)yaml\.(safe_load|load|full_load|unsafe_load|compose|compose_all|safe_load_all)\(") == []
    assert _defining(r"Loader=yaml\.") == []


# --- a decimal number read from text (brk35, brk47, left47): fairway_common/numbers.py ascii_float


def test_decimal_numbers_have_one_ascii_reader() -> None:
    """left47: the float settings, the CLI and the agent's config each wrote the ASCII check of
    ``float()`` themselves and the trace rules' ``fraction:`` did not (``fraction:٠.٥`` was 0.5)."""
    assert _defining(r'isascii\(\) or "_" in \w+\)?:?\s*(#.*)?\n\s*raise ValueError') == []
    assert _defining(r"def ascii_float\b") == []  # fairway_common/numbers.py's only
    assert "def ascii_float(" in (ROOT / "fairway_common/numbers.py").read_text()
    for reader in ("config/settings.py", "fairway_cli/args.py", "agent/config.py", "scheduler/trace.py"):
        assert "ascii_float(" in (ROOT / reader).read_text(), reader
