"""Notifications of workload events by email and webhook (docs/jobs.md "Notifications").

:func:`queue_for` runs inside the transaction that records the events: it writes one
:class:`~scheduler.models.Notification` per (event, channel) the owner chose, keyed by an
idempotency key, and after the commit sends the ``deliver_notification`` actor for each. The
actor (:func:`deliver`) locks the row, sends only if it is not sent yet and marks it sent, so a
retried or duplicated message delivers once; a failure raises, and dramatiq retries with backoff.
Nothing here runs inside the tick's work: the tick only inserts rows.

Webhooks are user input. Only ``http``/``https`` URLs are taken; at save and again at every send
the host is resolved and private, loopback, link-local, multicast and reserved addresses are
refused, and so is an IPv6 address embedding such an IPv4 address (IPv4-mapped or -compatible,
NAT64 ``64:ff9b::/96``, 6to4, Teredo), unless the host is in ``FAIRWAY_WEBHOOK_ALLOW_HOSTS``;
redirects are not followed. That keeps a webhook from reaching the server's own network (SSRF).
A send connects to an address the check resolved, not to the name again: a name answering a
public address to the check and ``127.0.0.1`` to the connection (DNS rebinding, a TTL of 0)
reached the server's own network. Through an egress proxy (``https_proxy``) the proxy resolves the name, as before.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import socket
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from config.errors import ServiceError

logger = logging.getLogger(__name__)

KIND_OF_EVENT = {
    "started": "started",
    "succeeded": "succeeded",
    "failed": "failed",
    "preempted": "preempted",
    "estimate_moved": "estimate_moved",
    "idle": "idle",
}
"""WorkloadEvent kind → the notification kind a user may choose."""

KIND_LABELS = {
    "started": "started",
    "succeeded": "succeeded",
    "failed": "failed",
    "preempted": "preempted",
    "estimate_moved": "estimated start moved by more than an hour",
    "idle": "idle (its GPUs unused)",
}

MAX_TRIES = 6
WEBHOOK_TIMEOUT_S = 10.0


class WebhookRefused(ValueError):
    """A webhook URL that may not be called (scheme, or an address the server must not reach)."""


def webhook_problem(url: str, *, resolve: bool = True) -> str | None:
    """Why ``url`` may not be used as a webhook, or None (see the module docstring)."""
    return _checked(url, resolve=resolve)[0]


def _checked(url: str, *, resolve: bool = True) -> tuple[str | None, str | None]:
    """(why ``url`` may not be used, or None; the checked address to connect to, or None where
    the name is not resolved here: an allowed host, or ``resolve=False``)."""
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError on ":99999" or ":abc" (was a 500), even for an allowed host
    except ValueError:
        return "not a URL", None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "a webhook is an http:// or https:// URL with a host", None
    if any(c.isspace() or not c.isprintable() for c in url):  # urlsplit drops tabs and newlines unseen
        return "a webhook URL holds no blanks or control characters (write a blank as %20)", None
    if port == 0:
        return "a webhook URL's port is 1 to 65535", None
    if not (parts.path + parts.query).isascii():  # the request line is ASCII: every delivery failed (brk34)
        return "percent-encode the non-ASCII characters of a webhook URL's path and query (é is %C3%A9)", None
    if parts.username or parts.password:
        return "a webhook URL carries no user or password", None
    host = parts.hostname.lower()
    if host in settings.FAIRWAY["WEBHOOK_ALLOW_HOSTS"]:
        return None, None
    if not resolve:
        return None, None
    try:
        infos = socket.getaddrinfo(host, port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return f"the host {host} does not resolve", None
    for info in infos:
        addr = ipaddress.ip_address(info[4][0].split("%")[0])
        if not _reachable_from_outside(addr):
            allow = "an admin may allow it: FAIRWAY_WEBHOOK_ALLOW_HOSTS"
            return f"the host {host} is a private or local address: {addr} ({allow})", None
    return None, (str(infos[0][4][0]) if infos else None)


_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")  # RFC 8215: a site's own translator


def _reachable_from_outside(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether ``addr`` and every IPv4 address it embeds are global unicast. Python calls
    ``::127.0.0.1`` (IPv4-compatible), ``64:ff9b::7f00:1`` (NAT64) and ``2002:7f00:1::`` (6to4)
    global, yet each reaches the IPv4 it carries through a translating route."""
    if not addr.is_global or addr.is_multicast:
        return False
    if isinstance(addr, ipaddress.IPv4Address):
        return True
    if addr in _NAT64_LOCAL:
        return False
    embedded: list[ipaddress.IPv4Address] = []
    if addr.ipv4_mapped is not None:
        embedded.append(addr.ipv4_mapped)
    if addr.sixtofour is not None:
        embedded.append(addr.sixtofour)
    if addr.teredo is not None:
        embedded.extend(addr.teredo)
    if int(addr) >> 32 == 0 or addr in _NAT64:  # IPv4-compatible ::a.b.c.d, or NAT64 64:ff9b::a.b.c.d
        embedded.append(ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF))
    return all(v4.is_global and not v4.is_multicast for v4 in embedded)


def webhook_without_url(kinds: Sequence[str], url: str, *, field: str = "") -> str | None:
    """Why webhook ``kinds`` with the webhook ``url`` cannot be saved, or None: a kind to post
    needs a URL to post it to (else nothing would ever be sent). The one wording of it: ``field``
    names the URL's field as a form labels it (the settings page's, the admin's; lt61: both said
    the API's ``webhook_url``); without it, the API's field."""
    if kinds and not (url or "").strip():
        where = f"set a webhook URL in the {field} field" if field else "set webhook_url"
        return f"webhook kinds need a webhook URL to post to ({where}, or choose no webhook kinds)"
    return None


SETTINGS_FIELDS = ("email_kinds", "webhook_kinds", "webhook_url")
"""The fields of :class:`~scheduler.models.NotificationSettings` a user sets."""


def save_settings(user: Any, changes: Mapping[str, Any]) -> Any:
    """Apply ``changes`` (some of :data:`SETTINGS_FIELDS`, each already checked alone) to
    ``user``'s notification settings as one step, and return them.

    The settings row is locked (``SELECT … FOR UPDATE``; created first when missing) before it is
    read, so the rule "webhook kinds need a URL" is checked against what a concurrent update
    committed, not what was read before it: two updates at once end as one applied after the other,
    each whole, or the later refused (docs/locking.md, "Notification settings"). ServiceError
    ``webhook_url_required`` (field ``webhook_url``) when the result would break that rule.
    """
    from scheduler.models import NotificationSettings

    unknown = set(changes) - set(SETTINGS_FIELDS)
    if unknown:
        raise ValueError(f"not a notification setting: {sorted(unknown)}")
    with transaction.atomic():
        pref, _created = NotificationSettings.objects.select_for_update().get_or_create(user=user)
        for name, value in changes.items():
            setattr(pref, name, value)
        problem = webhook_without_url(pref.webhook_kinds, pref.webhook_url)
        if problem:
            raise ServiceError("webhook_url_required", "webhook_url", problem[0].upper() + problem[1:] + ".")
        pref.save(update_fields=list(SETTINGS_FIELDS))
    return pref


def clean_kinds(kinds: Any) -> list[str]:
    """The notification kinds in ``kinds``; raises ValueError naming an unknown one."""
    if isinstance(kinds, str) or not isinstance(kinds, Sequence):
        raise ValueError("a list of event kinds")
    bad = [k for k in kinds if k not in KIND_LABELS]
    if bad:
        raise ValueError(f"unknown event kind {str(bad[0])[:40]!r} (known: {', '.join(KIND_LABELS)})")
    return [k for k in KIND_LABELS if k in kinds]


def listed_kinds(kinds: Any) -> list[Any]:
    """A settings row's kinds as a list; a row the admin saved before its form checked them
    (``NotificationSettings.clean``) may hold any JSON: ``kind in 5`` failed the transaction
    recording the event, an attempt's exit with it (brk40). Such a row sends nothing, and the API
    and the page show its kinds as none."""
    return kinds if isinstance(kinds, list) else []


def queue_for(events: Iterable[Any], owners: Mapping[int, int] | None = None) -> None:
    """Write the notifications ``events`` call for, and send them after the commit. ``owners``:
    workload id → owner id, as the caller read them; read here when it misses one of the events'."""
    from scheduler.models import Notification, NotificationSettings, Workload

    events = [e for e in events if e.kind in KIND_OF_EVENT and e.pk is not None]
    if not events:
        return
    workload_ids = {e.workload_id for e in events}
    if owners is None or not workload_ids <= owners.keys():
        owners = dict(Workload.objects.filter(pk__in=workload_ids).values_list("pk", "owner_id"))
    prefs = {s.user_id: s for s in NotificationSettings.objects.filter(user_id__in=set(owners.values()))}
    if not prefs:
        return
    rows = []
    for e in events:
        pref = prefs.get(owners.get(e.workload_id))
        if pref is None:
            continue
        kind = KIND_OF_EVENT[e.kind]
        if kind in listed_kinds(pref.email_kinds):
            rows.append(Notification(key=f"event-{e.pk}-email", event_id=e.pk, user_id=pref.user_id, channel="email"))
        if kind in listed_kinds(pref.webhook_kinds) and pref.webhook_url:
            rows.append(
                Notification(key=f"event-{e.pk}-webhook", event_id=e.pk, user_id=pref.user_id, channel="webhook")
            )
    if not rows:
        return
    Notification.objects.bulk_create(rows, ignore_conflicts=True)
    keys = [r.key for r in rows]

    def send() -> None:
        from scheduler.tasks import deliver_notification

        for key in keys:
            deliver_notification.send(key)

    transaction.on_commit(send)


def render(notification: Any) -> tuple[str, str]:
    """(subject, text) of a notification."""
    e = notification.event
    w = e.workload
    base = settings.FAIRWAY.get("PUBLIC_URL") or ""
    link = f"{base.rstrip('/')}/workloads/{w.pk}/" if base else f"/workloads/{w.pk}/"
    title = f"[fairway] {w.name} (#{w.pk}) {KIND_LABELS.get(e.kind, e.kind)}"
    # A mail header holds no line break (BadHeaderError: every email about a workload named with
    # one failed, brk34): the subject writes each as a blank; the text keeps the name as given.
    subject = " ".join(title.splitlines())
    return subject, f"{title}: {e.message}\n{link}"


def deliver(key: str) -> bool:
    """Send notification ``key`` once; True when it was sent by this call. Raises to be retried."""
    from scheduler.models import Notification

    with transaction.atomic():
        n = (
            Notification.objects.select_for_update(of=("self",))
            .select_related("event__workload", "user__notification_settings")
            .filter(key=key)
            .first()
        )
        if n is None or n.state != Notification.State.PENDING:
            return False
        n.tries += 1
        try:
            _send(n)
        except Exception as exc:  # noqa: BLE001 -- any failure is recorded, then retried
            n.last_error = str(exc)[:500]
            if n.tries >= MAX_TRIES or isinstance(exc, WebhookRefused):
                n.state = Notification.State.FAILED
            n.save(update_fields=["tries", "last_error", "state"])
            failed = n.state == Notification.State.FAILED
        else:
            n.state = Notification.State.SENT
            n.sent_at = timezone.now()
            n.save(update_fields=["tries", "state", "sent_at", "last_error"])
            return True
    if failed:
        logger.warning("notification %s failed for good: %s", key, n.last_error)
        return False
    raise RuntimeError(f"notification {key} not delivered yet: {n.last_error}")


def _send(n: Any) -> None:
    subject, text = render(n)
    if n.channel == "email":
        if not n.user.email:
            raise WebhookRefused("the user has no email address")
        send_mail(subject, text, settings.FAIRWAY["NOTIFY_FROM_EMAIL"], [n.user.email])
        return
    url = n.user.notification_settings.webhook_url
    problem, address = _checked(url)
    if problem:
        raise WebhookRefused(problem)
    body = json.dumps({"text": text}).encode()
    request = urllib.request.Request(  # noqa: S310 -- the scheme is checked above (http/https only)
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Idempotency-Key": n.key, "User-Agent": "fairway"},
    )
    host = urlsplit(url).hostname or ""
    proxied = bool(urllib.request.getproxies().get(urlsplit(url).scheme)) and not urllib.request.proxy_bypass(host)
    pinned = [] if address is None or proxied else [_PinnedHTTP(address), _PinnedHTTPS(address)]
    opener = urllib.request.build_opener(_NoRedirect, *pinned)
    with opener.open(request, timeout=WEBHOOK_TIMEOUT_S) as response:
        if not 200 <= response.status < 300:
            raise RuntimeError(f"webhook answered {response.status}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect could lead to an address the check refused: it is an error instead."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise urllib.error.HTTPError(req.full_url, code, "redirect not followed", headers, fp)


def _pinned(base: type[http.client.HTTPConnection], address: str) -> Any:
    """``base`` connecting to ``address`` whatever its host name resolves to now (the name still
    goes in the ``Host`` header and, for HTTPS, in the SNI and the certificate check)."""

    class Pinned(base):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._create_connection = lambda addr, *rest: socket.create_connection((address, addr[1]), *rest)

    return Pinned


class _PinnedHTTP(urllib.request.HTTPHandler):
    def __init__(self, address: str) -> None:
        super().__init__()
        self._address = address

    def http_open(self, req: Any) -> Any:
        return self.do_open(_pinned(http.client.HTTPConnection, self._address), req)


class _PinnedHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, address: str) -> None:
        super().__init__()
        self._address = address

    def https_open(self, req: Any) -> Any:
        return self.do_open(_pinned(http.client.HTTPSConnection, self._address), req, context=self._context)
