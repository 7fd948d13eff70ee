"""``searchmon baseline accept``: a ``baseline`` message, to the judgments topic or printed."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from monitor.cli.common import EXIT_OK, UsageError, load


def command(args: argparse.Namespace) -> int:
    from monitor.config import Config
    from monitor.inputs.events import JudgedMessage, Rejection
    from monitor.inputs.native import NativeDecoder

    if args.config is None and not args.print:
        raise UsageError("baseline accept: give --config (to produce to its judgments topic) "
                         "or --print")
    config = load(args.config) if args.config is not None else Config()
    message: dict[str, object] = {
        "type": "baseline",
        "timestamp": args.at or datetime.now(UTC).isoformat(timespec="seconds").replace(
            "+00:00", "Z"
        ),
        "reason": args.reason, "by": args.by,
    }
    for key, value in (("sample_id", args.sample), ("query_class", args.class_),
                       ("measure", args.measure)):
        if value is not None:
            message[key] = value
    checked = NativeDecoder(config).decode(json.dumps(message).encode())
    if isinstance(checked, Rejection):
        raise UsageError(f"baseline accept: {checked.detail}")
    assert isinstance(checked, JudgedMessage), "a baseline message decodes as a judged one"
    line = json.dumps(dict(checked.event), separators=(",", ":")).encode()
    if args.print:
        sys.stdout.buffer.write(line + b"\n")
        return EXIT_OK
    from kafka import KafkaProducer

    kafka = config.kafka
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all",
                             client_id="searchmon-baseline", **kafka.client_options())
    try:
        producer.send(kafka.judgments_topic, key=b"baseline", value=line).get(timeout=30)
    finally:
        producer.close(timeout=10)
    print(f"accepted: {line.decode()} -> {kafka.judgments_topic}", file=sys.stderr)
    return EXIT_OK
