"""The HTTP transport: a hardened server that hands each request, once whole, to the
application's ``answer`` (``monitor.serve.routes``) and writes what it returns.

Whatever other clients do, the endpoint stays cheap and answers Prometheus: one event loop
holds the connections, so an idle or half-sent one costs a socket and no thread; a request is
answered only once its line and headers have arrived whole (a client that stalls or closes
before that runs nothing); a fixed set of worker threads makes the answers; one rendering of
``/metrics`` serves every scrape received within ``cache_seconds`` of its start. The bounds
are :class:`Limits`.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import logging
import queue
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from email.utils import formatdate
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Any, NamedTuple, Self, TypeVar

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


class HttpServer:
    """The transport in a background thread: each request, once whole, goes to ``answer``
    in a worker thread; ``headers`` go with every answer, errors included. ``close()``
    stops it."""

    def __init__(
        self, address: tuple[str, int], answer: Callable[[Request], Answer],
        tls: ssl.SSLContext | None = None, *, limits: Limits = Limits(),
        clock: Callable[[], float] = time.monotonic,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self._limits = limits
        self._tls = tls
        self._clock = clock
        self._answer = answer
        self._headers = headers
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

    @property
    def port(self) -> int:
        return int(self._socket.getsockname()[1])

    def start(self) -> Self:
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
            _write(writer, _BUSY, keep_alive=False, head_only=False, common=self._headers)
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
                if isinstance(request, Answer):
                    answer, keep_alive, head_only = request, False, False
                else:
                    job = partial(self._answer, request)
                    answer = await asyncio.wrap_future(self._workers.submit(job))
                    keep_alive, head_only = request.keep_alive, request.method == "HEAD"
                _write(writer, answer, keep_alive, head_only, self._headers)
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


class Request(NamedTuple):
    method: str
    path: str
    accept: str
    gzip: bool
    keep_alive: bool
    received: float
    """The clock when the request had arrived whole."""
    query: str = ""
    """The target's query string (after ``?``)."""


class Answer(NamedTuple):
    status: HTTPStatus
    body: bytes
    content_type: str = "text/plain"
    headers: tuple[tuple[str, str], ...] = ()


_END_OF_HEAD = re.compile(rb"\r?\n\r?\n")
_VERSION = re.compile(r"HTTP/(\d)\.(\d)")
_TOO_LARGE = Answer(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"request headers too large\n")
_BUSY = Answer(HTTPStatus.SERVICE_UNAVAILABLE, b"busy: too many connections\n",
                headers=(("Retry-After", "1"),))


def _parse(head: bytes, received: float) -> Request | Answer:
    """The request of a request line and headers, or the error answer that closes."""
    line, _, rest = head.partition(b"\n")
    words = line.decode("latin-1").split()
    version = _VERSION.fullmatch(words[2]) if len(words) == 3 else None
    if version is None:
        return Answer(HTTPStatus.BAD_REQUEST, b"bad request line\n")
    if version[1] != "1":
        return Answer(HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, b"HTTP/1.0 and HTTP/1.1 only\n")
    try:
        headers = http.client.parse_headers(io.BytesIO(rest))
    except http.client.HTTPException:
        return Answer(HTTPStatus.BAD_REQUEST, b"bad headers\n")
    method, target, _ = words
    if method not in ("GET", "HEAD"):
        return Answer(HTTPStatus.NOT_IMPLEMENTED, f"unsupported method {method!r}\n".encode(),
                       headers=(("Allow", "GET, HEAD"),))
    connection = {token.strip().lower() for token in headers.get("Connection", "").split(",")}
    has_body = "Transfer-Encoding" in headers or headers.get("Content-Length", "0") != "0"
    keep_alive = not has_body and (
        "close" not in connection if version[2] != "0" else "keep-alive" in connection
    )
    path, _, query = target.partition("?")
    return Request(
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
    writer: asyncio.StreamWriter, answer: Answer, keep_alive: bool, head_only: bool,
    common: tuple[tuple[str, str], ...] = (),
) -> None:
    lines = [
        f"HTTP/1.1 {answer.status.value} {answer.status.phrase}",
        f"Date: {formatdate(usegmt=True)}",
        f"Content-Type: {answer.content_type}",
        f"Content-Length: {len(answer.body)}",
        *(f"{name}: {value}" for name, value in (*answer.headers, *common)),
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
