"""brk52: a pending workload's growth is refused once its budget is archived (left51:
``budget_archived``; docs/jobs.md "Changing a pending workload"), also when the archive commits
after the update read the budget tree and before it writes: the update judged the archive by the
tree it read, and the growth landed in the archived budget. A move to another budget share-locks
that budget and reads its archive again; a change that stays now does so too when it grows."""

from __future__ import annotations

from typing import Any

import pytest

from budgets.services import do_archive_budget
from scheduler import services
from scheduler.models import Workload
from scheduler.services import SubmissionError, do_submit_workload, do_update_workload


@pytest.fixture
def archived_meanwhile(monkeypatch: pytest.MonkeyPatch, org_tree: Any) -> None:
    """The workload's budget is archived right after the update checked the change."""
    checked_update = services._checked_update

    def then_archive(*args: Any, **kwargs: Any) -> Any:
        answer = checked_update(*args, **kwargs)
        do_archive_budget(org_tree["nlp/olmo"])
        return answer

    monkeypatch.setattr(services, "_checked_update", then_archive)


@pytest.mark.django_db(transaction=True)
def test_growth_is_refused_when_the_budget_is_archived_meanwhile(researcher, submit_kwargs, archived_meanwhile):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    with pytest.raises(SubmissionError) as refused:
        do_update_workload(researcher, w, {"gpu_count": 8})
    assert refused.value.code == "budget_archived"
    assert "GPUs 4 → 8" in refused.value.message
    assert Workload.objects.get(pk=w.pk).gpu_count == 4


@pytest.mark.django_db(transaction=True)
def test_shrinking_still_passes_when_the_budget_is_archived_meanwhile(researcher, submit_kwargs, archived_meanwhile):
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    do_update_workload(researcher, w, {"gpu_count": 2, "name": "smaller"})
    assert Workload.objects.values_list("gpu_count", "name").get(pk=w.pk) == (2, "smaller")
