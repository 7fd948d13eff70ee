"""The HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz``, ``/livez`` and ``/readyz``.

``/readyz`` answers 200 when the caller's readiness check passes (the daemon: connected to
the broker and caught up with its checkpoint) and 503 with the reason otherwise; ``/livez``
the same with the liveness check (the daemon: its consumer loop turns, and makes progress
while behind); ``/healthz`` 200 while the process serves HTTP at all.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from monitor.config import HttpConfig

log = logging.getLogger(__name__)

Readiness = Callable[[], str | None]
"""None when ready (or alive), else the reason why not."""


class MetricsServer:
    """A threaded HTTP server in the background; ``close()`` stops it."""

    def __init__(
        self, address: tuple[str, int], registry: CollectorRegistry,
        ready: Readiness = lambda: None, tls: ssl.SSLContext | None = None,
        alive: Readiness = lambda: None,
    ) -> None:
        handler = _handler(registry, ready, alive)
        self._server = _Server(address, handler)
        self._server.tls = tls
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-http", daemon=True
        )

    @classmethod
    def from_config(
        cls, http: HttpConfig, registry: CollectorRegistry, ready: Readiness = lambda: None,
        alive: Readiness = lambda: None,
    ) -> MetricsServer:
        """The server of ``[http]``: HTTPS (and mutual TLS) when its TLS files are set."""
        tls = None
        if http.tls_certfile is not None and http.tls_keyfile is not None:
            tls = tls_context(http.tls_certfile, http.tls_keyfile, http.tls_client_cafile)
        return cls(http.address, registry, ready, tls, alive)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    """Threaded; with TLS, each connection's handshake runs in its own thread (with a
    timeout), so a client that connects and stalls cannot hold up the others."""

    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is not None:
            request.settimeout(10)
            request = self.tls.wrap_socket(request, server_side=True)
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)


def tls_context(
    certfile: Path, keyfile: Path, client_cafile: Path | None = None
) -> ssl.SSLContext:
    """A server context (TLS 1.2+); with ``client_cafile``, client certificates are required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    if client_cafile is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_cafile)
    return context


def _handler(
    registry: CollectorRegistry, ready: Readiness, alive: Readiness
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                try:
                    body = encoder(registry)
                except Exception as error:  # a scrape must say it failed, and the log why
                    log.exception("collecting /metrics failed")
                    self._reply(500, f"collecting metrics failed: {error!r}\n".encode())
                    return
                self._reply(200, body, content_type)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz":
                self._probe(ready(), "ready")
            elif path == "/livez":
                self._probe(alive(), "alive")
            else:
                self._reply(404, b"not found: try /metrics, /healthz, /livez or /readyz\n")

        def _probe(self, reason: str | None, word: str) -> None:
            if reason is None:
                self._reply(200, f"{word}\n".encode())
            else:
                self._reply(503, f"not {word}: {reason}\n".encode())

        def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes every few seconds would flood the log

    return Handler
