"""The check, in a forwarded connection's helper (the process runtime's exec wrapper, the docker
runtime's netns helper), that the server its connection reached is its own uid's:
``peer_uid_problem``, "" or why not (docs/isolation.md, brk62). Standard library only: the helpers
run it as the attempt's owner, loading this file by its path (iso48: their source is no longer
their command line); tests take its text, :data:`agent.runtime.base.PEER_UID_CHECK`."""

import os
import socket
import sys


def peer_uid_problem(conn, family, address, port):
    # brk62: on the host's shared network another uid's server may hold the port first (a squatter).
    # pf63: whose is the listening socket that took the connection, from /proc/net/tcp[6] (addresses
    # as 32-bit words in the host's order): the accepted end's row reads uid 0 once its server closed
    # it (orphaned, time-wait: inode 0), so a server that answers and closes at once was refused
    def at(ip, p):
        b = socket.inet_pton(socket.AF_INET6 if ":" in ip else socket.AF_INET, ip)
        words = (int.from_bytes(b[i : i + 4], sys.byteorder) for i in range(0, len(b), 4))
        return "".join(f"{w:08X}" for w in words) + f":{p:04X}"

    tables = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as table:
                tables[name] = [w for w in map(str.split, table.read().splitlines()[1:]) if len(w) > 9]
        except OSError:
            tables[name] = []
    # the kernel's order of lookup: a listener bound to the address first, then one bound to any;
    # IPv4's table, then IPv6's (a v4-mapped address, a dual-stack socket's any)
    if family == socket.AF_INET:
        order = (
            ("/proc/net/tcp", address),
            ("/proc/net/tcp", "0.0.0.0"),  # noqa: S104 -- a table row, bound by none
            ("/proc/net/tcp6", "::ffff:" + address),
            ("/proc/net/tcp6", "::"),
        )
    else:
        order = (("/proc/net/tcp6", address), ("/proc/net/tcp6", "::"))
    whose = set()
    for name, ip in order:
        if rows := [w for w in tables[name] if w[3] == "0A" and w[1] == at(ip, port)]:
            whose = {int(w[7]) for w in rows}  # one socket, or a SO_REUSEPORT group: one uid
            break
    # the accepted end while its server holds it (the listener may be gone: nc -l takes one)
    mine = conn.getsockname()[:2]
    for name, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        if v6 or family == socket.AF_INET:
            pre = "::ffff:" if v6 and family == socket.AF_INET else ""
            ends = (at(pre + address, port), at(pre + mine[0], mine[1]))
            whose |= {int(w[7]) for w in tables[name] if (w[1], w[2]) == ends and w[9] != "0"}
    if whose == {os.getuid()}:
        return ""
    why = f"uid {min(whose - {os.getuid()})}" if whose else "its owner unknown"
    return f"the server on it is another user's ({why}), not this workload's"
