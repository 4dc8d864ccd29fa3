"""uvicorn's own CPU per request: ``GET /livez`` over keep-alive connections (issue 15). Prints, asserts nothing.

    python bench/uvicorn_cpu.py [--n 4000] [--connections 4] [--variants h11/asyncio,httptools/uvloop]

``/livez`` does no database or cache work, so the CPU the server process spends per answer is
uvicorn's (HTTP parsing, the event loop, the ASGI calls) plus the thinnest pass through
``config.asgi.application`` (the in-flight limit, Django's ASGI request, the one thread hop, the
middleware chain). Each variant (``--http`` parser / ``--loop``) runs one uvicorn process with the
production settings, as the Procfile starts it; a client in this process sends ``--n`` requests
over ``--connections`` keep-alive sockets, one in flight per socket, and the server's CPU
(``/proc/<pid>/stat`` user + system) during them is divided by ``--n``. Variants alternate
``--rounds`` times so a busy minute weighs on all alike.
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")
REQUEST = b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start(http: str, loop: str, port: int) -> subprocess.Popen[bytes]:
    """One uvicorn process, the Procfile's flags with the given parser and loop; returns once it answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FAIRWAY_", "DJANGO_", "SECURE_"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        FAIRWAY_ENV="production",
        DATABASE_URL=env.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/fairway_uvicorn_bench"),
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="127.0.0.1",
        SECURE_SSL_REDIRECT="false",
        FAIRWAY_VAR_DIR=tempfile.mkdtemp(prefix="uvicorn-cpu-"),
        LOG_LEVEL="WARNING",
    )
    argv = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
            "--port", str(port), "--ws", "websockets-sansio", "--lifespan", "off", "--proxy-headers",
            "--http", http, "--loop", loop]  # fmt: skip
    # S603: fixed arguments (the choices given on the command line of this bench)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # noqa: S603
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(REQUEST)
                if sock.recv(4096).startswith(b"HTTP/1.1 200"):
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"uvicorn --http {http} --loop {loop} did not answer /livez on port {port}")


def read_response(sock: socket.socket, buf: bytes) -> bytes:
    """Reads one response (headers + Content-Length body); returns what follows it."""
    while b"\r\n\r\n" not in buf:
        buf += sock.recv(65536)
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    return rest[length:]


def drive(port: int, n: int, connections: int) -> None:
    """``n`` GETs of /livez over ``connections`` keep-alive sockets, round robin, one in flight on each."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(connections)]
    bufs = [b""] * connections
    for start_at in range(0, n, connections):
        batch = range(min(connections, n - start_at))
        for i in batch:
            socks[i].sendall(REQUEST)
        for i in batch:
            bufs[i] = read_response(socks[i], bufs[i])
    for sock in socks:
        sock.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=4000, help="requests per variant and round")
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--port", type=int, default=8650)
    parser.add_argument("--variants", default="h11/asyncio,httptools/uvloop", help="HTTP/LOOP, comma-separated")
    args = parser.parse_args()
    variants = [tuple(v.split("/")) for v in args.variants.split(",")]
    procs = {v: start(v[0], v[1], args.port + i) for i, v in enumerate(variants)}
    results: dict[tuple[str, ...], list[float]] = {v: [] for v in variants}
    try:
        for i in range(len(variants)):  # warm-up: imports, the first requests' lazy setup
            drive(args.port + i, 200, args.connections)
        for _ in range(args.rounds):
            for i, (v, proc) in enumerate(procs.items()):
                before = cpu_seconds(proc.pid)
                drive(args.port + i, args.n, args.connections)
                results[v].append((cpu_seconds(proc.pid) - before) * 1000 / args.n)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(10)
    print(f"GET /livez, {args.n} requests × {args.rounds} rounds over {args.connections} keep-alive connections "
          f"(load average {' '.join(f'{x:.2f}' for x in os.getloadavg())})")  # fmt: skip
    print(f"{'http/loop':22} server CPU ms per request (each round)   min")
    for v, values in results.items():
        print(f"{'/'.join(v):22} {'  '.join(f'{x:.3f}' for x in values):38} {min(values):.3f}")


if __name__ == "__main__":
    main()
