"""left50: the edit form's hidden ``version`` (``do_update_workload``'s ``seen_version``) edited
into something that is no version, or garbled, answered 400 with no word: the field is hidden, so
its error was never shown. Now the page says what is wrong (``invalid_version``) and nothing changes."""

from __future__ import annotations

import pytest

from scheduler import services
from scheduler.models import Workload
from scheduler.services import do_submit_workload
from tests.conftest import PASSWORD


@pytest.mark.parametrize("version", ["abc", "-1", "1.5", "99999999999999999999999"])
def test_a_garbled_version_is_refused_with_words(client, researcher, submit_kwargs, monkeypatch, version):
    monkeypatch.setattr(services, "request_tick_on_commit", lambda cluster_id: None)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    client.login(username="researcher", password=PASSWORD)

    r = client.post(
        f"/workloads/{w.pk}/update/", {"gpu_count": "2", "min_runtime": "1h", "retries": "0", "version": version}
    )

    assert r.status_code == 400
    assert r.context["edit_form"].errors.as_data()["version"][0].code == "invalid_version"
    assert "reload the workload" in r.content.decode()
    row = Workload.objects.get(pk=w.pk)
    assert (row.gpu_count, row.spec_version) == (4, 0)


def test_a_version_edited_to_another_number_is_refused_as_changed_meanwhile(
    client, researcher, submit_kwargs, monkeypatch
):
    monkeypatch.setattr(services, "request_tick_on_commit", lambda cluster_id: None)
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=4))
    client.login(username="researcher", password=PASSWORD)

    r = client.post(
        f"/workloads/{w.pk}/update/", {"gpu_count": "2", "min_runtime": "1h", "retries": "0", "version": "7"}
    )

    assert r.status_code == 409 and "changed since this page was shown" in r.content.decode()
    assert Workload.objects.get(pk=w.pk).gpu_count == 4
