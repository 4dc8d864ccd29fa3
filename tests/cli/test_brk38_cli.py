"""brk38: ``fairway`` pointed at a server whose JSON answers are not Fairway's (another service
on that URL, a proxy's JSON error page, a server of another version)."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fairway_cli import cli as fairway_cli


@pytest.fixture(params=[[1, 2, 3], {"results": None, "count": 5}, {"detail": "ok"}, "hello"], ids=repr)
def other_json_server(request: pytest.FixtureRequest) -> Iterator[str]:
    body = json.dumps(request.param).encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _answer(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "argv", [["ls"], ["show", "1"], ["cancel", "1"], ["history"], ["hosts"], ["budgets"], ["logs", "1"]]
)
def test_json_that_is_not_fairways_is_a_clear_error_not_a_traceback(other_json_server, monkeypatch, tmp_path, argv):
    """``fairway ls`` against a JSON service other than Fairway's API (or a version whose answers
    differ) ended in a Python traceback (``KeyError: 'name'``, ``TypeError: list indices must
    be integers``): it now says the server's answer is not what this fairway reads, naming the
    server, exit 3 as for a server that is not Fairway's."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("FAIRWAY_URL", other_json_server)
    monkeypatch.setenv("FAIRWAY_TOKEN", "x" * 20)
    out, err = io.StringIO(), io.StringIO()

    code = fairway_cli.main(argv, out=out, err=err)

    assert code == fairway_cli.EXIT_UNREACHABLE, (code, err.getvalue(), out.getvalue())
    assert other_json_server in err.getvalue() and "not what this fairway" in err.getvalue()
