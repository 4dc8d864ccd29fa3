"""brk48: ``/ws/port-forward/``'s first frame took any ``check`` but ``true`` and ``"again"`` as no
check at all: ``"check": "yes"``, ``1``, ``"true"`` or ``null`` (a client's slip for the check the
CLI sends before it listens) opened a connection to the port instead, in the workload as its
owner, while the frame asked for its checks only. It is refused, ``invalid_check`` (400, close
4400), naming the values it takes; nothing is opened. Failed before its fix."""

from __future__ import annotations

from typing import Any

import pytest

from accounts.services import create_api_token
from tests.api.test_exec_session import _run
from tests.test_ws63_services_down import _closed, running  # noqa: F401 -- fixture

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def test_a_check_that_is_not_true_false_or_again_is_refused_and_those_are_answered(running, researcher) -> None:  # noqa: F811
    w, attempt = running
    token = create_api_token(researcher)[1]
    for check in ("yes", 1, "true", None, "again ", [True]):
        first: dict[str, Any] = {"workload": w.pk, "port": 6006, "check": check}
        frame, closed = _run(_closed("/ws/port-forward/", token, first))
        assert (frame["code"], closed["code"]) == ("invalid_check", 4400), (check, frame, closed)
        assert '"again"' in frame["message"], frame
    for check in (True, "again"):
        frame, closed = _run(_closed("/ws/port-forward/", token, {"workload": w.pk, "port": 6006, "check": check}))
        assert frame == {"type": "checked", "attempt": attempt.number, "host": attempt.host.name}, frame
        assert closed["code"] == 1000, closed
