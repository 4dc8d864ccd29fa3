"""break34: faults found by brk34 (hostile and careless inputs)."""

from __future__ import annotations

import pytest

from scheduler.models import Workload

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "image",
    [
        "ubuntu latest",
        "ghcr.io/lab/train:1 --privileged",
        " ghcr.io/lab/train:1",
        "ghcr.io/lab/train:1\n",
        "   ",
        "Ubuntu:22.04",
        "ghcr.io/Lab/train:1",
        "train:1:2",
        "train:",
        "-v /:/host",
        "../../etc/passwd",
        "train@sha256:zz",
        "tráin:1",
        "a" * 256,
    ],
)
def test_an_image_that_is_no_image_reference_is_refused_at_submission(researcher_client, submission, cluster, image):
    """An image no container engine can pull (blanks, capitals in the repository, a second tag, an
    option) was admitted: the workload waited its turn, took its GPUs and every start failed
    ("invalid reference format"), its retries too, and start failures of two owners' such workloads
    cordoned the host. It is refused at once, naming the form."""
    response = researcher_client.post("/api/v1/workloads/", submission(image=image), format="json")
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_image"
    assert "registry/repository:tag" in response.json()["image"][0]
    assert not Workload.objects.exists()


@pytest.mark.parametrize(
    "image",
    [
        "busybox",
        "pytorch:24.01",
        "ghcr.io/lab/train:1",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "localhost/no-such-image:1",
        "localhost:5000/lab/train_v2__x--y.z:Tag_1.0-rc",
        "registry.example.org:443/a/b/c",
        "[::1]:5000/train:1",
        f"ghcr.io/lab/train@{DIGEST}",
        f"ghcr.io/lab/train:1@{DIGEST}",
        "",
    ],
)
def test_image_references_engines_take_are_admitted(researcher_client, submission, cluster, image):
    response = researcher_client.post("/api/v1/workloads/", submission(image=image), format="json")
    assert response.status_code == 201, response.content
    assert Workload.objects.get().image == image


@pytest.mark.parametrize(
    ("key", "most"),
    [("gpus", 256), ("gpu_memory_mb", 2**31 - 1), ("cpus", 1 << 20), ("memory", 1 << 62)],
)
def test_an_agent_config_value_the_protocol_cannot_carry_is_refused_at_load(key, most):
    """``gpus: 300`` (fake backend), ``gpu_memory_mb: 85899345920`` (bytes for MiB), ``cpus`` or
    ``memory`` past what a hello carries: the agent started, and every hello it built was
    unencodable ("not sending invalid hello message"), so it reconnected for good and never joined."""
    from agent.config import ConfigError, load_config

    base = {"server": "ws://fairway:8000/ws/agent/", "token": "t0ken"}
    assert getattr(load_config({**base, key: most}, environ={}), key) == most
    with pytest.raises(ConfigError, match=f"bad value for {key}: {most + 1} .*at most {most}"):
        load_config({**base, key: most + 1}, environ={})


@pytest.mark.parametrize(
    "frame",
    [
        {
            "v": 1,
            "type": "attempt",
            "id": 5,
            "attempt_id": 1,
            "state": "x" * 200_000,
            "exit_code": None,
            "age_s": None,
            "message": "",
        },
        {"v": "x" * 200_000, "type": "heartbeat", "id": 5},
        {"v": 1, "type": "heartbeat", "id": 5, "gpus": [], "running": [], **{f"k{i:05}": 0 for i in range(20_000)}},
    ],
    ids=["state", "version", "unknown-keys"],
)
def test_a_bad_frames_error_is_short_whatever_the_frame_holds(frame, caplog):
    """A frame whose bad value (or list of unknown fields) is long: the refusal quoted all of it, so
    each such frame (up to 256 KiB) wrote as much into the server's log ("bad message from host")."""
    import json

    from agent import protocol

    text = json.dumps(frame)
    assert len(text.encode()) <= protocol.MAX_MESSAGE_BYTES
    with pytest.raises(protocol.ProtocolError) as err:
        protocol.decode(text, allowed=protocol.AGENT_MESSAGE_TYPES)
    assert len(str(err.value)) <= 600 and len(err.value.message) <= 600


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("https://hooks.example.org/services/T00 /B00", "blanks or control characters"),
        ("https://hooks.example.org/a\tb", "blanks or control characters"),
        ("https://hooks.example.org/a\nb", "blanks or control characters"),
        ("https://hooks.example.org\n/a", "blanks or control characters"),
        ("https://hooks.example.org/hoök", "percent-encode"),
        ("https://hooks.example.org/a?team=équipe", "percent-encode"),
        ("https://hooks.example.org:0/a", "port"),
    ],
)
def test_a_webhook_url_no_request_can_carry_is_refused_when_saved(researcher_client, settings, url, why):
    """A blank, tab or newline in a webhook URL, a non-ASCII character in its path or query, or
    port 0: the URL was saved, and every delivery failed (http.client: "URL can't contain control
    characters", a UnicodeEncodeError of the request line, a refused connection), retried, then
    marked failed without a word to the user. Refused when saved, saying what to change."""
    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": ["hooks.example.org"]}  # no resolving here
    response = researcher_client.put(
        "/api/v1/notifications/", {"webhook_kinds": ["failed"], "webhook_url": url}, format="json"
    )
    assert response.status_code == 400, response.content
    assert response.json()["code"] == "invalid_webhook"
    assert why in response.json()["webhook_url"][0]
    assert researcher_client.get("/api/v1/notifications/").json()["webhook_url"] == ""


def test_a_webhook_url_with_a_non_ascii_host_or_fragment_is_still_taken(researcher_client, settings):
    settings.FAIRWAY = {**settings.FAIRWAY, "WEBHOOK_ALLOW_HOSTS": ["bücher.example"]}
    url = "https://bücher.example/hook?a=%C3%A9#frägment"
    response = researcher_client.put(
        "/api/v1/notifications/", {"webhook_kinds": ["failed"], "webhook_url": url}, format="json"
    )
    assert response.status_code == 200, response.content


@pytest.mark.parametrize("name", ["nightly\nrun", "nightly\rrun", "nightly\u2028run"])
def test_an_email_about_a_workload_whose_name_holds_a_line_break_is_sent(
    researcher_client, researcher, submission, cluster, sent_notifications, mailoutbox, name
):
    """A workload named with a line break (a YAML block scalar, a pasted name) was admitted, and
    every email about it failed: its name goes in the subject, and a mail header holds no line
    break (Django's BadHeaderError), so each try raised until the notification was marked failed
    and the owner heard nothing. The subject writes the break as a blank."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduler import lifecycle, notifications
    from scheduler.models import Attempt, Notification, NotificationSettings
    from scheduler.tick import run_tick

    NotificationSettings.objects.create(user=researcher, email_kinds=["failed"])
    response = researcher_client.post("/api/v1/workloads/", submission(name="x", gpu_count=1), format="json")
    assert response.status_code == 201, response.content
    Workload.objects.update(name=name)  # stored before names refused line breaks (left36)
    w = Workload.objects.get()
    t0 = timezone.now()
    run_tick(w.cluster_id, now=t0)
    attempt = Attempt.objects.select_related("host").get(workload=w)
    lifecycle.attempt_started(attempt.host, attempt.pk, now=t0)
    lifecycle.attempt_exited(attempt.host, attempt.pk, 2, now=t0 + timedelta(seconds=5))
    (key,) = Notification.objects.values_list("key", flat=True)
    assert notifications.deliver(key)
    (mail,) = mailoutbox
    assert mail.subject == f"[fairway] nightly run (#{w.pk}) failed"
    assert name in mail.body  # the body keeps the name as given


@pytest.fixture
def sent_notifications(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from scheduler import tasks

    keys: list[str] = []
    monkeypatch.setattr(tasks.deliver_notification, "send", lambda key: keys.append(key))
    return keys
