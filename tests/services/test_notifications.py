"""Notifications (docs/jobs.md): written with the events, sent after the commit by the actor,
once per event and channel, by email (locmem backend) and to a real local HTTP receiver."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from scheduler import lifecycle, notifications, tasks
from scheduler.models import Attempt, Notification, NotificationSettings
from scheduler.services import do_submit_workload
from scheduler.tick import run_tick


class _Receiver(BaseHTTPRequestHandler):
    posts: list[tuple[dict[str, Any], str]] = []
    fail_next = 0

    def do_POST(self) -> None:  # noqa: N802 -- http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).posts.append((body, self.headers.get("Idempotency-Key", "")))
        status = 500 if type(self).fail_next > 0 else 200
        type(self).fail_next -= 1
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver():
    _Receiver.posts = []
    _Receiver.fail_next = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys the actor was sent (after commit), instead of the broker."""
    keys: list[str] = []
    monkeypatch.setattr(tasks.deliver_notification, "send", lambda key: keys.append(key))
    return keys


def test_started_and_failed_are_sent_once_by_email_and_webhook(
    researcher, submit_kwargs, settings, receiver, sent, mailoutbox, django_capture_on_commit_callbacks
):
    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": ["127.0.0.1"]}
    NotificationSettings.objects.create(
        user=researcher, email_kinds=["started", "failed"], webhook_kinds=["failed"], webhook_url=receiver
    )
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    t0 = timezone.now()
    run_tick(w.cluster_id, now=t0)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.attempt_started(attempt.host, attempt.pk, now=t0)
        lifecycle.attempt_exited(attempt.host, attempt.pk, 2, now=t0 + timedelta(seconds=5))
    assert sorted(sent) == sorted(f"event-{e}-{c}" for e, c in Notification.objects.values_list("event_id", "channel"))
    assert len(sent) == 3  # started by email; failed by email and webhook

    _Receiver.fail_next = 1  # the receiver fails once: the actor raises and dramatiq retries
    webhook = next(k for k in sent if k.endswith("webhook"))
    with pytest.raises(RuntimeError, match="not delivered yet"):
        notifications.deliver(webhook)
    for key in sent + sent:  # every key delivered twice: each is sent once
        notifications.deliver(key)

    assert len(mailoutbox) == 2
    assert {m.to[0] for m in mailoutbox} == {"researcher@example.org"}
    assert any("started" in m.subject for m in mailoutbox) and any("failed" in m.subject for m in mailoutbox)
    ok_posts = _Receiver.posts[1:]
    assert len(ok_posts) == 1
    body, key = ok_posts[0]
    assert set(body) == {"text"} and "failed" in body["text"] and key == webhook
    n = Notification.objects.get(key=webhook)
    assert (n.state, n.tries) == ("sent", 2)


def test_nothing_is_written_for_kinds_the_user_did_not_choose(researcher, submit_kwargs, sent):
    NotificationSettings.objects.create(user=researcher, email_kinds=["succeeded"])
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    t0 = timezone.now()
    run_tick(w.cluster_id, now=t0)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=t0)
    assert not Notification.objects.exists()


@pytest.mark.parametrize(
    "url, problem",
    [
        ("ftp://example.org/x", "http:// or https://"),
        ("http://user:pw@example.org/x", "no user or password"),
        ("http://127.0.0.1:9/x", "private or local"),
        ("http://[::1]/x", "private or local"),
        ("http://10.1.2.3/x", "private or local"),
        ("http://169.254.169.254/latest/meta-data", "private or local"),
        ("not a url", "http:// or https://"),
    ],
)
def test_webhooks_to_local_networks_are_refused_unless_allowed(settings, url, problem):
    assert problem in (notifications.webhook_problem(url) or "")
    host = urlsplit(url).hostname
    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": [host]}
    if problem == "private or local":
        assert notifications.webhook_problem(url) is None


def test_a_refused_webhook_fails_for_good_without_retries(researcher, submit_kwargs, sent):
    NotificationSettings.objects.create(user=researcher, webhook_kinds=["started"], webhook_url="http://127.0.0.1:9/")
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    t0 = timezone.now()
    run_tick(w.cluster_id, now=t0)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=t0)
    key = Notification.objects.get().key
    assert notifications.deliver(key) is False
    n = Notification.objects.get()
    assert n.state == "failed" and "private or local" in n.last_error


def test_a_notification_whose_retry_was_lost_is_sent_again_by_the_clock(
    researcher, submit_kwargs, sent, mailoutbox, monkeypatch, django_capture_on_commit_callbacks
):
    """Given a notification whose first try failed and whose delayed retry message was lost (a
    Redis connection error drops the delayed messages a dramatiq consumer holds in memory), when
    it has been pending longer than the retries last, the clock's resend sends it again; a fresh
    one, or one already sent, is left alone."""
    from scheduler import clock

    NotificationSettings.objects.create(user=researcher, email_kinds=["started"])
    w = do_submit_workload(researcher, **submit_kwargs(gpu_count=1))
    t0 = timezone.now()
    run_tick(w.cluster_id, now=t0)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.attempt_started(attempt.host, attempt.pk, now=t0)
    (key,) = sent
    Notification.objects.filter(key=key).update(tries=1, last_error="smtp down")  # its retry: lost
    sent.clear()

    resend = []
    monkeypatch.setattr(tasks.resend_stale_notifications, "send", lambda: resend.append(1))
    for name in ("sweep_hosts", "start_timeouts", "prune_gpu_metrics", "rollup_pyramid"):
        monkeypatch.setattr(getattr(tasks, name), "send", lambda: None)
    c = clock.Clock(interval=1.0)
    c.beat(sweep=True)
    c.beat(sweep=True)
    assert resend == [1]  # once per RESEND_NOTIFICATIONS_EVERY_S

    tasks.resend_stale_notifications()
    assert sent == []  # fresh: its retry may still be on its way
    old = timezone.now() - timedelta(seconds=tasks.STALE_NOTIFICATION_S + 60)
    Notification.objects.filter(key=key).update(created_at=old)
    tasks.resend_stale_notifications()
    assert sent == [key]
    notifications.deliver(key)
    assert Notification.objects.get(key=key).state == "sent" and len(mailoutbox) == 1
    sent.clear()
    tasks.resend_stale_notifications()
    assert sent == []  # sent: never again
