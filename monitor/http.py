"""The HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` (alive) and ``/readyz``.

``/readyz`` answers 200 when the caller's readiness check passes (the daemon: connected to
the broker and caught up with its checkpoint) and 503 with the reason otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

Readiness = Callable[[], str | None]
"""None when ready, else the reason why not."""


class MetricsServer:
    """A threaded HTTP server in the background; ``close()`` stops it."""

    def __init__(
        self, address: tuple[str, int], registry: CollectorRegistry,
        ready: Readiness = lambda: None,
    ) -> None:
        handler = _handler(registry, ready)
        self._server = ThreadingHTTPServer(address, handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(registry: CollectorRegistry, ready: Readiness) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                self._reply(200, encoder(registry), content_type)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz":
                reason = ready()
                if reason is None:
                    self._reply(200, b"ready\n")
                else:
                    self._reply(503, f"not ready: {reason}\n".encode())
            else:
                self._reply(404, b"not found: try /metrics, /healthz or /readyz\n")

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes every few seconds would flood the log

    return Handler
