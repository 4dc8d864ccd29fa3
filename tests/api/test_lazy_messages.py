"""``config.middleware.LazyMessageMiddleware`` against Django's ``MessageMiddleware`` (the oracle):
random requests that add, read, or leave the messages alone, each chain with its own cookies."""

from __future__ import annotations

import random
from typing import Any

from django.contrib import messages
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpResponse
from django.test import RequestFactory

from config.middleware import LazyMessageMiddleware


def test_lazy_messages_answer_as_django_s_message_middleware(db, monkeypatch):
    from django.core import signing

    # the message cookie is signed with the second it was made in: both chains' cookies in one
    # second, whatever the load (a second boundary between the two made them differ)
    monkeypatch.setattr(signing.TimestampSigner, "timestamp", lambda self: signing.b62_encode(1_700_000_000))
    rng = random.Random(30)
    plan: list[Any] = []

    def view(request: Any) -> HttpResponse:
        action, texts = plan[-1]
        seen = []
        if action in ("read", "add_read"):
            seen = [str(m) for m in messages.get_messages(request)]
        if action in ("add", "add_read"):
            for text in texts:
                messages.info(request, text)
        return HttpResponse(repr(seen))

    chains = [SessionMiddleware(MessageMiddleware(view)), SessionMiddleware(LazyMessageMiddleware(view))]
    jars: list[dict[str, str]] = [{}, {}]
    rf = RequestFactory()
    used = set()
    for _ in range(200):
        plan.append(
            (rng.choice(["none", "none", "add", "read", "add_read"]), [f"m{rng.randrange(99)}"] * rng.randint(1, 3))
        )
        path = rng.choice(["/api/v1/me/", "/clusters/", "/"])
        answers = []
        for chain, jar in zip(chains, jars, strict=True):
            request = rf.get(path)
            request.COOKIES.update(jar)
            response = chain(request)
            for name, morsel in response.cookies.items():
                if morsel["max-age"] == 0 or morsel.value == "":
                    jar.pop(name, None)
                else:
                    jar[name] = morsel.value
            answers.append((response.content, {n: (m.value, m["max-age"]) for n, m in response.cookies.items()}))
        assert answers[0] == answers[1], plan[-1]
        used.add(plan[-1][0])
    assert used == {"none", "add", "read", "add_read"}


def test_an_api_request_builds_no_message_storage(researcher_client, monkeypatch):
    import config.middleware

    built: list[Any] = []
    real = config.middleware.default_storage
    monkeypatch.setattr(config.middleware, "default_storage", lambda request: built.append(1) or real(request))
    assert researcher_client.get("/api/v1/me/").status_code == 200
    assert built == []
