"""Health probe of the server image: ``python deploy/image/healthcheck.py [PATH]`` (default
``/livez``) exits 0 when this container's web process answers 200. It sends the first name of
``ALLOWED_HOSTS`` as ``Host`` (Django refuses a request for a host it does not serve, and a probe
connects to 127.0.0.1) and ``X-Forwarded-Proto: https`` (no redirect when the proxy header is trusted)."""

import os
import sys
import urllib.request

path = sys.argv[1] if len(sys.argv) > 1 else "/livez"
host = (os.environ.get("ALLOWED_HOSTS") or "localhost").split(",")[0].strip().lstrip(".") or "localhost"
if host == "*":
    host = "localhost"
request = urllib.request.Request(
    f"http://127.0.0.1:{os.environ.get('PORT', '8000')}{path}",
    headers={"Host": host, "X-Forwarded-Proto": "https"},
)
try:
    with urllib.request.urlopen(request, timeout=4) as answer:  # noqa: S310 -- http://127.0.0.1 only
        sys.exit(0 if answer.status == 200 else 1)
except Exception as exc:  # any failure is "unhealthy"
    print(f"unhealthy: {exc}", file=sys.stderr)
    sys.exit(1)
