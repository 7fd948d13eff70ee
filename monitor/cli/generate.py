"""``searchmon generate``: generated traffic to a JSONL file or to Kafka, each message to its
topic."""

from __future__ import annotations

import argparse
import sys

from monitor.cli.common import EXIT_OK


def command(args: argparse.Namespace) -> int:
    from monitor.inputs.generate import Regression, Traffic, World, messages

    world = World.build(args.seed)
    start = Traffic().start
    traffic = Traffic(
        seed=args.seed, start=start, sessions_per_second=args.sessions_per_second,
        duration=args.duration, malformed_rate=args.malformed_rate,
        duplicate_rate=args.duplicate_rate, judged_every=args.judged_every,
        judged_queries=args.judged_queries, qrels=args.qrels,
        regression=(Regression(
            args.regression_class, start + args.regression_after,
            start + args.regression_until if args.regression_until is not None else None,
        ) if args.regression_class else None),
    )
    stream = messages(world, traffic)
    if args.kafka:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=args.kafka, linger_ms=20)
        for message in stream:
            topic = args.judgments_topic if message.judged else args.topic
            producer.send(topic, key=message.key.encode(), value=message.line)
        producer.flush()
        producer.close()
        return EXIT_OK
    out = args.output.open("wb") if args.output else sys.stdout.buffer
    try:
        for message in stream:
            out.write(message.line + b"\n")
    finally:
        if args.output:
            out.close()
    return EXIT_OK
