"""seed_demo: the demo organisation, created once however often it runs."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from accounts.models import Membership, User
from accounts.services import is_member
from budgets.models import Budget
from budgets.services import budget_paths
from scheduler.models import GPU, Cluster, Host
from scheduler.services import authenticate_host_token

VCS = [
    "6214e9",
    "11cb48",
    "6c71a0",
    "b436b2",
    "ee9e8c",
    "103959",
    "0e4a51",
    "unknown",
    "7f04ca",
    "ed69ec",
    "2869ce",
    "e13805",
    "51b7ef",
]


def _seed(*args: str) -> str:
    out = StringIO()
    call_command("seed_demo", *args, stdout=out)
    return out.getvalue()


def _state() -> tuple:
    return (
        sorted(budget_paths().values()),
        sorted(Budget.objects.values_list("name", "shares")),
        list(Cluster.objects.values_list("name", flat=True)),
        sorted(User.objects.values_list("username", "is_superuser")),
        Membership.objects.count(),
        Host.objects.count(),
        GPU.objects.count(),
    )


def test_seed_demo_is_idempotent(db):
    output = _seed()
    first = _state()
    _seed()
    assert _state() == first
    assert "login admin / fairway-admin" in output
    assert "login researcher / fairway-demo" in output


def test_seed_demo_builds_the_philly_organisation(db):
    _seed()
    paths = set(budget_paths().values())
    assert {f"{p}/vc-{vc}" for p in ("large", "medium", "small") for vc in VCS} & paths == {
        f"large/vc-{vc}" for vc in VCS[:3]
    } | {f"medium/vc-{vc}" for vc in VCS[3:7]} | {f"small/vc-{vc}" for vc in VCS[7:]}
    assert len(paths) == 1 + 3 + 13
    assert set(Budget.objects.values_list("shares", flat=True)) == {1}
    researcher = User.objects.get(username="researcher")
    assert is_member(researcher, Budget.objects.get(name="vc-51b7ef"))
    assert User.objects.get(username="admin").is_superuser
    assert researcher.check_password("fairway-demo")


def test_seed_demo_registers_hosts_and_writes_working_tokens(db, tmp_path):
    out_file = tmp_path / "tokens.json"
    _seed("--hosts", "2", "--gpus", "8", "--tokens-out", str(out_file))
    tokens = json.loads(out_file.read_text())
    assert sorted(tokens) == ["philly-001", "philly-002"]
    assert all(authenticate_host_token(t).name == name for name, t in tokens.items())
    assert GPU.objects.filter(host__name="philly-001").count() == 8

    _seed("--hosts", "2", "--tokens-out", str(out_file))  # again: same hosts, fresh valid tokens
    again = json.loads(out_file.read_text())
    assert Host.objects.count() == 2
    assert all(authenticate_host_token(t).name == name for name, t in again.items())
    assert authenticate_host_token(tokens["philly-001"]) is None


def test_seed_demo_on_a_labs_own_organisation_is_one_clear_error_and_changes_nothing(db):
    """try44: an operator who had set up the lab in the admin (root ``lab``) and then ran
    ``manage.py seed_demo`` (docs/deploy.md, "First start": "or manage.py seed_demo on a test
    install") got a Python traceback ending in BudgetError's admin words ("choose a parent under
    it"). It is a CommandError (manage.py: one line, status 1) naming the lab's root and what
    seed_demo is for, and nothing is written."""
    from django.core.management.base import CommandError

    from budgets.services import do_create_budget

    lab = do_create_budget(name="lab", parent=None)
    do_create_budget(name="nlp", parent=lab)
    before = _state()
    with pytest.raises(CommandError) as refused:
        _seed()
    words = str(refused.value)
    assert "lab" in words and "org" in words
    assert "empty database" in words
    assert _state() == before


@pytest.mark.parametrize(
    ("flag", "most"),
    [("--hosts", "MAX_HOST_COUNT"), ("--gpus", "MAX_HOST_GPUS")],
)
def test_seed_demo_bounds_hosts_and_gpus_as_a_scenario_file_does(db, flag, most):
    """left47: ``--hosts``/``--gpus`` had no upper bound; the hosts' GPU lists were built until
    memory ran out. They are refused before anything is made, at the bounds of a scenario file's
    cluster and ``simulate --hosts/--gpus-per-host`` (``scheduler.scenarios.spec``)."""
    from django.core.management.base import CommandError

    from scheduler.scenarios import spec

    limit = getattr(spec, most)
    args = ["seed_demo", flag, str(limit + 1)] + (["--hosts", "1"] if flag == "--gpus" else [])
    with pytest.raises(CommandError) as refused:
        call_command(*args, stdout=StringIO())
    assert str(refused.value) == f"{flag}: at most {limit}, not {limit + 1}"
    assert not Cluster.objects.exists() and not Budget.objects.exists()
