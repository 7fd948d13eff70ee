"""HTTP from the tests to a server on this machine: a page, and the samples of /metrics."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Loopback only: no proxy from the environment in between."""


def fetch(url: str, timeout: float = 30) -> tuple[int, bytes]:
    """The status and body of a GET (an HTTP error status is an answer, not an exception)."""
    try:
        with OPENER.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def get(url: str, timeout: float = 5) -> tuple[int, str]:
    """``fetch`` with the body as text."""
    status, body = fetch(url, timeout)
    return status, body.decode()


def samples(exposition: str) -> dict[str, float]:
    """``name{labels}`` -> value of every sample line of a text exposition."""
    values = {}
    for line in exposition.splitlines():
        match = re.match(r"^([a-z_:]+(?:\{[^}]*\})?) (\S+)$", line)
        if match:
            values[match[1]] = float(match[2])
    return values


def scrape(port: int) -> dict[str, float]:
    """The samples of ``/metrics`` on ``port``, or none while it does not answer 200."""
    try:
        status, body = get(f"http://127.0.0.1:{port}/metrics")
    except OSError:
        return {}
    return samples(body) if status == 200 else {}
