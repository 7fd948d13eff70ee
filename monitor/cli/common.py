"""What the commands share: exit codes, the usage error, loading the configuration,
reading event files, writing messages to a file or to Kafka, logging as the arguments say,
waiting for a signal, reading a searchmon endpoint."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from monitor.config import Config
    from monitor.logs import Level
    from monitor.serve.queries import QueryState

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2

Read = TypeVar("Read")

HELD_TO_THE_END: list[object] = []
"""What a command leaves to be freed with the process (the tables of a closed replay): a
command run as the process ends without the interpreter's teardown (``main._exit_now``), and
freeing them one object at a time is work for nothing. Emptied when a command returns to a
caller instead."""


class UsageError(Exception):
    """Bad arguments, configuration or input file: reported on one line, exit code 2."""


def parse_time(text: str, what: str) -> float:
    """``text`` as epoch seconds: an ISO 8601 time with an offset (``2026-05-04T09:00:00Z``);
    ``UsageError`` naming ``what`` otherwise."""
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{what} {text!r}: expected an ISO 8601 time with an offset "
                         "(2026-05-04T09:00:00Z)") from None
    if moment.tzinfo is None:
        raise UsageError(f"{what} {text!r} has no offset (Z or +02:00)")
    return moment.timestamp()


def load(path: Path | None) -> Config:
    from monitor.config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as error:
        raise UsageError("invalid configuration " + str(error)) from None


def read_events(paths: Sequence[Path], read: Callable[[], Read]) -> Read:
    """``read()`` of the event files ``paths``; a missing or unreadable file and more
    searches than one reading keeps are usage errors."""
    from monitor.inputs.clicklog import TooManySearches

    for path in paths:
        if not path.is_file():
            raise UsageError(f"cannot read {path}: no such file")
    try:
        return read()
    except TooManySearches as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(f"cannot read the events: {error}") from None


def write_lines(lines: Iterable[bytes], output: Path | None) -> None:
    """Each line, newline-terminated, to the file ``output`` (None: standard output)."""
    out = output.open("wb") if output else sys.stdout.buffer
    try:
        for line in lines:
            out.write(line + b"\n")
    finally:
        if output:
            out.close()


def produce(bootstrap: str, messages: Iterable[tuple[str, str, bytes]], **options: Any) -> None:
    """Each ``(topic, key, value)`` to the Kafka of ``bootstrap``, all flushed before the
    return; ``options``: the producer's (kafka-python keyword arguments). A broker that
    cannot be reached, or refuses, is a ``UsageError`` naming it."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    topics: set[str] = set()
    try:
        producer = KafkaProducer(bootstrap_servers=bootstrap, **options)
        for topic, key, value in messages:
            topics.add(topic)
            producer.send(topic, key=key.encode(), value=value)
        producer.flush()
        producer.close()
    except KafkaError as error:
        where = f" ({', '.join(sorted(topics))})" if topics else ""
        raise UsageError(f"cannot produce to {bootstrap}{where}: {error}") from None


def setup_logging(args: argparse.Namespace, default: Level, config: Config | None = None) -> None:
    """Logging as the arguments say; the secrets of ``config`` are masked in every line."""
    from monitor.config import secret_values
    from monitor.logs import setup

    setup(args.log_level or default, args.log_format, args.log_unsafe,
          secrets=secret_values(config) if config is not None else ())


def wait_for_signal() -> None:
    import signal
    import threading

    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


def fetch(base: str, path: str) -> bytes:
    """The body of ``base + path`` from a searchmon endpoint (``top``, ``sample``): no proxy,
    the endpoints are the operator's own; ``UsageError`` when it cannot be read."""
    import urllib.error
    import urllib.request

    url = base.rstrip("/") + path
    shown = shown_url(url)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=30) as answer:
            body: bytes = answer.read()
            return body
    except urllib.error.HTTPError as error:
        from monitor.text import printable  # the answer is anybody's text

        raise UsageError(
            f"{shown}: {error.code} {printable(error.read().decode(errors='replace').strip())}"
        ) from None
    except (urllib.error.URLError, OSError) as error:
        raise UsageError(f"{shown}: {getattr(error, 'reason', error)}") from None


def query_state(urls: Sequence[str]) -> QueryState:
    """The query lists of the daemons at ``urls`` (``/queries/state``), merged as replicas
    (``top``, ``sample``); ``UsageError`` when one cannot be read or they do not merge."""
    from pydantic import ValidationError

    from monitor.core.snapshots import StateError
    from monitor.serve.queries import STATE, merge_replicas
    from monitor.text import printable

    try:
        return merge_replicas([STATE.validate_json(fetch(url, "/queries/state"))
                               for url in urls])
    except (ValidationError, StateError) as error:
        raise UsageError("cannot merge the replicas' query lists: "
                         + printable(str(error))) from None


def shown_url(url: str) -> str:
    """``url`` as an error may show it: a password in it masked."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = f"{parts.username}:***@" if parts.username else "***@"
        return urlunsplit(parts._replace(netloc=user + parts.netloc.rpartition("@")[2]))
    except ValueError:  # (a port that is no number): nothing of it shown but the scheme
        return url.partition(":")[0] + ":..."
