"""left36: faults of the CLI found by the tryout and review; each test names what it was."""

from __future__ import annotations

import argparse

import pytest

from scheduler.models import Workload
from tests.cli.inprocess import run_cli


def test_submit_without_budget_uses_the_one_budget_the_user_may_submit_to(researcher, hosts, monkeypatch):
    """``fairway submit`` without ``-b`` said "missing: budget" to a researcher who may submit to
    nlp/olmo alone; it submits there."""
    out = run_cli(monkeypatch, researcher, "submit", "-m", "A100", "-M", "1h", "--", "python", "train.py")
    workload = Workload.objects.get()
    assert workload.budget.path == "nlp/olmo"
    assert f"submitted #{workload.pk} python: 1 × A100 on default, budget nlp/olmo" in out


def test_submit_without_budget_lists_the_budgets_when_there_are_several(admin, org_tree, hosts, monkeypatch):
    """An admin may submit to every leaf: without ``-b`` the error names them, nothing is submitted
    (the server's refusal since num42: one rule for the API, the page and the CLI)."""
    err = run_cli(monkeypatch, admin, "submit", "-m", "A100", "-M", "1h", "--", "python", expect=1)
    assert "Name a budget: you may submit to several: nlp/olmo, nlp/tulu, vision/sam." in err
    assert not Workload.objects.exists()


@pytest.mark.parametrize("digits", ["١", "１", "1_0", "²"])
@pytest.mark.parametrize("flag", ["--gpus", "--retries"])
def test_submit_refuses_a_count_not_in_ascii_digits(researcher, hosts, monkeypatch, capsys, flag, digits):
    """``--gpus ١`` submitted one GPU (``int()`` reads Arabic-Indic and fullwidth digits and
    ``1_0``), where the API's integers are ASCII digits (``scheduler.api.params.int_param``)."""
    args = ["submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", flag, digits, "--", "python"]
    err = run_cli(monkeypatch, researcher, *args, expect=2) + capsys.readouterr().err  # argparse's own
    assert f"{digits!r} is not a whole number (ASCII digits 0-9)" in err and flag in err
    assert not Workload.objects.exists()


@pytest.mark.parametrize("text", ["١", "1_0", "٣.5"])
def test_a_cli_number_is_ascii(text):
    from fairway_cli.args import positive_number, whole_number

    with pytest.raises(argparse.ArgumentTypeError):
        whole_number(0)(text)
    with pytest.raises(argparse.ArgumentTypeError):
        positive_number()(text)
    assert whole_number(0)("10") == 10 and positive_number()("2.5") == 2.5


@pytest.mark.parametrize("rate", ["١٢/min", "１２/min", "1٢/hour"])
def test_a_throttle_rate_in_other_digits_is_refused(monkeypatch, rate):
    """``FAIRWAY_THROTTLE_USER=١٢/min`` was taken (``\\d`` matches any decimal digit)."""
    from django.core.exceptions import ImproperlyConfigured

    from config.settings import env_rate

    monkeypatch.setenv("FAIRWAY_THROTTLE_USER", rate)
    with pytest.raises(ImproperlyConfigured, match="is not a rate like 30/min"):
        env_rate("FAIRWAY_THROTTLE_USER", "6000/min")


@pytest.mark.parametrize("raw", ["١", "1_0", "３0"])
def test_an_integer_setting_in_other_digits_is_refused(monkeypatch, raw):
    from django.core.exceptions import ImproperlyConfigured

    from config.settings import env_int

    monkeypatch.setenv("FAIRWAY_LEFT36_N", raw)
    with pytest.raises(ImproperlyConfigured, match="is not an integer"):
        env_int("FAIRWAY_LEFT36_N", 5)
    monkeypatch.setenv("FAIRWAY_LEFT36_N", " 30 ")
    assert env_int("FAIRWAY_LEFT36_N", 5) == 30
