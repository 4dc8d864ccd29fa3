"""``fairway submit`` job options (docs/jobs.md), ``ls --group``, ``cancel --group`` and
``fairway notifications`` against a live server."""

from __future__ import annotations

from fairway_cli.cli import EXIT_API, EXIT_OK
from fairway_cli.words import NO_WORKLOADS_MATCH
from scheduler.models import ArrayGroup, Mount, NotificationSettings, Workload
from tests.cli.test_cli import cli, logged_in  # noqa: F401 -- the live-server fixtures


def test_an_array_with_every_option_then_ls_show_and_cancel_the_group(logged_in, cluster):  # noqa: F811
    Mount.objects.create(cluster=cluster, name="datasets", host_path="/data", container_path="/datasets")
    code, out, err = logged_in("submit", "-b", "nlp/olmo", "-c", "default", "-m", "A100", "-M", "1h",
                               "-t", "2h", "--retries", "1", "-v", "datasets", "--array", "0-2%1",
                               "--", "python", "sweep.py")  # fmt: skip
    assert code == EXIT_OK, err
    group = ArrayGroup.objects.get()
    assert f"array group {group.pk}: fairway ls --group {group.pk}" in out
    first = group.members.order_by("array_index").first()
    # tryout: it printed "submitted #N python[0]" only; every member, their ids, the limit
    assert out.startswith(
        f"submitted 3 members #{first.pk}–#{first.pk + 2} (python[0]…python[2]), at most 1 at a time: each 1 ×"
    )
    assert (first.max_runtime_s, first.retries, first.mounts[0]["name"]) == (7200, 1, "datasets")

    code, out, err = logged_in("submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h",
                               "--after", f"{first.pk}:any", "--", "python", "eval.py")  # fmt: skip
    assert code == EXIT_OK, err
    after = Workload.objects.get(name="python")
    assert after.dependencies.get().after_id == first.pk

    code, out, _ = logged_in("ls", "--group", str(group.pk))
    assert code == EXIT_OK and len(out.strip().splitlines()) == 4  # header and three members

    code, out, _ = logged_in("show", str(first.pk))
    assert "wall-time limit: 2h" in out and "retries:         0 of 1 used" in out
    assert "datasets at /datasets (ro)" in out and f"group {group.pk}, index 0" in out
    code, out, _ = logged_in("show", str(after.pk))
    assert f"#{first.pk}:any (pending)" in out

    code, out, _ = logged_in("cancel", "--group", str(group.pk))
    assert (code, out.strip()) == (EXIT_OK, f"array group {group.pk}: 3 workloads canceled or stopping")


def test_array_submitted_words() -> None:
    """The line of ``fairway submit --array``: a range where the ids follow each other, else the ids."""
    from fairway_cli.cli import _array_submitted

    array = {"name": "sweep", "limit": None, "count": 3, "members": [5, 6, 7], "indices": [1, 3, 5]}
    assert _array_submitted(array) == "3 members #5–#7 (sweep[1]…sweep[5])"
    gaps = {**array, "limit": 2, "count": 7, "members": [5, 7, 9, 11, 13, 15, 17], "indices": list(range(7))}
    assert _array_submitted(gaps) == "7 members #5, #7, #9, #11, #13, … #17 (sweep[0]…sweep[6]), at most 2 at a time"
    one = {**array, "count": 1, "members": [5], "indices": [0]}
    assert _array_submitted(one) == "1 member #5 (sweep[0])"


def test_ls_of_a_group_that_does_not_exist_is_an_error(logged_in, cluster):  # noqa: F811
    """tryout: ``fairway ls --group 999`` printed an empty table and exited 0; a group that exists
    with no member shown (here: none running) stays an empty table."""
    code, out, err = logged_in("ls", "--group", "999")
    assert (code, out) == (EXIT_API, "") and "no group 999" in err.lower()  # the server's 400 since brk31
    code, _out, err = logged_in("submit", "-b", "nlp/olmo", "-m", "A100", "-M", "1h", "--array", "0-1",
                                "--", "python")  # fmt: skip
    assert code == EXIT_OK, err
    group = ArrayGroup.objects.get()
    code, out, err = logged_in("ls", "--group", str(group.pk), "--state", "running")
    # the header, and (try50b) that nothing matches
    assert code == EXIT_OK and err == "" and out.strip().splitlines()[1:] == [NO_WORKLOADS_MATCH]


def test_bad_job_options_print_their_field(logged_in):  # noqa: F811
    code, _out, err = logged_in("submit", "-b", "nlp/olmo", "-m", "A100", "-M", "2h", "-t", "1h",
                                "--array", "3-1", "-v", "nope", "--", "python")  # fmt: skip
    assert code == EXIT_API
    # in the durations typed (try40: "(3600 s) ... (7200 s)" for -t 1h -M 2h)
    assert "max_runtime: The wall-time limit (1h) must be at least the minimum runtime (2h)." in err
    assert "array: Bad array '3-1'" in err and "mounts: No mount 'nope'" in err


def test_notifications_are_shown_and_set(logged_in, researcher):  # noqa: F811
    code, out, err = logged_in("notifications", "--email", "started,failed")
    assert code == EXIT_OK, err
    assert "email:   started, failed" in out
    assert NotificationSettings.objects.get(user=researcher).email_kinds == ["started", "failed"]
    code, _out, err = logged_in("notifications", "--webhook", "http://10.0.0.1/hook", "--webhook-kinds", "failed")
    assert code == EXIT_API and "webhook_url: Webhook refused" in err


def test_submit_help_writes_the_array_cap_as_users_type_it():
    """tryout22: ``fairway submit --help`` showed ``--array 0-99[%%N]`` (a metavar is printed as
    is, only help strings are %-formatted)."""
    import argparse

    from fairway_cli.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices["submit"].format_help()
    assert "--array 0-99[%N]" in text
    assert "%%" not in text
