"""The web tests' shared fixtures (left55: each module defined its own ``browser``, or imported
test_pages' with ``noqa: F401``/``F811``): a logged-in Django test client, and workloads running."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from scheduler import lifecycle
from scheduler.models import Attempt, Workload
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


@pytest.fixture
def browser(researcher: Any, cluster: Any) -> Client:
    """A test client logged in as ``researcher``, the ``default`` cluster registered."""
    client = Client()
    client.force_login(researcher)
    return client


@pytest.fixture
def admin_browser(admin: Any, cluster: Any) -> Client:
    """A test client logged in as ``admin``, the ``default`` cluster registered."""
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def start_running(researcher: Any, cluster: Any, submit_kwargs: Any) -> Callable[..., tuple[Workload, Attempt]]:
    """``start_running(**overrides)``: a workload of ``researcher``'s (``submit_kwargs(**overrides)``)
    placed by a tick and its attempt started by its agent; the workload and that attempt."""

    def start(**overrides: Any) -> tuple[Workload, Attempt]:
        w = do_submit_workload(researcher, **submit_kwargs(**overrides))
        run_tick(cluster.pk)
        attempt = Attempt.objects.select_related("host").get(workload=w)
        lifecycle.attempt_started(attempt.host, attempt.pk)
        return w, attempt

    return start
