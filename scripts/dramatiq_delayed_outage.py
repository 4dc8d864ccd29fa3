"""Does dramatiq's RedisBroker lose a delayed message on a Redis outage? (docs/deploy.md, "Lost
delayed messages"; fix29.) A worker holds a delayed message in memory; Redis is unreachable for
3 s (through a TCP proxy this script owns, so no other client is touched); then a plain message
is sent. Prints what ran and what Redis still holds.

    python scripts/dramatiq_delayed_outage.py [REDIS_DB]   # default 8; only fix29repro* keys

Seen with dramatiq 2.2.1 (2026-12-05): the plain message runs, the delayed one never does: the
consumer drops its in-memory delay queue on the connection error, and the message stays in the
live worker's acknowledgement set, which Redis maintenance gives back only after that worker's
heartbeats stop."""

# ruff: noqa
import socket, sys, threading, time, logging
import redis, dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq import Worker

logging.basicConfig(level=logging.CRITICAL)
PORT = 16398
up = threading.Event()
up.set()
socks = []


def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass


def proxy():
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", PORT))
    srv.listen(64)
    while True:
        c, _ = srv.accept()
        if not up.is_set():
            c.close()
            continue
        r = socket.create_connection(("127.0.0.1", 6379))
        socks.extend([c, r])
        threading.Thread(target=pipe, args=(c, r), daemon=True).start()
        threading.Thread(target=pipe, args=(r, c), daemon=True).start()


threading.Thread(target=proxy, daemon=True).start()
time.sleep(0.2)
DB = int(sys.argv[1]) if len(sys.argv) > 1 else 8
ctl = redis.Redis.from_url(f"redis://127.0.0.1:6379/{DB}")
for k in ctl.keys("fix29repro*"):
    ctl.delete(k)
broker = RedisBroker(url=f"redis://127.0.0.1:{PORT}/{DB}", namespace="fix29repro")
dramatiq.set_broker(broker)
ran = []


@dramatiq.actor(queue_name="q", max_retries=0)
def hello(n):
    ran.append((n, time.time()))


broker.declare_queue("q")
worker = Worker(broker, worker_timeout=100, worker_threads=1)
worker.start()
t0 = time.time()
hello.send_with_options(args=(1,), delay=6000)
time.sleep(1.5)
print("held in memory; acks:", {k.decode(): len(ctl.smembers(k)) for k in ctl.keys("fix29repro:__acks__*")})
up.clear()
for s in socks:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
time.sleep(3)  # Redis unreachable for 3 s
up.set()
time.sleep(1.5)
hello.send_with_options(args=(2,), delay=0)
time.sleep(12)
print("ran", [(n, round(t - t0, 1)) for n, t in ran], "(1: the delayed one, due at 6 s; 2: plain, after the outage)")
print(
    "after: acks:",
    {k.decode(): len(ctl.smembers(k)) for k in ctl.keys("fix29repro:__acks__*")},
    "DQ msgs:",
    ctl.hlen("fix29repro:q.DQ.msgs"),
)
worker.stop()
for k in ctl.keys("fix29repro*"):
    ctl.delete(k)
