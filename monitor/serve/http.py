"""The HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz``, ``/livez`` and ``/readyz``;
with a ``Status``, the status page at ``/`` and the query lists at ``/queries``.

``/readyz`` answers 200 when the caller's readiness check passes (the daemon: connected to
the broker and caught up with its checkpoint) and 503 with the reason otherwise; ``/livez``
the same with the liveness check (the daemon: its consumer loop turns, and makes progress
while behind); ``/healthz`` 200 while the process serves HTTP at all.

Whatever other clients do, the endpoint stays cheap and answers Prometheus: one event loop
holds the connections, so an idle or half-sent one costs a socket and no thread; a request is
answered only once its line and headers have arrived whole (a client that stalls or closes
before that runs nothing); a fixed set of worker threads makes the answers; one rendering of
``/metrics`` serves every scrape received within ``cache_seconds`` of its start. The bounds
are :class:`Limits`.
"""

from __future__ import annotations

import asyncio
import gzip
import http.client
import io
import json
import logging
import queue
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from email.utils import formatdate
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qs

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from monitor.config import HttpConfig
from monitor.serve import page
from monitor.serve.page import Status
from monitor.serve.queries import STATE, FilterError, select

log = logging.getLogger(__name__)

Readiness = Callable[[], str | None]
"""None when ready (or alive), else the reason why not."""

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """What one client can take of the endpoint; the defaults are the daemon's."""

    header_timeout: float = 5.0
    """A request line and headers must arrive whole within this many seconds of their first
    byte, and a connection's first request within this of the connection (after its TLS
    handshake); else the connection is closed unanswered."""
    idle_timeout: float = 30.0
    """A kept-alive connection waits this long for its next request, then is closed."""
    write_timeout: float = 10.0
    """A client must take its answer within this, or its connection is closed."""
    tls_handshake_timeout: float = 10.0
    max_header_bytes: int = 8192
    """A longer request line and headers get 431 and the connection is closed."""
    workers: int = 8
    """Threads that make the answers (render ``/metrics``, ask the probes): fixed."""
    max_connections: int = 256
    """Open connections (past the TLS handshake) at most. A new one beyond it closes the
    connection that has waited longest for a request, or gets 503 if none waits."""
    backlog: int = 128
    """Connections the kernel queues before the server accepts them."""
    cache_seconds: float = 1.0
    """A rendered ``/metrics`` page serves the scrapes received until this many seconds after
    its rendering began: never older than that, and concurrent scrapes render once."""


class MetricsServer:
    """The endpoint in a background thread; ``close()`` stops it."""

    def __init__(
        self, address: tuple[str, int], registry: CollectorRegistry,
        ready: Readiness = lambda: None, tls: ssl.SSLContext | None = None,
        alive: Readiness = lambda: None, *, limits: Limits = Limits(),
        clock: Callable[[], float] = time.monotonic, status: Status | None = None,
    ) -> None:
        self._limits = limits
        self._tls = tls
        self._clock = clock
        self._site = _Site(
            registry, ready, alive, _Pages(registry, limits.cache_seconds, clock), status
        )
        self._workers = _Workers(limits.workers)
        self._socket = _listen(address, limits.backlog)
        self._open: set[asyncio.StreamWriter] = set()
        self._waiting: dict[asyncio.StreamWriter, None] = {}
        """The open connections waiting for a request, longest waiting first."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._serving = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="metrics-http", daemon=True)

    @classmethod
    def from_config(
        cls, http: HttpConfig, registry: CollectorRegistry, ready: Readiness = lambda: None,
        alive: Readiness = lambda: None, status: Status | None = None,
    ) -> MetricsServer:
        """The server of ``[http]``: HTTPS (and mutual TLS) when its TLS files are set."""
        tls = None
        if http.tls_certfile is not None and http.tls_keyfile is not None:
            tls = tls_context(http.tls_certfile, http.tls_keyfile, http.tls_client_cafile)
        return cls(http.address, registry, ready, tls, alive, status=status)

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self) -> MetricsServer:
        self._workers.start()
        self._thread.start()
        self._serving.wait()
        if self._failure is not None:
            raise self._failure
        return self

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join()
        self._socket.close()
        self._workers.stop()

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(_log_loop_error)
        self._loop, self._stop = loop, asyncio.Event()
        try:
            server = await asyncio.start_server(
                self._connection, sock=self._socket, ssl=self._tls, backlog=self._limits.backlog,
                ssl_handshake_timeout=self._limits.tls_handshake_timeout if self._tls else None,
            )
        except BaseException as error:
            self._failure = error
            raise
        finally:
            self._serving.set()
        await self._stop.wait()
        server.close()
        for writer in list(self._open):
            writer.transport.abort()

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if len(self._open) >= self._limits.max_connections and not self._evict():
            _write(writer, _BUSY, keep_alive=False, head_only=False)
            writer.close()
            return
        self._open.add(writer)
        writer.transport.set_write_buffer_limits(0)  # drain() waits for the whole answer
        pending = bytearray()
        answered = False
        wait = self._limits.header_timeout
        try:
            while True:
                self._waiting[writer] = None
                try:
                    head = await self._read_head(reader, pending, wait)
                finally:
                    self._waiting.pop(writer, None)
                request = _TOO_LARGE if head is None else _parse(head, self._clock())
                if isinstance(request, _Answer):
                    answer, keep_alive, head_only = request, False, False
                else:
                    job = partial(self._site.answer, request)
                    answer = await asyncio.wrap_future(self._workers.submit(job))
                    keep_alive, head_only = request.keep_alive, request.method == "HEAD"
                _write(writer, answer, keep_alive, head_only)
                async with asyncio.timeout(self._limits.write_timeout):
                    await writer.drain()
                if not keep_alive:
                    answered = True
                    return
                wait = self._limits.idle_timeout
        except (OSError, EOFError):  # closed, stalled (TimeoutError) or evicted: dropped
            pass
        finally:
            self._open.discard(writer)
            if answered:
                writer.close()
            else:  # nothing of it is worth waiting for
                writer.transport.abort()

    async def _read_head(
        self, reader: asyncio.StreamReader, pending: bytearray, first_byte_within: float
    ) -> bytes | None:
        """The next request's line and headers, taken from the front of ``pending``; None
        when they pass ``max_header_bytes``. TimeoutError when late, EOFError when the
        client closes before the end of them."""
        limit = self._limits.max_header_bytes
        async with asyncio.timeout(first_byte_within) as deadline:
            while not pending:
                await _read_into(reader, pending)
            whole_by = asyncio.get_running_loop().time() + self._limits.header_timeout
            deadline.reschedule(min(whole_by, deadline.when() or whole_by))
            while (end := _END_OF_HEAD.search(pending)) is None:
                if len(pending) > limit:
                    return None
                await _read_into(reader, pending)
        if end.end() > limit:
            return None
        head = bytes(pending[: end.end()])
        del pending[: end.end()]
        return head

    def _evict(self) -> bool:
        """Close the connection that has waited longest for a request, if any waits."""
        writer = next(iter(self._waiting), None)
        if writer is None:
            return False
        del self._waiting[writer]
        self._open.discard(writer)
        writer.transport.abort()
        return True


class _Request(NamedTuple):
    method: str
    path: str
    accept: str
    gzip: bool
    keep_alive: bool
    received: float
    """The clock when the request had arrived whole."""
    query: str = ""
    """The target's query string (after ``?``)."""


class _Answer(NamedTuple):
    status: HTTPStatus
    body: bytes
    content_type: str = "text/plain"
    headers: tuple[tuple[str, str], ...] = ()


SECURITY_HEADERS = (
    ("Content-Security-Policy", page.CONTENT_SECURITY_POLICY),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
)
"""Sent with every answer, errors included: a browser runs nothing of a page or of a JSON or
text answer that holds query texts (no script, no other style, no guessing the content type),
shows none of them in a frame of another site, and tells the links' targets nothing."""

_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_VERSION = re.compile(r"HTTP/(\d)\.(\d)")
_TOO_LARGE = _Answer(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"request headers too large\n")
_BUSY = _Answer(HTTPStatus.SERVICE_UNAVAILABLE, b"busy: too many connections\n",
                headers=(("Retry-After", "1"),))


def _parse(head: bytes, received: float) -> _Request | _Answer:
    """The request of a request line and headers, or the error answer that closes."""
    line, _, rest = head.partition(b"\n")
    words = line.decode("latin-1").split()
    version = _VERSION.fullmatch(words[2]) if len(words) == 3 else None
    if version is None:
        return _Answer(HTTPStatus.BAD_REQUEST, b"bad request line\n")
    if version[1] != "1":
        return _Answer(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, b"HTTP/1.0 and HTTP/1.1 only\n")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest))
    except http.client.HTTPException:
        return _Answer(HTTPStatus.BAD_REQUEST, b"bad headers\n")
    method, target, _ = words
    if method not in ("GET", "HEAD"):
        return _Answer(HTTPStatus.NOT_IMPLEMENTED, f"unsupported method {method!r}\n".encode(),
                       headers=(("Allow", "GET, HEAD"),))
    connection = {token.strip().lower() for token in headers.get("Connection", "").split(",")}
    has_body = "Transfer-Encoding" in headers or headers.get("Content-Length", "0") != "0"
    keep_alive = not has_body and (
        "close" not in connection if version[2] != "0" else "keep-alive" in connection
    )
    path, _, query = target.partition("?")
    return _Request(
        method, path, headers.get("Accept", ""),
        _accepts_gzip(headers.get("Accept-Encoding", "")), keep_alive, received, query,
    )


def _accepts_gzip(accept_encoding: str) -> bool:
    """Whether ``Accept-Encoding`` lists gzip with a weight above 0 (``gzip;q=0`` refuses)."""
    for item in accept_encoding.split(","):
        coding, *parameters = (part.strip() for part in item.split(";"))
        if coding.lower() in ("gzip", "x-gzip"):
            weight = next((p[2:] for p in parameters if p.lower().startswith("q=")), "1")
            try:
                return float(weight) > 0
            except ValueError:
                return False
    return False


def _write(
    writer: asyncio.StreamWriter, answer: _Answer, keep_alive: bool, head_only: bool
) -> None:
    lines = [
        f"HTTP/1.1 {answer.status.value} {answer.status.phrase}",
        f"Date: {formatdate(usegmt=True)}",
        f"Content-Type: {answer.content_type}",
        f"Content-Length: {len(answer.body)}",
        *(f"{name}: {value}" for name, value in (*answer.headers, *SECURITY_HEADERS)),
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(answer.body)


async def _read_into(reader: asyncio.StreamReader, pending: bytearray) -> None:
    chunk = await reader.read(16384)
    if not chunk:
        raise EOFError("the client closed the connection")
    pending += chunk


class _Site:
    """The answers to GET and HEAD, made in the worker threads."""

    def __init__(
        self, registry: CollectorRegistry, ready: Readiness, alive: Readiness, pages: _Pages,
        status: Status | None = None,
    ) -> None:
        self._ready = ready
        self._alive = alive
        self._pages = pages
        self._status = status

    def answer(self, request: _Request) -> _Answer:
        if request.path == "/metrics":
            return self._metrics(request)
        if request.path == "/healthz":
            return _Answer(HTTPStatus.OK, b"ok\n")
        if request.path == "/readyz":
            return _probe(self._ready(), "ready")
        if request.path == "/livez":
            return _probe(self._alive(), "alive")
        if self._status is not None and request.path in ("/", "/queries", "/queries/state"):
            try:
                return self._show(request, self._status)
            except Exception as error:
                log.exception("rendering %s failed", request.path)
                return _Answer(HTTPStatus.INTERNAL_SERVER_ERROR,
                               f"rendering failed: {error!r}\n".encode())
        return _Answer(HTTPStatus.NOT_FOUND, (
            b"not found: try /, /queries, /metrics, /healthz, /livez or /readyz\n"
            if self._status is not None else
            b"not found: try /metrics, /healthz, /livez or /readyz\n"
        ))

    def _show(self, request: _Request, status: Status) -> _Answer:
        """The status page or the query lists, filtered by the query string."""
        asked = {k: v[-1] for k, v in parse_qs(request.query).items()}
        unknown = asked.keys() - {"class", "window", "list"}
        if unknown:
            return _Answer(HTTPStatus.BAD_REQUEST, (
                f"unknown parameter {sorted(unknown)[0]!r}: filters are class, window and "
                "list\n").encode())
        if request.path == "/queries/state":
            state = status.state()
            if state is None:
                return _Answer(HTTPStatus.SERVICE_UNAVAILABLE,
                               b"query lists not computed yet: they come with the first "
                               b"checkpoint\n", headers=(("Retry-After", "5"),))
            return _Answer(HTTPStatus.OK, STATE.dump_json(state), "application/json")
        queries = status.queries()
        if request.path == "/":
            return _Answer(HTTPStatus.OK, page.render(status.export(), queries,
                                                      asked.get("class")),
                           "text/html; charset=utf-8")
        if queries is None:
            return _Answer(HTTPStatus.SERVICE_UNAVAILABLE,
                           b"query lists not computed yet: they come with the first "
                           b"checkpoint\n", headers=(("Retry-After", "5"),))
        try:
            chosen = select(queries, asked.get("class"), asked.get("window"), asked.get("list"))
        except FilterError as error:
            return _Answer(HTTPStatus.BAD_REQUEST, f"{error}\n".encode())
        return _Answer(HTTPStatus.OK, json.dumps(chosen, indent=1).encode() + b"\n",
                       "application/json")

    def _metrics(self, request: _Request) -> _Answer:
        try:
            content_type, body = self._pages.get(request.accept, request.gzip, request.received)
        except Exception as error:  # a scrape must say it failed, and the log why
            log.exception("collecting /metrics failed")
            return _Answer(HTTPStatus.INTERNAL_SERVER_ERROR,
                           f"collecting metrics failed: {error!r}\n".encode())
        headers = [("Vary", "Accept, Accept-Encoding")]
        if request.gzip:
            headers.append(("Content-Encoding", "gzip"))
        return _Answer(HTTPStatus.OK, body, content_type, tuple(headers))


def _probe(reason: str | None, word: str) -> _Answer:
    if reason is None:
        return _Answer(HTTPStatus.OK, f"{word}\n".encode())
    return _Answer(HTTPStatus.SERVICE_UNAVAILABLE, f"not {word}: {reason}\n".encode())


@dataclass(frozen=True)
class _Page:
    started: float
    """The clock when its rendering began."""
    body: bytes
    gzipped: bytes | None = None


class _Pages:
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
        self._pages: dict[str, _Page] = {}

    def get(self, accept: str, gzipped: bool, received: float) -> tuple[str, bytes]:
        """The content type and the body (gzip-compressed if asked) for a scrape received at
        ``received``."""
        encoder, content_type = choose_encoder(accept)
        with self._lock:
            page = self._pages.get(content_type)
            if page is None or page.started < received - self._max_age:
                started = self._clock()
                page = _Page(started, encoder(self._registry))
                # content types come from the clients: stale pages go, so they cannot pile up
                self._pages = {kind: old for kind, old in self._pages.items()
                               if old.started >= started - self._max_age}
            if gzipped and page.gzipped is None:
                page = replace(page, gzipped=gzip.compress(page.body, compresslevel=6, mtime=0))
            self._pages[content_type] = page
        return content_type, page.gzipped if gzipped and page.gzipped is not None else page.body


class _Workers:
    """A fixed set of daemon threads running jobs in turn: answers never take more threads,
    however many the connections, and a job stuck in a collector does not hold up exit."""

    def __init__(self, count: int) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"metrics-http-{i}", daemon=True)
            for i in range(count)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, job: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        self._jobs.put((job, future))
        return future

    def stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, future = item
            if future.set_running_or_notify_cancel():  # else its connection is gone
                try:
                    future.set_result(job())
                except Exception as error:
                    future.set_exception(error)


def _listen(address: tuple[str, int], backlog: int) -> socket.socket:
    host, port = address
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=backlog)


def _log_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    error = context.get("exception")
    if not isinstance(error, OSError):
        log.error("metrics endpoint: %s", context["message"], exc_info=error)
    elif "socket" in context:  # the listening socket's: accept() failed, out of file descriptors
        log.warning("metrics endpoint: %s: %s", context["message"], error)
    else:  # a client's connection failed: the client's business
        log.debug("metrics endpoint: %s", context["message"], exc_info=error)


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
