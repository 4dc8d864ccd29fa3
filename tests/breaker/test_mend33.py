"""mend33: faults found by earlier helpers; each case names what it was."""

from __future__ import annotations

import socket

import pytest

EMBEDDING = [
    "::127.0.0.1",  # IPv4-compatible (deprecated, still routed by some stacks)
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:10.0.0.5",
    "64:ff9b::7f00:1",  # NAT64 well-known prefix → 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 → 169.254.169.254 (cloud metadata)
    "64:ff9b:1::a00:1",  # NAT64 local-use prefix (RFC 8215)
    "2002:7f00:1::",  # 6to4 → 127.0.0.1
    "2002:a00:1::1",  # 6to4 → 10.0.0.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
]


@pytest.mark.parametrize("address", EMBEDDING)
def test_a_webhook_to_an_ipv6_address_embedding_a_private_ipv4_is_refused(address):
    """``http://[::127.0.0.1]/``, ``http://[64:ff9b::7f00:1]/`` and ``http://[2002:7f00:1::]/`` were
    taken: Python calls those IPv6 addresses global, yet each reaches the IPv4 it embeds (here
    loopback) through the server's compat, NAT64 or 6to4 route. The refusal names the address."""
    from scheduler import notifications

    problem = notifications.webhook_problem(f"http://[{address}]/x") or ""
    assert "private or local" in problem
    assert str(__import__("ipaddress").ip_address(address)) in problem


@pytest.mark.parametrize("address", EMBEDDING)
def test_a_webhook_name_resolving_to_such_an_address_is_refused(monkeypatch, address):
    from scheduler import notifications

    def resolve(host, port, *args, **kwargs):
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    problem = notifications.webhook_problem("https://hooks.example.org/x") or ""
    assert "private or local" in problem and "hooks.example.org" in problem


@pytest.mark.parametrize(
    "address", ["2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "93.184.216.34"]
)
def test_a_webhook_to_a_public_address_or_one_embedding_a_public_ipv4_is_taken(address):
    from scheduler import notifications

    host = f"[{address}]" if ":" in address else address
    assert notifications.webhook_problem(f"http://{host}/x") is None
