"""fake46: "Submit again" of a workload whose name was its command's default (``python`` for
``python train.py``) pre-filled that name, so changing only the command kept the old program's
name, where ``fairway resubmit`` and the API follow the new command (words46:
``scheduler.resubmit.resubmission_data``, ``default_name``). The form now leaves such a name blank
(the form's "Defaults to the program's name" applies again) and keeps a name the person gave."""

from __future__ import annotations

from typing import Any

from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.browser import log_in
from tests.web.test_resubmit_page import _client, _form_of


def test_a_default_name_is_left_blank_and_a_given_one_kept(researcher: Any, submit_kwargs: Any) -> None:
    defaulted = do_submit_workload(researcher, **submit_kwargs(name="python"))  # python train.py's default
    named = do_submit_workload(researcher, **submit_kwargs())  # "pretrain", given
    client = _client(researcher)
    assert _form_of(client.get(f"/submit/?again={defaulted.pk}").content.decode()).get("name", "") == ""  # no value
    assert _form_of(client.get(f"/submit/?again={named.pk}").content.decode())["name"] == "pretrain"


def test_a_new_command_names_the_resubmission_in_a_browser(new_page: Any, researcher: Any, submit_kwargs: Any) -> None:
    old = do_submit_workload(researcher, **submit_kwargs(name="python"))
    page = new_page()
    log_in(page, "researcher")
    page.goto(f"/workloads/{old.pk}/")
    page.click("#resubmit-button")
    page.wait_for_selector("#again-note")
    assert page.input_value("#id_name") == ""
    assert page.input_value("#id_command") == "python train.py"
    page.fill("#id_command", "torchrun train.py")
    page.click("#submit-form button[type=submit]:not([name])")
    page.wait_for_selector("#resubmitted-from")
    new = Workload.objects.exclude(pk=old.pk).get()
    assert (new.name, new.command) == ("torchrun", ["torchrun", "train.py"])
