"""The HTTP endpoint against real sockets: what a stalled, half-sent or idle client costs (no
scrape, no thread), the limits and timeouts, the page cache, HEAD, gzip, and the answers kept
from before. No timed assertions: tests wait on conditions, and the cache's clock is a fake."""

from __future__ import annotations

import gzip
import http.client
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from monitor.serve.http import Limits, tls_context
from monitor.serve.routes import MetricsServer, Readiness
from tests.support.wait import wait_for

OPENMETRICS = "application/openmetrics-text; version=1.0.0"

needs_proc = pytest.mark.skipif(
    not Path("/proc/net/tcp").exists(), reason="reads the server's sockets in /proc/net/tcp"
)


class Collections:
    """A collector that counts its collections and exposes the count, so a page shows which
    collection made it; with a ``gate``, each collection waits for it to open."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self._gate = gate
        self._lock = threading.Lock()

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            self.calls += 1
            number = self.calls
        self.entered.set()
        if self._gate is not None:
            assert self._gate.wait(60), "the test opens the gate"
        yield GaugeMetricFamily("test_collection", "which collection made the page", number)


def counted() -> tuple[CollectorRegistry, Collections]:
    registry = CollectorRegistry()
    collections = Collections()
    registry.register(collections)
    return registry, collections


def static_registry() -> CollectorRegistry:
    """A page worth compressing, the same at every scrape."""
    registry = CollectorRegistry()
    queries = Counter("search_queries", "Queries.", ["query_class"], registry=registry)
    for number in range(200):
        queries.labels(f"class{number}").inc(number)
    return registry


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def serving(registry: CollectorRegistry, **options: Any) -> Iterator[MetricsServer]:
    server = MetricsServer(("127.0.0.1", 0), registry, **options).start()
    try:
        yield server
    finally:
        server.close()


class Reply:
    def __init__(self, response: http.client.HTTPResponse) -> None:
        self.status = response.status
        self.headers = {name.lower(): value for name, value in response.getheaders()}
        self.body = response.read()


def fetch(
    port: int, path: str = "/metrics", method: str = "GET", headers: dict[str, str] | None = None,
    connection: http.client.HTTPConnection | None = None,
) -> Reply:
    """One exchange, on ``connection`` if given (kept open), else on a connection of its own."""
    own = connection is None
    conn = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, headers=headers or {})
        return Reply(conn.getresponse())
    finally:
        if own:
            conn.close()


def server_side_connections(port: int) -> int:
    """The server's accepted sockets it has not closed yet (established or closing)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                if int(local.rsplit(":", 1)[1], 16) == port and state in ("01", "08"):
                    count += 1  # ESTABLISHED, CLOSE_WAIT
    return count


def connect(port: int, data: bytes = b"") -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port), timeout=30)
    client.sendall(data)
    return client


def closed_by_server(client: socket.socket) -> bool:
    """Waits (up to the socket's timeout) for the server to close the connection."""
    try:
        while client.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


HALF_SENT = [b"GET /metrics HTTP/1.1\r\nHost: x\r\n", b"GET /metrics HTTP/1.0\r\n"]


@needs_proc
@pytest.mark.parametrize("half", HALF_SENT)
def test_half_sent_requests_run_no_scrape(half: bytes) -> None:
    """The reported flood: the request line and maybe headers, no blank line, then close.
    (Before: each one ran a full scrape when the client closed.)"""
    registry, collections = counted()
    with serving(registry) as server:
        clients = [connect(server.port, half) for _ in range(200)]
        for client in clients:
            client.close()
        wait_for(lambda: server_side_connections(server.port) == 0, "the server closes them")
        assert collections.calls == 0
        assert fetch(server.port).status == 200
        assert collections.calls == 1


@needs_proc
def test_idle_connections_take_no_thread_and_metrics_still_answers() -> None:
    """200 connections that say nothing, or half a request, and stay. (Before: a thread each.)"""
    registry, collections = counted()
    with serving(registry) as server:
        threads = threading.active_count()
        idle = [connect(server.port, HALF_SENT[0] if n % 2 else b"") for n in range(200)]
        try:
            reply = fetch(server.port)  # accepted after all of them
            assert reply.status == 200 and b"test_collection 1.0" in reply.body
            assert threading.active_count() <= threads
            assert collections.calls == 1
        finally:
            for client in idle:
                client.close()


@needs_proc
def test_beyond_max_connections_the_longest_waiting_makes_room() -> None:
    registry, _ = counted()
    with serving(registry, limits=Limits(max_connections=8, header_timeout=60)) as server:
        idle = [connect(server.port) for _ in range(20)]
        try:
            assert fetch(server.port).status == 200
            wait_for(lambda: server_side_connections(server.port) == 7, "13 are evicted")
            assert all(closed_by_server(client) for client in idle[:13])
            for client in idle[13:]:
                client.setblocking(False)
                with pytest.raises(BlockingIOError):  # open, nothing to read
                    client.recv(1)
        finally:
            for client in idle:
                client.close()


def test_when_every_connection_is_being_answered_a_new_one_gets_503() -> None:
    gate, entered = threading.Event(), threading.Semaphore(0)

    def stuck() -> str | None:
        entered.release()
        gate.wait(60)
        return None

    registry, _ = counted()
    with serving(registry, ready=stuck, limits=Limits(max_connections=2)) as server:
        answers: list[int] = []
        readers = [threading.Thread(target=lambda: answers.append(
            fetch(server.port, "/readyz").status)) for _ in range(2)]
        for reader in readers:
            reader.start()
        for _ in readers:
            assert entered.acquire(timeout=60)
        busy = fetch(server.port, "/healthz")
        gate.set()
        for reader in readers:
            reader.join()
    assert (busy.status, busy.body, busy.headers["retry-after"]) == (
        503, b"busy: too many connections\n", "1")
    assert answers == [200, 200]


@pytest.mark.parametrize("sent", [b"", *HALF_SENT])
def test_a_request_not_whole_within_header_timeout_is_dropped_unanswered(sent: bytes) -> None:
    """(Before: such a connection held its thread for as long as the client liked.)"""
    registry, collections = counted()
    with serving(registry, limits=Limits(header_timeout=0.2)) as server:
        client = connect(server.port, sent)
        with client:
            assert closed_by_server(client)
        assert collections.calls == 0


@pytest.mark.slow
def test_the_default_header_timeout_drops_a_stalled_request() -> None:
    """As the previous test, with the daemon's limits (5 s): the socket waits up to 30 s."""
    registry, collections = counted()
    with serving(registry) as server:
        client = connect(server.port, HALF_SENT[0])
        with client:
            assert closed_by_server(client)
        assert collections.calls == 0


def test_an_idle_kept_alive_connection_is_closed_after_idle_timeout() -> None:
    registry, _ = counted()
    with serving(registry, limits=Limits(idle_timeout=0.2)) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            assert fetch(server.port, "/healthz", connection=conn).status == 200
            assert fetch(server.port, "/healthz", connection=conn).status == 200  # kept alive
            assert conn.sock is not None
            assert closed_by_server(conn.sock)
        finally:
            conn.close()


@pytest.mark.skipif(shutil.which("ss") is None, reason="ss shows a listening socket's backlog")
def test_the_listen_backlog_is_128() -> None:
    """(Before: 5, so 8 concurrent scrapers saw SYNs dropped and retried after 1 s.)"""
    registry, _ = counted()
    with serving(registry) as server:
        listed = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"],
                                capture_output=True, text=True, check=True).stdout.split()
    assert listed[0] == "LISTEN" and listed[2] == "128", listed


def test_concurrent_scrapes_render_once() -> None:
    gate = threading.Event()
    registry = CollectorRegistry()
    collections = Collections(gate)
    registry.register(collections)
    with serving(registry, clock=FakeClock()) as server:
        bodies: list[bytes] = []
        scrapers = [threading.Thread(target=lambda: bodies.append(fetch(server.port).body))
                    for _ in range(8)]
        for scraper in scrapers:
            scraper.start()
        assert collections.entered.wait(60)
        gate.set()
        for scraper in scrapers:
            scraper.join()
    assert collections.calls == 1
    assert len(bodies) == 8 and set(bodies) == {b"# HELP test_collection which collection "
                                                b"made the page\n# TYPE test_collection gauge\n"
                                                b"test_collection 1.0\n"}


# a scrape at each time (seconds) gets the page of this collection; cache_seconds = 1, and a
# page serves the scrapes received until 1 s after its rendering began (inclusive)
FRESHNESS = [(0.0, 1), (0.5, 1), (1.0, 1), (1.001, 2), (1.5, 2), (2.001, 2), (2.002, 3)]


def test_a_page_is_never_older_than_cache_seconds() -> None:
    registry, collections = counted()
    clock = FakeClock()
    with serving(registry, clock=clock) as server:
        for now, collection in FRESHNESS:
            clock.now = now
            assert f"test_collection {collection}.0".encode() in fetch(server.port).body, now
    assert collections.calls == FRESHNESS[-1][1]


def test_each_content_type_has_its_page_and_gzip_reuses_it() -> None:
    registry, collections = counted()
    with serving(registry, clock=FakeClock()) as server:
        fetch(server.port)
        fetch(server.port, headers={"Accept-Encoding": "gzip"})
        fetch(server.port, method="HEAD")
        assert collections.calls == 1
        openmetrics = fetch(server.port, headers={"Accept": OPENMETRICS})
        assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
        assert collections.calls == 2


def test_a_failed_collection_is_not_cached(caplog: pytest.LogCaptureFixture) -> None:
    class FailsOnce(Collections):
        def collect(self) -> Iterator[GaugeMetricFamily]:
            if self.calls == 0:
                self.calls += 1
                raise ValueError("not yet")
            return super().collect()

    registry = CollectorRegistry()
    registry.register(FailsOnce())
    with serving(registry, clock=FakeClock()) as server:
        failed = fetch(server.port)
        assert (failed.status, failed.body) == (
            500, b"collecting metrics failed: ValueError('not yet')\n")
        assert b"test_collection 2.0" in fetch(server.port).body
    assert "collecting /metrics failed" in caplog.text


PATHS = ["/metrics", "/healthz", "/readyz", "/livez", "/nothing", "/metrics?name[]=x"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("encoding", ["", "gzip"])
def test_head_answers_the_headers_of_get_without_the_body(path: str, encoding: str) -> None:
    """On a kept-alive connection: a HEAD that sent a body would garble the GET after it.
    (Before: 501 on every path.)"""
    headers = {"Accept-Encoding": encoding} if encoding else {}
    with serving(static_registry(), ready=lambda: "lagging") as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            head = fetch(server.port, path, "HEAD", headers, conn)
            got = fetch(server.port, path, "GET", headers, conn)
        finally:
            conn.close()
    assert head.body == b"" and got.body
    assert head.status == got.status
    assert int(head.headers["content-length"]) == len(got.body)
    for name in ("content-type", "content-encoding", "vary"):
        assert head.headers.get(name) == got.headers.get(name), name


# Accept-Encoding, whether the page comes gzip-compressed
ENCODINGS = [
    ("gzip", True), ("GZIP", True), ("x-gzip", True), ("deflate, gzip;q=0.5", True),
    ("gzip;q=0", False),  # q=0: not acceptable (RFC 9110 12.4.2)
    ("identity", False), ("br", False), ("", False),
]


@pytest.mark.parametrize("accept", ["", OPENMETRICS])
@pytest.mark.parametrize(("encoding", "compressed"), ENCODINGS)
def test_gzip_when_accepted_decompresses_to_the_plain_page(
    accept: str, encoding: str, compressed: bool
) -> None:
    """(Before: never compressed; the daemon's 150 KB page is 15 KB gzip-compressed.)"""
    with serving(static_registry()) as server:
        plain = fetch(server.port, headers={"Accept": accept})
        reply = fetch(server.port, headers={"Accept": accept, "Accept-Encoding": encoding})
    assert "content-encoding" not in plain.headers
    assert reply.headers["content-type"] == plain.headers["content-type"]
    assert "Accept-Encoding" in reply.headers["vary"]
    if compressed:
        assert reply.headers["content-encoding"] == "gzip"
        assert len(reply.body) < len(plain.body) / 4
        assert gzip.decompress(reply.body) == plain.body
    else:
        assert "content-encoding" not in reply.headers and reply.body == plain.body


def test_urllib_and_prometheus_style_clients_get_the_page() -> None:
    with serving(static_registry()) as server:
        request = urllib.request.Request(
            f"http://127.0.0.1:{server.port}/metrics",
            headers={"Accept": OPENMETRICS, "Accept-Encoding": "gzip"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            text = gzip.decompress(response.read()).decode()
    assert 'search_queries_total{query_class="class7"} 7.0' in text and text.endswith("# EOF\n")


def exchange(port: int, data: bytes) -> bytes:
    """Sends ``data`` and reads until the server closes."""
    with connect(port, data) as client:
        received = b""
        while chunk := client.recv(65536):
            received += chunk
        return received


# the raw request, and parts of the answer in their order (the answers of pipelined requests
# in turn); statuses by code, as their phrases and the HTTP version of the status line are free
EXCHANGES = [
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", [b" 200 ", b"\r\nok\n"]),
    (b"GET /healthz HTTP/1.0\n\n", [b" 200 ", b"\r\nok\n"]),  # bare LF, as from nc
    (b"GET /nothing HTTP/1.1\r\nConnection: close\r\n\r\n",
     [b" 404 ", b"\r\nnot found: try /metrics, /healthz, /livez or /readyz\n"]),
    (b"GET /metrics HTTP/2.0\r\n\r\n", [b" 505 "]),
    (b"nonsense\r\n\r\n", [b" 400 "]),
    (b"POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi", [b" 501 "]),
    # new: an Allow header, keep-alive and pipelining, a bound on the request headers
    (b"POST /metrics HTTP/1.1\r\n\r\n", [b" 501 ", b"Allow: GET, HEAD\r\n"]),
    (b"GET /livez HTTP/1.1\r\n\r\nGET /readyz HTTP/1.1\r\nConnection: close\r\n\r\n",
     [b" 200 ", b"\r\nalive\n", b" 503 ", b"\r\nnot ready: catching up\n"]),
    (b"GET /metrics HTTP/1.1\r\nCookie: " + b"x" * 9000 + b"\r\n\r\n", [b" 431 "]),
]


@pytest.mark.parametrize(("sent", "answer"), EXCHANGES)
def test_raw_exchanges(sent: bytes, answer: list[bytes]) -> None:
    ready: Readiness = lambda: "catching up"  # noqa: E731
    with serving(static_registry(), ready=ready) as server:
        received = exchange(server.port, sent)
    position = 0
    for part in answer:
        assert part in received[position:], (part, received)
        position = received.index(part, position) + len(part)


def test_scrapes_are_not_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG", logger="monitor.serve.http")
    with serving(static_registry()) as server:
        assert fetch(server.port).status == 200
        assert fetch(server.port, "/nothing").status == 404
    assert not caplog.records


@pytest.fixture(scope="module")
def certified(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with a CA, and a server certificate for 127.0.0.1 signed by it."""
    if shutil.which("openssl") is None:
        pytest.skip("makes certificates with openssl")
    from tests.support.tls import certificates

    directory = tmp_path_factory.mktemp("certificates")
    certificates(directory)
    return directory


@needs_proc
def test_over_tls_stalled_clients_take_no_thread_and_no_scrape(certified: Path) -> None:
    """(Before: each TLS connection took a thread for its handshake, and a half-sent request
    over TLS ran a scrape when its client closed.)"""
    context = tls_context(certified / "server.crt", certified / "server.key")
    client_context = ssl.create_default_context(cafile=str(certified / "ca.crt"))
    registry, collections = counted()
    with serving(registry, tls=context) as server:
        threads = threading.active_count()
        silent = [connect(server.port) for _ in range(50)]  # never start the handshake
        for _ in range(20):
            with client_context.wrap_socket(connect(server.port),
                                            server_hostname="127.0.0.1") as half:
                half.sendall(HALF_SENT[0])
        with urllib.request.urlopen(f"https://127.0.0.1:{server.port}/metrics",
                                    context=client_context, timeout=30) as response:
            assert b"test_collection 1.0" in response.read()
        assert threading.active_count() <= threads
        for client in silent:
            client.close()
        wait_for(lambda: server_side_connections(server.port) == 0, "all are closed")
    assert collections.calls == 1


def test_a_tls_handshake_not_done_within_its_timeout_is_dropped(certified: Path) -> None:
    context = tls_context(certified / "server.crt", certified / "server.key")
    registry, _ = counted()
    with serving(registry, tls=context, limits=Limits(tls_handshake_timeout=0.2)) as server:
        client = connect(server.port)
        with client:
            assert closed_by_server(client)


SECURITY = ("content-security-policy", "x-content-type-options", "x-frame-options",
            "referrer-policy")


def head_of(received: bytes) -> tuple[int, dict[str, str]]:
    """The status and the headers (lower-case names) of the first answer in ``received``."""
    line, *fields = received.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    return int(line.split()[1]), {
        name.strip().lower(): value.strip()
        for name, _, value in (field.partition(":") for field in fields)
    }


def test_every_answer_carries_the_security_headers() -> None:
    """The page, the query lists, /metrics, the probes and every error answer, over HTTP: a
    policy that lets the page apply its own style sheet and nothing else, no content-type
    sniffing, no framing, no referrer."""
    import base64
    import hashlib
    import re

    from monitor.config import Config
    from monitor.core.export import export
    from monitor.core.pipeline import Pipeline
    from monitor.serve.page import Status
    from monitor.serve.queries import query_report, query_state
    from tests.support.events import query

    config = Config()
    pipeline = Pipeline(config)
    for s in range(6):
        pipeline.feed(query(f"e{s}", s, f"s{s}", f"q{s}"))
    figures = export(pipeline)
    computed = Status(lambda: figures, lambda: query_report([pipeline], pipeline, config),
                      lambda: query_state([pipeline], pipeline, config))
    waiting = Status(lambda: figures, lambda: None, lambda: None)
    not_ready: Readiness = lambda: "catching up"  # noqa: E731
    answers: dict[str, tuple[int, dict[str, str]]] = {}
    with serving(static_registry(), status=computed) as server:
        for path in ("/", "/?class=travel", "/queries", "/queries/state", "/metrics",
                     "/healthz", "/livez", "/readyz", "/nothing", "/queries?colour=red",
                     "/queries?list=none"):
            reply = fetch(server.port, path)
            answers[path] = reply.status, reply.headers
            if path == "/":
                page = reply.body.decode()
        reply = fetch(server.port, "/", "HEAD")
        answers["HEAD /"] = reply.status, reply.headers
        for raw in (b"nonsense\r\n\r\n", b"GET / HTTP/2.0\r\n\r\n",
                    b"POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
                    b"GET / HTTP/1.1\r\nCookie: " + b"x" * 9000 + b"\r\n\r\n"):
            answers[raw[:20].decode()] = head_of(exchange(server.port, raw))
    with serving(static_registry(), status=waiting, ready=not_ready) as server:
        for path in ("/queries", "/queries/state", "/readyz"):
            reply = fetch(server.port, path)
            answers[f"waiting {path}"] = reply.status, reply.headers
    statuses = sorted({status for status, _ in answers.values()})
    assert statuses == [200, 400, 404, 431, 501, 503, 505], answers
    for what, (_, headers) in answers.items():
        assert all(name in headers for name in SECURITY), (what, headers)
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"
    policy = {directive.split()[0]: directive.split()[1:]
              for directive in answers["/"][1]["content-security-policy"].split(";")}
    assert policy["default-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["base-uri"] == ["'none'"] and policy["form-action"] == ["'none'"]
    # the page needs exactly its one inline style sheet, which the policy names by its hash
    sheets = re.findall(r"<style>(.*?)</style>", page, re.DOTALL)
    assert len(sheets) == 1
    digest = base64.b64encode(hashlib.sha256(sheets[0].encode()).digest()).decode()
    assert policy["style-src"] == [f"'sha256-{digest}'"]
    # inline SVG (the judged trends) is part of the page and needs nothing more; an inline
    # style attribute would (tests/unit/test_page.py draws the trends without any)
    for needs_more in ("style=", "<script", "<img", "<iframe", "<link", "<form", "url("):
        assert needs_more not in page, needs_more
