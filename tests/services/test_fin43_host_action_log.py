"""fin43: every host action (drain, drain now, resume, cordon, rotate or revoke the token, remove)
leaves one INFO line in the server log: who, which host, what (``scheduler.services``)."""

from __future__ import annotations

import logging

from scheduler.services import do_remove_host, do_revoke_host_token, do_rotate_host_token, do_set_host_state


def _lines(caplog):
    lines = [r.getMessage() for r in caplog.records if r.name == "scheduler.services" and r.levelno == logging.INFO]
    caplog.clear()
    return lines


def test_each_host_action_logs_one_line(admin, hosts, caplog):
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
        action()
        assert _lines(caplog) == [line]
