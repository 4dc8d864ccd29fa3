"""tryout49: every surface said retries are "re-runs after a non-zero exit", and a workload stopped
at its wall-time limit (exit 143) read "retries 0 of 1 used — re-run after a non-zero exit" on its
page: the user asked why it was not re-run. A stop's end (timeout, preemption, drain, cancel) never
uses a retry (docs/jobs.md, "Retries"); one wording says so on the submit form, the workload page and
`fairway submit|update|resubmit --help` (``fairway_cli.words.RETRIES_WORDS``)."""

from __future__ import annotations

from fairway_cli import cli as fw
from fairway_cli.words import RETRIES_WORDS
from scheduler.services import do_submit_workload
from tests.browser import log_in
from web.forms import SubmitForm


def _help(command: str, flag: str) -> str:
    parser = fw.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command_name")
    actions = sub.choices[command]._actions  # type: ignore[attr-defined]
    return next(a.help or "" for a in actions if flag in a.option_strings)


def test_the_words_say_a_stop_never_uses_a_retry():
    for stop in ("timeout", "preemption", "drain", "cancel"):
        assert stop in RETRIES_WORDS


def test_cli_help_and_submit_form_say_the_one_wording():
    for command in ("submit", "update", "resubmit"):
        assert RETRIES_WORDS in _help(command, "--retries"), command
    assert RETRIES_WORDS in str(SubmitForm.base_fields["retries"].help_text).lower()


def test_the_workload_page_says_it(new_page, researcher, submit_kwargs):
    w = do_submit_workload(researcher, **submit_kwargs(retries=1))
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{w.pk}/")
    assert page.locator("#retries-fact").inner_text() == f"0 of 1 used {RETRIES_WORDS}"
