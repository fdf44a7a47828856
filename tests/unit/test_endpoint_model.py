"""The model a sweep through --url names: the endpoint's one served model (a router routes by it), else 'default'."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from benchmarks.endpoint import served_model


@contextmanager
def models_server(answer: object, status: int = 200, key: str = "") -> Iterator[str]:
    """A loopback server whose /v1/models answers `answer` (behind `key` when given)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            refused = key and self.headers.get("Authorization") != f"Bearer {key}"
            body = json.dumps(answer).encode()
            self.send_response(401 if refused else status)
            self.end_headers()
            self.wfile.write(b"" if refused else body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("answer", "status", "served"),
    [
        ({"object": "list", "data": [{"id": "/models/kimi-k2.6", "object": "model"}]}, 200, "/models/kimi-k2.6"),
        ({"data": [{"id": "a"}, {"id": "b"}]}, 200, ""),  # several: the user must name one (--model)
        ({"data": [{"id": "a"}, {"id": "a"}]}, 200, "a"),  # two replicas of one model, as a router lists them
        ({"data": []}, 200, ""),
        ({"data": "nonsense"}, 200, ""),
        (["not", "an", "object"], 200, ""),
        ({"error": "no route"}, 404, ""),
    ],
)
def test_the_one_served_model_or_nothing(answer, status, served):
    with models_server(answer, status) as url:
        assert served_model(url) == served


def test_the_key_is_sent_and_an_unreachable_endpoint_names_nothing():
    with models_server({"data": [{"id": "m"}]}, key="k" * 16) as url:
        assert served_model(url) == "" and served_model(url, "k" * 16) == "m"
    assert served_model("http://127.0.0.1:9", timeout=1) == ""
