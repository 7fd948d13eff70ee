"""A SASL_PLAINTEXT listener with the PLAIN mechanism in front of a local broker.

The embedded broker (Tansu) offers no SASL/PLAIN, so the tests that need a client to
authenticate put this proxy in front of it: it answers ApiVersions, SaslHandshake and
SaslAuthenticate itself, checks the credentials, refuses any other request before them (as a
broker's SASL listener does), and after them forwards every request to the broker byte for
byte and every response back. The broker must advertise the proxy's address (``Broker(...,
advertised=proxy.address)``), so that clients reach every node through it.

Kafka protocol framing: a 4-byte big-endian size, then the request header (api_key int16,
api_version int16, correlation_id int32, ...). Only loopback addresses are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kafka.protocol.metadata.api_versions import ApiVersionsResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED = 33, 34, 58
OWN_VERSIONS = {SASL_HANDSHAKE: (1, 1), SASL_AUTHENTICATE: (0, 2)}
"""What the proxy answers itself (SaslHandshake v0, raw SASL frames, is not offered)."""


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One request or response without its size prefix; None at the end of the stream."""
    try:
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


def framed(message: bytes) -> bytes:
    return struct.pack(">i", len(message)) + message


class SaslProxy:
    """Listens on 127.0.0.1 (an event loop in a thread of its own) and counts what it saw:
    ``authenticated`` and ``refused`` logins, ``forwarded`` requests by api key."""

    def __init__(self, upstream_port: int, users: Mapping[str, str]) -> None:
        self.upstream_port = upstream_port
        self.users = dict(users)
        self.authenticated = 0
        self.refused = 0
        self.unauthenticated_requests = 0
        self.forwarded: Counter[int] = Counter()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> SaslProxy:
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        )
        self._server = started.result(timeout=10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in list(self._connections):
                task.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            upstream = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            first = await self._authenticate(reader, writer, upstream)
            if first is not None:
                await self._pump(reader, writer, upstream, first)
        except (OSError, asyncio.IncompleteReadError):
            pass  # either side went away
        finally:
            self._connections.discard(task)
            writer.close()
            if upstream is not None:
                upstream[1].close()

    async def _authenticate(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> bytes | None:
        """The exchange up to a successful login; returns the first request after it (None:
        the connection is to be closed)."""
        mechanism_chosen = False
        while True:
            request = await read_frame(reader)
            if request is None:
                return None
            api_key, version, correlation_id = struct.unpack_from(">hhi", request)
            if api_key == API_VERSIONS:
                writer.write(framed(await self._api_versions(request, version, upstream)))
            elif api_key == SASL_HANDSHAKE and version in (1,):
                asked = SaslHandshakeRequest.decode(request, version=version, header=True)
                mechanism_chosen = asked.mechanism == "PLAIN"
                answer = SaslHandshakeResponse[version](
                    error_code=0 if mechanism_chosen else UNSUPPORTED_SASL_MECHANISM,
                    mechanisms=["PLAIN"],
                )
                writer.write(self._encode(answer, correlation_id))
                if not mechanism_chosen:
                    return None
            elif api_key == SASL_AUTHENTICATE and mechanism_chosen:
                token = SaslAuthenticateRequest.decode(
                    request, version=version, header=True
                ).auth_bytes
                accepted = self._check_plain(bytes(token))
                answer = SaslAuthenticateResponse[version](
                    error_code=0 if accepted else SASL_AUTHENTICATION_FAILED,
                    error_message=None if accepted else "invalid credentials",
                    auth_bytes=b"", session_lifetime_ms=0,
                )
                writer.write(self._encode(answer, correlation_id))
                await writer.drain()
                if not accepted:
                    self.refused += 1
                    return None
                self.authenticated += 1
                return await read_frame(reader)
            else:
                self.unauthenticated_requests += 1
                return None
            await writer.drain()

    def _check_plain(self, token: bytes) -> bool:
        """RFC 4616: ``[authzid] NUL authcid NUL passwd``, UTF-8."""
        parts = token.split(b"\0")
        if len(parts) != 3:
            return False
        authzid, user, password = (part.decode("utf-8", "replace") for part in parts)
        return authzid in ("", user) and self.users.get(user) == password

    async def _api_versions(
        self, request: bytes, version: int,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> bytes:
        """The broker's answer with the proxy's own SASL versions in it (the broker's
        would be about its own listener)."""
        upstream[1].write(framed(request))
        await upstream[1].drain()
        response = await read_frame(upstream[0])
        if response is None:
            raise OSError("the broker closed the connection")
        decoded = ApiVersionsResponse.decode(response, version=version, header=True)
        if decoded.error_code != 0:
            return response  # a version the broker does not speak: its answer says which
        for entry in decoded.api_keys:
            if entry.api_key in OWN_VERSIONS:
                entry.min_version, entry.max_version = OWN_VERSIONS[entry.api_key]
        encoded: bytes = decoded.encode(header=True)
        return encoded

    @staticmethod
    def _encode(answer: Any, correlation_id: int) -> bytes:
        answer.with_header(correlation_id=correlation_id)
        encoded: bytes = answer.encode(header=True, framed=True)
        return encoded

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter], first: bytes,
    ) -> None:
        """Requests to the broker one frame at a time (counted), its responses back as they
        come, until either side closes."""
        broker_reader, broker_writer = upstream

        async def responses() -> None:
            while chunk := await broker_reader.read(65536):
                writer.write(chunk)
                await writer.drain()

        back = asyncio.create_task(responses())
        try:
            request: bytes | None = first
            while request is not None and not back.done():
                self.forwarded[struct.unpack_from(">h", request)[0]] += 1
                broker_writer.write(framed(request))
                await broker_writer.drain()
                request = await read_frame(reader)
        finally:
            back.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await back
