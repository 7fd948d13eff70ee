"""The local broker's ports: free, distinct, and outside the kernel's ephemeral range where
there is room (a port of that range may be taken by an outgoing connection first)."""

from __future__ import annotations

import socket

from monitor.cli.broker import PORTS_FROM, _ephemeral_low, free_port


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    ports = [free_port() for _ in range(100)]
    assert len(set(ports)) == len(ports)
    low = _ephemeral_low()
    if low > PORTS_FROM + 1000:
        assert all(PORTS_FROM <= port < low for port in ports)
    for port in ports[:5]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
