"""fin43: every host action (drain, drain now, resume, cordon, rotate or revoke the token, remove)
leaves one INFO line in the server log: who, which host, what (``scheduler.services``); left44:
written when the action's transaction commits, never for an action rolled back."""

from __future__ import annotations

import logging

import pytest
from django.db import transaction

from scheduler.models import Host
from scheduler.services import do_remove_host, do_revoke_host_token, do_rotate_host_token, do_set_host_state


def _lines(caplog):
    lines = [r.getMessage() for r in caplog.records if r.name == "scheduler.services" and r.levelno == logging.INFO]
    caplog.clear()
    return lines


def test_each_host_action_logs_one_line_on_commit(admin, hosts, caplog, django_capture_on_commit_callbacks):
    caplog.set_level(logging.INFO, logger="scheduler.services")
    host = hosts["a100-1"]
    where = f"host a100-1 (cluster {host.cluster.name})"
    steps = [
        (lambda: do_set_host_state(admin, host, "cordoned", "bios update"), f"admin cordoned {where}: bios update"),
        (lambda: do_set_host_state(admin, host, "draining"), f"admin drained {where}"),
        (lambda: do_set_host_state(admin, host, "draining", drain_now=True), f"admin drained now {where}"),
        (lambda: do_set_host_state(admin, host, "active"), f"admin resumed {where}"),
        (lambda: do_rotate_host_token(admin, host), f"admin rotated the token of {where}"),
        (lambda: do_revoke_host_token(None, host), f"the system revoked the token of {where}"),
        (lambda: do_set_host_state(admin, host, "draining"), f"admin drained {where}"),
        (lambda: do_remove_host(admin, host, "decommissioned"), f"admin removed {where}: decommissioned"),
    ]
    for action, line in steps:
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            action()
            assert _lines(caplog) == []  # not before the commit
        assert _lines(caplog) == [line]


ACTIONS = {
    "cordon": lambda admin, host: do_set_host_state(admin, host, "cordoned", "bios update"),
    "drain": lambda admin, host: do_set_host_state(admin, host, "draining"),
    "drain-now": lambda admin, host: do_set_host_state(admin, host, "draining", drain_now=True),
    "resume": lambda admin, host: do_set_host_state(admin, host, "active"),
    "rotate": lambda admin, host: do_rotate_host_token(admin, host),
    "revoke": lambda admin, host: do_revoke_host_token(admin, host),
    "remove": lambda admin, host: do_remove_host(admin, host, "decommissioned"),
}


@pytest.mark.parametrize("name", ACTIONS)
def test_a_host_action_rolled_back_logs_nothing(name, admin, hosts, caplog, django_capture_on_commit_callbacks):
    host = hosts["a100-1"]
    if name == "resume":
        do_set_host_state(admin, host, "cordoned")
    before = Host.objects.filter(pk=host.pk).values().get()
    caplog.set_level(logging.INFO, logger="scheduler.services")
    caplog.clear()

    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError), transaction.atomic():
        ACTIONS[name](admin, host)
        raise RuntimeError("the surrounding transaction fails")

    assert _lines(caplog) == []
    assert Host.objects.filter(pk=host.pk).values().get() == before
