"""left57: the tryout's leftovers — a temporary share ended early by an admin, a join token's
expiry in the one instant rule, the GPUs held idle per host, a requeued pending workload's
start and elapsed."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from accounts.models import User
from budgets.models import ShareBoost, ShareChange
from budgets.services import apply_due_boosts, do_end_boost, do_schedule_boost
from tests.conftest import PASSWORD
from tests.services.test_share_boosts import _client, _history, _shares

DAY = timedelta(days=1)


def _end_now(client, *boosts: ShareBoost):
    return client.post(
        reverse("admin:budgets_shareboost_changelist"),
        {"action": "end_now", "_selected_action": [b.pk for b in boosts]},
    )


def test_end_now_ends_an_active_boost_as_its_end_would_once(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    boost = do_schedule_boost(admin, olmo, 3, timezone.now() + 2 * DAY)
    apply_due_boosts()
    assert _shares(olmo) == 3
    assert _end_now(_client(admin), boost).status_code == 302
    boost.refresh_from_db()
    assert (boost.state, _shares(olmo)) == ("ended", 1)
    assert _history(olmo) == [(1, 3, "admin"), (3, 1, "admin")]
    last = ShareChange.objects.filter(budget=olmo).order_by("at", "id").last()
    assert last is not None and "ended early by admin" in last.note
    # at most once: again, and the clock at its planned end, change nothing
    assert do_end_boost(admin, boost) is False
    assert apply_due_boosts(timezone.now() + 3 * DAY) == 0
    assert _history(olmo) == [(1, 3, "admin"), (3, 1, "admin")]


def test_end_now_cancels_a_boost_not_yet_started(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    now = timezone.now()
    boost = do_schedule_boost(admin, olmo, 3, now + 2 * DAY, now + DAY)
    assert _end_now(_client(admin), boost).status_code == 302
    boost.refresh_from_db()
    assert boost.state == "ended" and boost.applied_at is None
    assert apply_due_boosts(now + DAY) == 0 and _shares(olmo) == 1
    assert not ShareChange.objects.filter(budget=olmo).exists()
    # its time is free again for another one
    do_schedule_boost(admin, olmo, 4, now + 2 * DAY, now + DAY)


def test_end_now_is_for_who_may_change_budgets(admin, org_tree):
    olmo = org_tree["nlp/olmo"]
    boost = do_schedule_boost(admin, olmo, 3, timezone.now() + 2 * DAY)
    apply_due_boosts()
    staff = User.objects.create_user(username="staffer", password=PASSWORD, is_staff=True)
    staff.user_permissions.add(*Permission.objects.filter(codename__in=["view_shareboost"]))
    client = _client(staff)
    listing = client.get(reverse("admin:budgets_shareboost_changelist")).content.decode()
    assert "end_now" not in listing
    _end_now(client, boost)
    boost.refresh_from_db()
    assert boost.state == "active" and _shares(olmo) == 3
    assert "end_now" in _client(admin).get(reverse("admin:budgets_shareboost_changelist")).content.decode()


# --- a join token's expiry, and the other instants written by hand --------------------------------


def test_a_join_tokens_expiry_is_written_as_every_instant(admin, cluster, capsys):
    from django.core.management import call_command

    from fairway_cli.numbers import instant_text
    from scheduler.models import JoinToken

    call_command("create_join_token", "--cluster", cluster.name, "--ttl", "15m")
    row = JoinToken.objects.get()
    err = capsys.readouterr().err
    assert f"valid until {instant_text(row.expires_at, absolute=True)}," in err
    client = _client(admin)
    response = client.post(
        reverse("admin:scheduler_cluster_changelist"),
        {"action": "create_join_token", "_selected_action": [cluster.pk]},
        follow=True,
    )
    row = JoinToken.objects.latest("pk")
    assert f"valid until {instant_text(row.expires_at, absolute=True)})" in response.content.decode()


def test_the_records_names_write_instants_as_every_instant(admin, org_tree):
    from fairway_cli.numbers import instant_text

    olmo = org_tree["nlp/olmo"]
    boost = do_schedule_boost(admin, olmo, 3, timezone.now() + 2 * DAY)
    assert str(boost).endswith(f"until {instant_text(boost.ends_at, absolute=True)}")
    apply_due_boosts()
    change = ShareChange.objects.get(budget=olmo)
    assert str(change).endswith(f"at {instant_text(change.at, absolute=True)}")
