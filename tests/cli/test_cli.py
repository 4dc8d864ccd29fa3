"""The ``fairway`` CLI against a live server (pytest-django's live server in this process)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fairway_cli.cli import EXIT_API, EXIT_AUTH, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE, main
from scheduler.models import Host, Workload
from scheduler.policy.admission import infeasible_request
from scheduler.services import do_submit_workload
from tests.conftest import PASSWORD

REPO = Path(__file__).resolve().parents[2]


def cli_against(live_server, tmp_path, monkeypatch):
    """``cli(*argv)`` → (exit code, stdout, stderr), with its own config file: the one body of the
    ``cli`` fixture, for a fixture that needs more around it (tests/resources/test_resources_surfaces.py)."""
    monkeypatch.setenv("FAIRWAY_CONFIG", str(tmp_path / "config.json"))
    monkeypatch.setenv("FAIRWAY_URL", live_server.url)
    monkeypatch.delenv("FAIRWAY_TOKEN", raising=False)

    def run(*argv: str, stdin: str = "") -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(list(argv), out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    return run


@pytest.fixture
def cli(live_server, tmp_path, monkeypatch):
    """``cli(*argv)`` → (exit code, stdout, stderr), with its own config file."""
    return cli_against(live_server, tmp_path, monkeypatch)


@pytest.fixture
def logged_in(cli, researcher, cluster):
    code, out, _err = cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")
    assert code == EXIT_OK, out
    return cli


def test_login_saves_a_token_readable_only_by_its_owner(cli, researcher, cluster, tmp_path):
    code, out, err = cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")

    assert code == EXIT_OK, err
    assert "logged in" in out and "you may submit to: nlp/olmo" in out
    config = tmp_path / "config.json"
    assert json.loads(config.read_text())["token"]
    assert config.stat().st_mode & 0o077 == 0


def test_wrong_password_exits_1_and_saves_nothing(cli, researcher, tmp_path):
    code, _out, err = cli("login", "-u", "researcher", "--password-stdin", stdin="nope\n")
    assert code == EXIT_API
    assert "invalid_credentials" in err
    assert not (tmp_path / "config.json").exists()


def test_not_logged_in_exits_4(cli, db):
    code, _out, err = cli("ls")
    assert code == EXIT_AUTH
    assert "fairway login" in err


def test_unreachable_server_exits_3(cli, monkeypatch):
    monkeypatch.setenv("FAIRWAY_TOKEN", "x")
    code, _out, err = cli("--server", "http://127.0.0.1:9", "ls")
    assert code == EXIT_UNREACHABLE
    assert "cannot reach" in err
    # tryout26: it said only "cannot reach http://127.0.0.1:8000: ConnectionError" to a user whose
    # demo served on another port: the message says how to name the server
    assert "--server URL" in err and "$FAIRWAY_URL" in err and "fairway login --server URL" in err


@pytest.mark.parametrize("server_first", [True, False])
def test_login_takes_the_server_before_or_after_the_command(
    cli, researcher, cluster, live_server, tmp_path, monkeypatch, server_first
):
    """tryout: ``fairway login --server URL`` was refused ("unrecognized arguments") though
    ``--server`` is an option of every command; it is accepted on either side now."""
    monkeypatch.delenv("FAIRWAY_URL")
    where = ["--server", live_server.url]
    argv = [*where, "login"] if server_first else ["login", *where]
    code, out, err = cli(*argv, "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")
    assert code == EXIT_OK, err
    assert f"logged in to {live_server.url} as researcher" in out
    assert json.loads((tmp_path / "config.json").read_text())["server"] == live_server.url
    code, out, err = cli("whoami")
    assert code == EXIT_OK and f"researcher on {live_server.url}" in out, err


def test_a_server_that_is_not_a_url_is_a_usage_error(cli, monkeypatch):
    monkeypatch.setenv("FAIRWAY_TOKEN", "x")
    for argv in (("login", "--server", "fairway.example.org", "--token", "t"), ("--server", "nope", "ls")):
        code, _out, err = cli(*argv)
        assert code == EXIT_USAGE, argv
        assert "--server" in err and "http://" in err and "https://" in err
    code, _out, err = cli("ls", "--server", "http://127.0.0.1:9")  # after any command, too
    assert code == EXIT_UNREACHABLE and "cannot reach http://127.0.0.1:9" in err


def test_submit_with_flags_then_ls_show_cancel(logged_in, researcher):
    code, out, err = logged_in(
        "submit", "-b", "nlp/olmo", "-c", "default", "-g", "4", "-m", "A100", "-M", "2h",
        "-e", "WANDB_PROJECT=olmo", "-s", "HF_TOKEN=hf_secret", "--", "python", "train.py", "--steps", "10",
    )  # fmt: skip
    assert code == EXIT_OK, err
    workload = Workload.objects.get()
    assert f"submitted #{workload.pk} python: 4 × A100 on default, budget nlp/olmo, minimum runtime 2h" in out
    assert workload.command == ["python", "train.py", "--steps", "10"]
    assert workload.env["HF_TOKEN"] == {"value": "hf_secret", "secret": True}

    code, out, _ = logged_in("ls")
    assert code == EXIT_OK
    header, row = out.splitlines()[:2]
    assert header.split()[:4] == ["ID", "NAME", "USER", "BUDGET"]
    assert row.split()[:4] == [str(workload.pk), "python", "researcher", "nlp/olmo"]
    assert "pending" in row

    code, out, _ = logged_in("show", str(workload.pk))
    assert code == EXIT_OK
    assert "why pending:" in out and "estimated start:" in out
    assert "HF_TOKEN=********" in out and "hf_secret" not in out
    # never started: no elapsed time, written as `ls` and the web list write it (was "0": brk31)
    assert [line.split()[-1] for line in out.splitlines() if line.strip().startswith("elapsed")] == ["-"]

    code, out, _ = logged_in("--json", "show", str(workload.pk))
    assert json.loads(out)["id"] == workload.pk

    code, out, _ = logged_in("cancel", str(workload.pk))
    assert (code, out.strip()) == (EXIT_OK, f"#{workload.pk} python canceled")
    code, _out, err = logged_in("cancel", str(workload.pk))
    assert code == EXIT_API and "already_final" in err


def test_submit_from_a_yaml_spec_with_flag_overrides(logged_in, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text("name: sweep\nbudget: nlp/olmo\ngpu_model: A100\ngpu_count: 2\ncommand: [python, s.py]\n"
                    "min_runtime: 1h\n")  # fmt: skip
    code, out, err = logged_in("--json", "submit", "-f", str(spec), "-M", "0")
    assert code == EXIT_OK, err
    body = json.loads(out)
    assert (body["name"], body["gpu_count"], body["min_runtime_s"], body["allocated"]) == ("sweep", 2, 0, False)


def test_refused_submission_prints_the_fields_and_exits_1(logged_in):
    code, _out, err = logged_in("submit", "-b", "vision/sam", "-M", "30h", "-g", "3", "--", "python")
    assert code == EXIT_API
    assert "budget: You are not a member" in err
    assert "min_runtime: The minimum runtime is at most" in err
    assert not Workload.objects.exists()


def test_refused_size_prints_the_policy_rules_message(logged_in):
    # DESIGN.md §3.3, stated once in scheduler/policy/admission.py; the CLI shows its sentence.
    _code, message = infeasible_request([("A100", 8), ("A100", 8), ("H100", 4)], "A100", 24, cluster="default")
    code, _out, err = logged_in("submit", "-b", "nlp/olmo", "-c", "default", "-m", "A100", "-g", "24", "-M", "1h",
                                "--", "python")  # fmt: skip
    assert code == EXIT_API
    assert f"gpu_count: {message}" in err
    assert not Workload.objects.exists()


def test_usage_errors_exit_2(logged_in):
    assert logged_in("submit", "-b", "nlp/olmo")[0] == EXIT_USAGE
    assert logged_in("show", "abc")[0] == EXIT_USAGE
    assert logged_in("frobnicate")[0] == EXIT_USAGE
    # tryout24: "ls --limit 0" and "--limit -3" listed every workload, exit 0.
    for command in ("ls", "history"):
        for bad in ("0", "-3"):
            assert logged_in(command, "--limit", bad)[0] == EXIT_USAGE, (command, bad)


def test_budgets_and_hosts_tables(logged_in):
    code, out, _ = logged_in("budgets")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0] == "default: 20 GPUs × 7d = 3,360 GPU-h per window"  # as the budgets page (words63)
    assert lines[1].split()[:3] == ["BUDGET", "SHARES", "SHARE"]
    assert any(line.strip().startswith("olmo") for line in lines)

    code, out, _ = logged_in("hosts")
    assert code == EXIT_OK
    assert [line.split()[0] for line in out.splitlines()] == ["NAME", "a100-1", "a100-2", "h100-1"]

    code, _out, err = logged_in("hosts", "drain", "a100-1")
    assert code == EXIT_API and "forbidden" in err
    assert Host.objects.get(name="a100-1").state == "active"


def test_admin_drains_a_host_from_the_cli(cli, admin, cluster):
    assert cli("login", "-u", "admin", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK
    code, out, _ = cli("hosts", "cordon", "h100-1", "--reason", "fan noise")
    assert (code, out.strip()) == (EXIT_OK, "h100-1: cordoned")


def test_logs_of_a_workload_without_attempt_exit_1(logged_in, researcher, submit_kwargs):
    workload = do_submit_workload(researcher, **submit_kwargs())
    code, _out, err = logged_in("logs", str(workload.pk))
    assert code == EXIT_API and "no_attempt" in err
    # tryout22: it said "This workload has no such attempt." of a workload still pending.
    assert "has no attempt yet" in err


def test_personal_token_login_and_logout(cli, researcher, cluster, api_client_for):
    token = api_client_for(researcher).post("/api/v1/tokens/", {"name": "cli"}, format="json").json()["token"]
    code, out, _ = cli("login", "--token", token)
    assert code == EXIT_OK and "as researcher" in out
    assert cli("whoami")[1].startswith("researcher on ")
    assert cli("logout")[0] == EXIT_OK
    assert cli("whoami")[0] == EXIT_AUTH


def test_a_refused_token_says_so_and_saves_nothing(cli, researcher, cluster):
    """tryout: `fairway login --token bogus` answered "not logged in, or the token was revoked: run
    `fairway login`", the command just run."""
    code, _out, err = cli("login", "--token", "bogus")
    assert code == EXIT_AUTH
    assert "refused this token (unknown, expired or revoked); nothing saved" in err
    assert "run `fairway login`" not in err
    assert cli("whoami")[0] == EXIT_AUTH


def test_console_entry_point_runs_as_a_program(tmp_path):
    env = {**os.environ, "FAIRWAY_CONFIG": str(tmp_path / "c.json"), "PYTHONPATH": str(REPO)}
    env.pop("FAIRWAY_TOKEN", None)
    done = subprocess.run(  # noqa: S603 -- our own module
        [sys.executable, "-m", "fairway_cli", "ls"], env=env, capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == EXIT_AUTH
    assert "not logged in" in done.stderr
    helped = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "fairway_cli", "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert helped.returncode == 0
    for command in ("login", "submit", "ls", "show", "cancel", "logs", "budgets", "hosts"):
        assert command in helped.stdout


def test_ls_into_head_exits_quietly_when_the_pipe_closes(logged_in, researcher, submit_kwargs, tmp_path):
    """``fairway ls | head -1``: more rows than a pipe holds, the reader leaves after one line."""
    for i in range(700):
        do_submit_workload(researcher, **submit_kwargs(name=f"sweep-{i:04d}-" + "x" * 28))
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the logged_in fixture's config and server
    env.pop("FAIRWAY_TOKEN", None)
    done = subprocess.run(  # noqa: S603 -- our own module and head
        ["bash", "-c", 'set -o pipefail; "$0" -m fairway_cli ls --limit 700 | head -1', sys.executable],  # noqa: S607
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.split()[:2] == ["ID", "NAME"]
    assert done.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored"
    assert done.returncode == 141  # 128 + SIGPIPE, like a Unix tool that the closed pipe stopped


def test_show_writes_an_attempts_gpus_once_per_host(logged_in, researcher, cluster, submit_kwargs):
    """tryout22: ``fairway show`` of a 16-GPU attempt printed ``a100-1:0,a100-1:1,…,a100-2:7`` in
    its GPUS column (the table 220 characters wide); each host is named once, as the events write it."""
    from scheduler.tick import run_tick

    workload = do_submit_workload(researcher, **submit_kwargs(gpu_count=16))
    run_tick(cluster.pk)
    code, out, err = logged_in("show", str(workload.pk))
    assert code == EXIT_OK, err
    attempts = out.split("attempts:")[1].split("events:")[0]
    assert "a100-1:0,1,2,3,4,5,6,7, a100-2:0,1,2,3,4,5,6,7" in attempts
    assert "a100-1:1" not in attempts


def test_the_cli_and_the_web_say_a_pending_reason_in_the_same_words():
    """tryout22: ``fairway ls`` said "protection ends first" where the web's lists say "waiting for
    protection to end" for the same workload (five of nine reasons differed)."""
    from fairway_cli import cli, words
    from scheduler import reports
    from web.templatetags.fairway import reason_words

    # the lists, the CLI and the metrics page's "why work waits" (brk47: through reports) read one function
    assert cli.reason_words is reason_words is words.reason_words is reports.reason_words


def test_budgets_shows_each_budget_s_cap(logged_in, org_tree):
    """tryout: ``fairway budgets`` showed no cap (the budgets tree sent none): a budget capped at
    100 GPU-h per 30 days read like one without a cap. The API's tree, the table and the page
    give the one wording (``scheduler.reports.cap_words``)."""
    from decimal import Decimal

    from budgets.models import Budget

    # Given olmo capped at 100 GPU-h per 30 days, going unfunded after, and sam on hold at 0
    Budget.objects.filter(pk=org_tree["nlp/olmo"].pk).update(cap_gpu_hours=Decimal("100"), cap_period_days=30)
    Budget.objects.filter(pk=org_tree["vision/sam"].pk).update(cap_gpu_hours=Decimal("0"), on_cap="hold")

    # When the researcher lists the budgets
    code, out, _ = logged_in("budgets")
    assert code == EXIT_OK
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}

    # Then each capped budget's line says its cap, and whether it is reached
    assert lines["BUDGET"].rstrip().endswith("CAP")
    assert lines["olmo"].rstrip().endswith("100 GPU-h / 30 d, then unfunded")
    assert lines["sam"].rstrip().endswith("0 GPU-h / 30 d, then held (reached)")
    assert lines["tulu"].rstrip().endswith("-")
    code, out, _ = logged_in("budgets", "--json")
    olmo = next(b for b in json.loads(out)[0]["budgets"] if b["name"] == "olmo")
    assert (olmo["cap_gpu_hours"], olmo["cap_period_days"], olmo["on_cap"], olmo["capped"]) == (
        100.0,
        30,
        "downgrade",
        False,
    )


def test_hosts_say_why_a_host_is_cordoned(cli, admin, hosts):
    """tryout: a cordon's reason showed only in the admin; ``fairway hosts`` prints it under the table."""
    from scheduler.services import do_set_host_state

    do_set_host_state(admin, hosts["a100-1"], "cordoned", "fan replacement")
    assert cli("login", "-u", "admin", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK

    code, out, _ = cli("hosts")

    assert code == EXIT_OK
    reasons = [line for line in out.splitlines() if line.startswith("a100-1: ")]
    assert len(reasons) == 1
    assert reasons[0].startswith("a100-1: cordoned by admin at ") and reasons[0].endswith(": fan replacement")


def test_budgets_table_says_what_its_running_and_pending_count(logged_in, researcher, submit_kwargs):
    """tryout26: the table's RUNNING counted GPUs and its PENDING workloads, headed alike: a budget
    running one 8-GPU workload read "RUNNING 8" as eight workloads. The page says "running GPUs"."""
    do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    code, out, _ = logged_in("budgets")
    assert code == EXIT_OK
    header = out.splitlines()[1]
    assert "RUNNING GPUS" in header and "PENDING WORKLOADS" in header
    olmo = next(line for line in out.splitlines() if line.strip().startswith("olmo"))
    assert olmo.split()[-3:-1] == ["0", "1"]  # no GPU running, one workload (of 4 GPUs) pending


def test_server_help_lists_the_sources_in_the_order_they_apply(cli, researcher, cluster, tmp_path):
    """tryout26: ``--help`` said "default: saved, $FAIRWAY_URL, ..." while $FAIRWAY_URL wins over the
    saved server: a user with a saved server and a stale $FAIRWAY_URL reached the wrong one."""
    from fairway_cli.cli import build_parser

    # Given a saved server that answers nowhere, and $FAIRWAY_URL naming the live one (fixture)
    (tmp_path / "config.json").write_text(json.dumps({"server": "http://127.0.0.1:9", "token": ""}))
    code, _out, err = cli("login", "-u", "researcher", "--password-stdin", stdin=PASSWORD + "\n")
    assert code == EXIT_OK, err  # $FAIRWAY_URL won
    text = " ".join(build_parser().format_help().split())
    assert "(default: $FAIRWAY_URL, else the one login saved, else http://127.0.0.1:8000)" in text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0"),
        (29, "29s"),
        (61, "1m1s"),
        (3600, "1h"),
        (7229, "2h0m29s"),
        (7260, "2h1m"),
        (86429, "1d"),
        (172860, "2d0h1m"),
    ],
)
def test_a_duration_names_every_unit_between_its_first_and_last(seconds, text):
    """tryout26: 7,229 s printed "2h29s", read as 2 h 29 min; a gap inside is written ``0m``."""
    from fairway_cli.cli import duration

    assert duration(seconds) == text


def test_hosts_reason_of_a_drained_host_does_not_say_draining(cli, admin, hosts):
    """tryout35: a drained host's line under the table read "node1: draining by lead at …: bios"
    beside its state ``drained``: the line named the event (``draining``). It now names the
    operator's action, true in either state: "drain asked by …"."""
    from scheduler.models import Host
    from scheduler.services import do_set_host_state

    do_set_host_state(admin, hosts["a100-1"], "draining", "bios update")
    Host.objects.filter(pk=hosts["a100-1"].pk).update(state=Host.State.DRAINED)  # the tick's, once empty
    assert cli("login", "-u", "admin", "--password-stdin", stdin=PASSWORD + "\n")[0] == EXIT_OK

    code, out, _ = cli("hosts")

    assert code == EXIT_OK
    [reason] = [line for line in out.splitlines() if line.startswith("a100-1: ")]
    assert reason.startswith("a100-1: drain asked by admin at ") and reason.endswith(": bios update"), reason
