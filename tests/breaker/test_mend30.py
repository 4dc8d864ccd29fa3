"""Faults from brk30's report, fixed by mend30."""

from __future__ import annotations

import argparse

import pytest


def test_history_help_says_formula_like_cells_get_a_quote():
    """``fairway history --csv`` neutralises formula-like text cells (OWASP "CSV Injection"): the
    help says so, so that a user who sees ``'=x`` in a sheet knows why."""
    from fairway_cli.cli import build_parser, csv_cell

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = " ".join(sub.choices["history"].format_help().split())
    assert "leading '" in text
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert csv_cell(start + "x") == "'" + start + "x"
    assert csv_cell(-9) == -9
    assert csv_cell("a=b") == "a=b"


def _value_options(script: str) -> list[str]:
    """The options the script's ``case`` reads a value for (``--x) V="$2"``)."""
    import re

    return re.findall(r'^\s+(--[a-z-]+)\) [^\n]*"\$2"', script, flags=re.M)


def _all_options(script: str) -> list[str]:
    import re

    return sorted(set(re.findall(r"^\s+(--[a-z-]+)[)|=]", script, flags=re.M)))


@pytest.mark.parametrize(("path", "count"), [("/agent/install.sh", 11), ("/cli/install.sh", 4)])
def test_an_install_option_without_its_value_is_a_clear_error(path, count):
    """``bash install.sh --token`` (the token forgotten) died with bash's ``$2: unbound variable``."""
    from tests.ops.test_install_scripts import _bash_stdin, _served

    script = _served(path)
    options = _value_options(script.decode())
    assert len(options) == count, options
    for option in options:
        for argv in ([option], [option, "--help"]):
            done = _bash_stdin(script, *argv)
            assert done.returncode == 1, (argv, done.stdout, done.stderr)
            assert done.stderr == f"install.sh: {option} needs a value (see --help)\n", argv
            assert done.stdout == ""


@pytest.mark.parametrize("path", ["/agent/install.sh", "/cli/install.sh"])
def test_install_usage_lists_every_option_the_script_reads(path):
    from tests.ops.test_install_scripts import _bash_stdin, _served

    script = _served(path)
    usage = _bash_stdin(script, "--help").stdout
    for option in _all_options(script.decode()):
        assert option in usage, option


def test_agent_readme_lists_every_install_option():
    from pathlib import Path

    from django.conf import settings

    base = Path(settings.BASE_DIR)
    script = (base / "scheduler" / "agent_install.sh").read_text()
    readme = (base / "agent" / "README.md").read_text()
    for option in _all_options(script):
        if option != "--help":
            assert f"`{option}" in readme, option


@pytest.mark.parametrize(
    "container_path",
    [
        "/proc",
        "/dev",
        "/sys",
        "/etc/passwd",
        "/etc",
        "/run",
        "/var/run/docker.sock",
        "/usr/lib",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/lib32",
        "/libx32/x",
        "/boot",
    ],
)
def test_the_mount_catalog_refuses_a_system_container_path(cluster, container_path):
    """brk30: the admin stored ``/proc``, ``/dev``, ``/etc/passwd`` as a container path: mounted over the
    container's own system directories (its /proc, its passwd), every start broke or ran a host's copy."""
    from django.core.exceptions import ValidationError

    from scheduler.models import Mount

    m = Mount(cluster=cluster, name="m", host_path="/data", container_path=container_path, access="all")
    with pytest.raises(ValidationError) as exc:
        m.full_clean()
    assert exc.value.message_dict["container_path"] == [
        f"{container_path} is at or under a system directory of the container (/proc, /sys, /dev, /etc, /run, "
        "/var/run, /usr, /bin, /sbin, /lib*, /boot)"
    ]


@pytest.mark.parametrize("container_path", ["/data", "/devel", "/etcetera", "/library", "/var/data", "/home/x", "/opt"])
def test_the_mount_catalog_keeps_a_container_path_beside_the_system_ones(cluster, container_path):
    from scheduler.models import Mount

    Mount(cluster=cluster, name="m", host_path="/data", container_path=container_path, access="all").full_clean()


def test_a_system_container_path_written_around_clean_is_refused_at_submission(cluster, researcher):
    from scheduler import mounts
    from scheduler.models import Mount

    Mount.objects.create(cluster=cluster, name="m", host_path="/data", container_path="/proc", access="all")
    out, problems = mounts.resolve(researcher, cluster, None, ["m"])
    assert out == []
    assert problems == ["Mount 'm' is misconfigured (its paths); ask an admin."]


def test_an_admin_403_is_logged_as_one_line(db, client, caplog):
    """brk30: every PermissionDenied in the admin (a staff user without the model's permission) was
    logged by ``django.request`` at WARNING with a full traceback: a page of log per click. A client
    error is one line; a server error keeps its traceback."""
    import logging

    from accounts.models import User

    staff = User.objects.create_user("clerk", is_staff=True)
    client.force_login(staff)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = client.get("/admin/scheduler/mount/")
    assert response.status_code == 403
    [record] = [r for r in caplog.records if r.name == "django.request"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == "Forbidden (Permission denied): /admin/scheduler/mount/"
    assert record.exc_info is None
    assert "Traceback" not in caplog.text


def test_a_server_error_keeps_its_traceback():
    import logging

    from config.logfilters import client_errors_one_line

    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        err = logging.LogRecord("django.request", logging.ERROR, "x", 1, "Internal Server Error: /", (), sys.exc_info())
    err.status_code = 500
    assert client_errors_one_line(err) is True
    assert err.exc_info is not None


def test_the_workload_list_names_a_parameter_it_does_not_filter_by(
    client, researcher, outsider, submit_kwargs, org_tree, cluster
):
    """brk30: ``/workloads/?user=outsider`` (the filter box is labelled as the column, "user", its
    field is ``owner`` like the API's filter) listed every workload as if they were outsider's.
    The box is labelled ``owner``; an unknown parameter is named, with the filters, and lists none."""
    from scheduler.services import do_submit_workload

    client.force_login(researcher)
    browser = client
    do_submit_workload(researcher, **submit_kwargs(name="mine"))
    do_submit_workload(outsider, **submit_kwargs(name="theirs", budget=org_tree["vision/sam"]))
    response = browser.get("/workloads/?user=outsider")
    assert response.status_code == 400
    assert list(response.context["page"]) == []
    assert response.context["filter_errors"] == [
        "user: no such parameter (the parameters are: budget, cluster, group, id, idle, owner, page, resubmitted_from, "
        "state)"  # the API's words (words47)
    ]
    page = response.content.decode()
    assert "<label>owner<input" in page
    assert [w.name for w in browser.get("/workloads/?owner=outsider&page=1").context["page"]] == ["theirs"]


def test_fairway_hosts_says_a_joined_host_never_connected():
    from fairway_cli.cli import host_health

    assert host_health({"state": "offline", "last_heartbeat": None, "gpus": []}) == "never connected"
