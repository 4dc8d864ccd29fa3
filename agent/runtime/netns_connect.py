"""A forwarded connection (``fairway port-forward``) into a container of the ``docker`` runtime:
run by the agent as ``python -I <this file> NS PORT UID GID SHARED`` (what it does:
:data:`agent.runtime.docker.NETNS_CONNECT`). Run by path (iso48: its whole source was its command
line, ``-c``, world-readable on the host); standard library only, never the agent's package."""

import array  # noqa: F401 -- socket.send_fds's
import ctypes
import os
import socket
import sys
from importlib.util import module_from_spec, spec_from_file_location

ns, port, uid, gid, shared = map(int, sys.argv[1:6])
if shared:  # its peer-uid check (brk62), loaded as root: the file beside this one (agent.runtime.base.PEER_UID_CHECK)
    found = spec_from_file_location("peer_uid", os.path.join(os.path.dirname(__file__), "peer_uid.py"))
    assert found is not None and found.loader is not None  # noqa: S101 -- the agent's own file
    peer_uid = module_from_spec(found)
    found.loader.exec_module(peer_uid)
libc = ctypes.CDLL(None, use_errno=True)
if libc.setns(ns, 0x40000000) != 0:  # CLONE_NEWNET
    sys.stderr.write("fail cannot enter the container's network namespace: " + os.strerror(ctypes.get_errno()))
    sys.exit(125)
os.close(ns)
if uid >= 0:
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
errors = []
for family, address in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
    try:
        conn = socket.socket(family, socket.SOCK_STREAM)
        conn.settimeout(10)
        conn.connect((address, port))
        break
    except OSError as e:
        errors.append(e)
else:
    sys.stderr.write("refused " + (errors[0].strerror or str(errors[0])))
    sys.exit(111)
if shared and (problem := peer_uid.peer_uid_problem(conn, family, address, port)):  # the host's network (brk62)
    sys.stderr.write("refused " + problem)
    sys.exit(111)
socket.send_fds(socket.socket(fileno=0), [b"1"], [conn.fileno()])
