"""The application's routes: ``/metrics`` (Prometheus), ``/healthz``, ``/livez`` and
``/readyz``; with a ``Status``, the status page at ``/`` (``?class=``, ``?view=hour|total``,
``?refresh=SECONDS``; the broker's state on it is what ``/readyz`` says), the query lists at
``/queries`` and a replica's tallies at ``/queries/state``. ``serve`` starts them on the
transport of ``monitor.serve.http``; the daemon and ``replay --serve`` both use it.

``/readyz`` answers 200 when the caller's readiness check passes (the daemon: connected to
the broker and caught up with its checkpoint) and 503 with the reason otherwise; ``/livez``
the same with the liveness check (the daemon: its consumer loop turns, and makes progress
while behind); ``/healthz`` 200 while the process serves HTTP at all.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from http import HTTPStatus
from urllib.parse import parse_qs

from prometheus_client import ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import CollectorRegistry

from monitor.config import HttpConfig
from monitor.serve import page
from monitor.serve.http import Answer, HttpServer, Limits, Request, tls_context
from monitor.serve.metrics import ExportCollector, served_info
from monitor.serve.page import Broker, Status
from monitor.serve.queries import STATE, FilterError, Report, select

log = logging.getLogger(__name__)

Readiness = Callable[[], str | None]
"""None when ready (or alive), else the reason why not."""
DAY = 86400


SECURITY_HEADERS = (
    ("Content-Security-Policy", page.CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
)
"""Sent with every answer, errors included: a browser runs nothing of a page or of a JSON or
text answer that holds query texts (no script, no other style, no guessing the content type),
shows none of them in a frame of another site, and tells the links' targets nothing."""

class Routes:
    """The answers to GET and HEAD, made in the worker threads."""

    def __init__(
        self, registry: CollectorRegistry, ready: Readiness, alive: Readiness, pages: Pages,
        status: Status | None = None, refresh: int = 0,
    ) -> None:
        self._ready = ready
        self._alive = alive
        self._pages = pages
        self._status = status
        self._refresh = refresh
        """Seconds between the status page's reloads unless ``?refresh=`` says (0: none)."""

    @property
    def _dimensions(self) -> tuple[str, ...]:
        """The dimensions of the figures shown: each a filter of the page and the lists."""
        return self._status.export().labels[1:] if self._status is not None else ()

    def answer(self, request: Request) -> Answer:
        if request.path == "/metrics":
            return self._metrics(request)
        if request.path == "/healthz":
            return Answer(HTTPStatus.OK, b"ok\n")
        if request.path == "/readyz":
            return probe(self._ready(), "ready")
        if request.path == "/livez":
            return probe(self._alive(), "alive")
        if self._status is not None and request.path in ("/", "/queries", "/queries/state"):
            try:
                return self._show(request, self._status)
            except Exception as error:
                log.exception("rendering %s failed", request.path)
                return Answer(HTTPStatus.INTERNAL_SERVER_ERROR,
                               f"rendering failed: {error!r}\n".encode())
        return Answer(HTTPStatus.NOT_FOUND, (
            b"not found: try /, /queries, /metrics, /healthz, /livez or /readyz\n"
            if self._status is not None else
            b"not found: try /metrics, /healthz, /livez or /readyz\n"
        ))

    def _show(self, request: Request, status: Status) -> Answer:
        """The status page or the query lists, filtered by the query string."""
        asked = {k: v[-1] for k, v in parse_qs(request.query).items()}
        dimensions = self._dimensions
        unknown = asked.keys() - {"class", "window", "list"} - set(dimensions) - (
            {"view", "refresh"} if request.path == "/" else set()
        )
        if unknown:
            named = "".join(f", {name}" for name in dimensions)
            return Answer(HTTPStatus.BAD_REQUEST, (
                f"unknown parameter {sorted(unknown)[0]!r}: " + (
                    f"the page takes class{named}, view and refresh\n"
                    if request.path == "/" else f"filters are class{named}, window and list\n"
                )).encode())
        values = {name: asked[name] for name in dimensions if name in asked}
        if request.path == "/queries/state":
            state = status.state()
            if state is None:
                return Answer(HTTPStatus.SERVICE_UNAVAILABLE,
                               b"query lists not computed yet: they come with the first "
                               b"checkpoint\n", headers=(("Retry-After", "5"),))
            return Answer(HTTPStatus.OK, STATE.dump_json(state), "application/json")
        queries = status.queries()
        if request.path == "/":
            return self._page(status, queries, asked, values)
        if queries is None:
            return Answer(HTTPStatus.SERVICE_UNAVAILABLE,
                           b"query lists not computed yet: they come with the first "
                           b"checkpoint\n", headers=(("Retry-After", "5"),))
        try:
            chosen = select(queries, asked.get("class"), asked.get("window"), asked.get("list"),
                            values)
        except FilterError as error:
            return Answer(HTTPStatus.BAD_REQUEST, f"{error}\n".encode())
        return Answer(HTTPStatus.OK, json.dumps(chosen, indent=1).encode() + b"\n",
                       "application/json")

    def _page(self, status: Status, queries: Report | None, asked: dict[str, str],
              values: dict[str, str]) -> Answer:
        """The status page, with the broker's state as ``/readyz`` tells it."""
        view = asked.get("view", "hour")
        if view not in ("hour", "total"):
            return Answer(HTTPStatus.BAD_REQUEST,
                          b"view: hour (the last hour, the default) or total (since the state "
                          b"began)\n")
        refresh = self._refresh
        if "refresh" in asked:
            if not re.fullmatch(r"[0-9]{1,5}", asked["refresh"]) or int(asked["refresh"]) > DAY:
                return Answer(HTTPStatus.BAD_REQUEST,
                              b"refresh: whole seconds between reloads, 0 (never) to 86400\n")
            refresh = int(asked["refresh"])
        broker = None if status.connected is None else Broker(status.connected(), self._ready())
        body = page.render(
            status.export(), queries, asked.get("class"), recent=status.recent(),
            now=status.clock(), broker=broker,
            view="total" if view == "total" else "hour", refresh=refresh, values=values,
        )
        return Answer(HTTPStatus.OK, body, "text/html; charset=utf-8")

    def _metrics(self, request: Request) -> Answer:
        try:
            content_type, body = self._pages.get(request.accept, request.gzip, request.received)
        except Exception as error:  # a scrape must say it failed, and the log why
            log.exception("collecting /metrics failed")
            return Answer(HTTPStatus.INTERNAL_SERVER_ERROR,
                           f"collecting metrics failed: {error!r}\n".encode())
        headers = [("Vary", "Accept, Accept-Encoding")]
        if request.gzip:
            headers.append(("Content-Encoding", "gzip"))
        return Answer(HTTPStatus.OK, body, content_type, tuple(headers))


def probe(reason: str | None, word: str) -> Answer:
    if reason is None:
        return Answer(HTTPStatus.OK, f"{word}\n".encode())
    return Answer(HTTPStatus.SERVICE_UNAVAILABLE, f"not {word}: {reason}\n".encode())


@dataclass(frozen=True)
class Page:
    started: float
    """The clock when its rendering began."""
    body: bytes
    gzipped: bytes | None = None


class Pages:
    """Rendered ``/metrics`` pages, one per content type, each reused by the scrapes received
    until ``max_age`` after its rendering began. One rendering at a time: the scrapes that
    come meanwhile wait for it and take it."""

    def __init__(
        self, registry: CollectorRegistry, max_age: float, clock: Callable[[], float]
    ) -> None:
        self._registry = registry
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._pages: dict[str, Page] = {}

    def get(self, accept: str, gzipped: bool, received: float) -> tuple[str, bytes]:
        """The content type and the body (gzip-compressed if asked) for a scrape received at
        ``received``."""
        encoder, content_type = choose_encoder(accept)
        with self._lock:
            page = self._pages.get(content_type)
            if page is None or page.started < received - self._max_age:
                started = self._clock()
                page = Page(started, encoder(self._registry))
                # content types come from the clients: stale pages go, so they cannot pile up
                self._pages = {kind: old for kind, old in self._pages.items()
                               if old.started >= started - self._max_age}
            if gzipped and page.gzipped is None:
                page = replace(page, gzipped=gzip.compress(page.body, compresslevel=6, mtime=0))
            self._pages[content_type] = page
        return content_type, page.gzipped if gzipped and page.gzipped is not None else page.body



DEFAULT_LIMITS = Limits()


class MetricsServer(HttpServer):
    """The routes on the transport, in a background thread; ``close()`` stops it."""

    def __init__(
        self, address: tuple[str, int], registry: CollectorRegistry,
        ready: Readiness = lambda: None, tls: ssl.SSLContext | None = None,
        alive: Readiness = lambda: None, *, limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic, status: Status | None = None,
        page_refresh: int = 0,
    ) -> None:
        routes = Routes(
            registry, ready, alive, Pages(registry, limits.cache_seconds, clock), status,
            page_refresh,
        )
        super().__init__(address, routes.answer, tls, limits=limits, clock=clock,
                         headers=SECURITY_HEADERS)


def serve(
    http: HttpConfig, status: Status, extra: Callable[[], Iterable[Metric]] = lambda: (),
    ready: Readiness = lambda: None, alive: Readiness = lambda: None, process: bool = False,
) -> MetricsServer:
    """The routes of ``status`` (its export on ``/metrics``, with ``extra`` families and,
    with ``process``, the process collector's) served on ``[http]`` (HTTPS, and mutual TLS,
    when its TLS files are set), started. The daemon and ``replay --serve`` both serve this
    way."""
    tls = None
    if http.tls_certfile is not None and http.tls_keyfile is not None:
        tls = tls_context(http.tls_certfile, http.tls_keyfile, http.tls_client_cafile)
    served = served_info("https" if tls is not None else "http")
    registry = CollectorRegistry()
    registry.register(ExportCollector(status.export, lambda: (*extra(), served)))
    if process:
        ProcessCollector(registry=registry)  # process_*: RSS, CPU, open fds, start time
    server = MetricsServer(http.address, registry, ready, tls, alive, status=status,
                           page_refresh=math.ceil(http.page_refresh))
    server.start()
    return server
